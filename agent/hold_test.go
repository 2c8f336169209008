package agent

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/sequencer/report"
)

// An ISO is held while a plan lists it, however the plan writes its checksum.
func TestHeldBy(t *testing.T) {
	t.Parallel()
	hex := strings.Repeat("ab", 64)
	tests := []struct {
		name string
		held []string
		want bool
	}{
		{name: "no plan", want: false},
		{name: "bare hex", held: []string{hex}, want: true},
		{name: "with its prefix, in capitals", held: []string{"SHA512:" + strings.ToUpper(hex)}, want: true},
		{name: "another ISO", held: []string{strings.Repeat("cd", 64)}, want: false},
		{name: "an unusable checksum", held: []string{"md5:00"}, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, heldBy(report.Instruction{Held: tc.held}, hex))
		})
	}
}

// claimStore is an image store of which only the pins are used: the releases claiming images.
type claimStore struct {
	preload.Store
	claims map[string]bool
}

func (c *claimStore) Pin(_ context.Context, release string, _ []string) (int, error) {
	c.claims[release] = true
	return 1, nil
}

func (c *claimStore) Unpin(_ context.Context, drop func(string) bool) (int, error) {
	n := 0
	for r := range c.claims {
		if drop(r) {
			delete(c.claims, r)
			n++
		}
	}
	return n, nil
}

// What an agent saw of a plan, by the time no plan holds its ISO any more, decides which
// release's image pins go: an installed release's every other claim, a Failed one's own, and none
// when the plan went away unseen in either state (deleted in flight, or faster than read).
func TestUnpinByWhatWasSeen(t *testing.T) {
	t.Parallel()
	hex := strings.Repeat("cd", 64)
	sum := "sha512:" + hex
	tests := []struct {
		name  string
		reads []report.Instruction // the reads of the plans while the ISO was held, the last one releasing it
		want  []string             // the releases still claiming images
	}{
		{"installed, then deleted", []report.Instruction{{Held: []string{sum}}, {Installed: []string{sum}}, {}}, []string{"v2"}},
		{"installed, still listed", []report.Instruction{{Held: []string{sum}}, {Installed: []string{sum}}}, []string{"v2"}},
		{"Failed, then deleted", []report.Instruction{{Held: []string{sum}, Failed: []string{sum}}, {}}, []string{"v1"}},
		{"deleted in flight", []report.Instruction{{Held: []string{sum}}, {}}, []string{"v1", "v2"}},
		{"another ISO installed", []report.Instruction{{Held: []string{sum}}, {Installed: []string{"sha512:" + strings.Repeat("ef", 64)}}}, []string{"v1", "v2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := &claimStore{claims: map[string]bool{"v1": true, "v2": true}}
			a := &Agent{images: store, log: slog.New(slog.DiscardHandler)}
			var seen planSeen
			for _, in := range tt.reads {
				seen.note(in, hex)
			}
			require.False(t, heldBy(tt.reads[len(tt.reads)-1], hex), "the last read releases the ISO")
			a.unpin(t.Context(), "v2", seen.installed.Load(), seen.failed.Load())
			require.ElementsMatch(t, tt.want, slices.Collect(maps.Keys(store.claims)))
		})
	}
}
