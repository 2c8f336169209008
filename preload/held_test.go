package preload_test

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload"
)

const (
	digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	digestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	digestC = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
	digestD = "sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
)

// An image held under a release's name is the release's when the name points to the manifest the
// release records, or, where the release records only a config (docker save's classic layout),
// when one of the held image's complete manifests has that config. Anything else is another
// image, and says what it holds and what the release names.
func TestImageDigestMatch(t *testing.T) {
	t.Parallel()
	const ref = "registry.k8s.io/kube-apiserver:v1.34.4"
	tests := []struct {
		name    string
		release preload.ImageDigest
		held    preload.Held
		same    bool
		say     string
	}{
		{
			name:    "the manifest the release records",
			release: preload.ImageDigest{Ref: ref, Manifest: digestA, Config: digestC},
			held:    preload.Held{Ref: ref, Target: digestA, Configs: []string{digestC}},
			same:    true,
		},
		{
			name:    "another manifest, another image",
			release: preload.ImageDigest{Ref: ref, Manifest: digestB},
			held:    preload.Held{Ref: ref, Target: digestA, Configs: []string{digestC}},
			say:     "image " + ref + " held at " + digestA + ", the release names " + digestB,
		},
		{
			name:    "the manifest decides where recorded, even over the same config",
			release: preload.ImageDigest{Ref: ref, Manifest: digestB, Config: digestC},
			held:    preload.Held{Ref: ref, Target: digestA, Configs: []string{digestC}},
			say:     "image " + ref + " held at " + digestA + ", the release names " + digestB,
		},
		{
			name:    "only a config recorded: the held manifest has it",
			release: preload.ImageDigest{Ref: ref, Config: digestC},
			held:    preload.Held{Ref: ref, Target: digestA, Configs: []string{digestC}},
			same:    true,
		},
		{
			name:    "only a config recorded: one manifest of a held index has it",
			release: preload.ImageDigest{Ref: ref, Config: digestC},
			held:    preload.Held{Ref: ref, Target: digestA, Configs: []string{digestD, digestC}},
			same:    true,
		},
		{
			name:    "only a config recorded: no held manifest has it",
			release: preload.ImageDigest{Ref: ref, Config: digestC},
			held:    preload.Held{Ref: ref, Target: digestA, Configs: []string{digestD}},
			say:     "image " + ref + " held with config " + digestD + ", the release names config " + digestC,
		},
		{
			name:    "only a config recorded: the held image has no complete manifest",
			release: preload.ImageDigest{Ref: ref, Config: digestC},
			held:    preload.Held{Ref: ref, Target: digestA},
			say:     "image " + ref + " held with config none, the release names config " + digestC,
		},
		{
			name:    "nothing recorded: judged by name",
			release: preload.ImageDigest{Ref: ref},
			held:    preload.Held{Ref: ref, Target: digestA},
			same:    true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, same := tc.release.Match(tc.held)
			require.Equal(t, tc.same, same)
			if !same {
				require.Equal(t, tc.say, m.String())
				require.Equal(t, ref, m.Ref)
			}
		})
	}
}

// The preload takes an image held under a release's name as present only when it is the
// release's: held as another, its archive is imported and the plan says why; after the import the
// name must point to the release's image, or the preload reports the image missing. The release's
// digests are asked for only when the store holds a listed image by name.
func TestRunHeldAsAnotherImage(t *testing.T) {
	t.Parallel()
	const a, aside = "docker.io/library/a:1", "docker.io/library/a-sidecar:1"
	digestsOf := func(calls *atomic.Int32) preload.Option {
		return preload.WithDigests(func(context.Context) ([]preload.ImageDigest, error) {
			calls.Add(1)
			return []preload.ImageDigest{{Ref: a, Manifest: digestB}, {Ref: aside, Config: digestC}}, nil
		})
	}
	tests := []struct {
		name string
		// held is what the store holds before the preload; imports what importing makes it hold.
		held, imports []preload.Held
		// want: the archive imported, the images present after, the digests asked for.
		imported bool
		present  int
		replace  []string
		asked    bool
		err      error
	}{
		{
			name:     "nothing held: imported, digests never asked for",
			imports:  []preload.Held{{Ref: a, Target: digestB}, {Ref: aside, Target: digestA, Configs: []string{digestC}}},
			imported: true, present: 2,
		},
		{
			name:    "the release's images held: skipped",
			held:    []preload.Held{{Ref: a, Target: digestB}, {Ref: aside, Target: digestA, Configs: []string{digestC}}},
			present: 2, asked: true,
		},
		{
			name:     "another image held under a name: imported, the name re-pointed",
			held:     []preload.Held{{Ref: a, Target: digestA}, {Ref: aside, Target: digestA, Configs: []string{digestC}}},
			imports:  []preload.Held{{Ref: a, Target: digestB}, {Ref: aside, Target: digestA, Configs: []string{digestC}}},
			imported: true, present: 2, replace: []string{a}, asked: true,
		},
		{
			name:     "another config held: imported",
			held:     []preload.Held{{Ref: a, Target: digestB}, {Ref: aside, Target: digestA, Configs: []string{digestD}}},
			imports:  []preload.Held{{Ref: a, Target: digestB}, {Ref: aside, Target: digestA, Configs: []string{digestC}}},
			imported: true, present: 2, replace: []string{aside}, asked: true,
		},
		{
			name:     "an import that leaves the other image: missing",
			held:     []preload.Held{{Ref: a, Target: digestA}, {Ref: aside, Target: digestA, Configs: []string{digestC}}},
			imports:  []preload.Held{{Ref: a, Target: digestA}, {Ref: aside, Target: digestA, Configs: []string{digestC}}},
			imported: true, present: 1, replace: []string{a}, asked: true, err: preload.ErrIncomplete,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, "a")
			for _, h := range tc.held {
				f.store.Hold(h)
			}
			for _, h := range tc.imports {
				f.store.ImportsAs(h)
			}
			fsys := os.DirFS(f.dir)
			var calls atomic.Int32
			p, err := preload.New(f.store, []preload.Source{preload.NewFSSource("iso", fsys)}, digestsOf(&calls))
			require.NoError(t, err)
			plan, st, err := p.Run(t.Context(), fsys)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.imported, len(plan.Imports()) == 1)
			require.Equal(t, tc.present, st.ImagesPresent)
			var replace []string
			for _, m := range plan.Steps[0].Replace {
				replace = append(replace, m.Ref)
				require.Contains(t, plan.Steps[0].Reason, m.String())
			}
			require.Equal(t, tc.replace, replace)
			require.Equal(t, tc.asked, calls.Load() > 0)
			require.LessOrEqual(t, calls.Load(), int32(1), "asked at most once for the plan and the check after")
		})
	}

	t.Run("digests that cannot be read: judged by name", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "a")
		f.store.Hold(preload.Held{Ref: a, Target: digestA})
		f.store.Hold(preload.Held{Ref: aside, Target: digestA})
		fsys := os.DirFS(f.dir)
		p, err := preload.New(f.store, []preload.Source{preload.NewFSSource("iso", fsys)},
			preload.WithDigests(func(context.Context) ([]preload.ImageDigest, error) { return nil, errors.New("unreadable") }))
		require.NoError(t, err)
		plan, st, err := p.Run(t.Context(), fsys)
		require.NoError(t, err)
		require.Empty(t, plan.Imports())
		require.Equal(t, 2, st.ImagesPresent)
	})
}
