package agent

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
