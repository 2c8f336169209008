package containerd

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
)

// labelsOf returns the labels of every image of the store's namespace, by name.
func labelsOf(t *testing.T, s *Store) map[string]map[string]string {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), s.ns)
	list, err := s.client.ImageService().List(ctx)
	require.NoError(t, err)
	out := map[string]map[string]string{}
	for _, img := range list {
		out[img.Name] = img.Labels
	}
	return out
}

// pinned returns the names of the images whose CRI pinned label is set.
func pinned(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	for name, l := range labelsOf(t, s) {
		if l[PinnedLabel] == "pinned" {
			out = append(out, name)
		}
	}
	return out
}

func TestPinRealContainerd(t *testing.T) {
	d := containerdtest.Start(t)
	rel := newRelease(t)
	all := append(append([]string(nil), rel.docker.Refs...), rel.oci.Refs...)
	dir := t.TempDir()
	preloadtest.WriteRelease(t, dir, rel.docker, rel.oci)
	fsys := os.DirFS(dir)

	// preloaded returns a store into which release v1 was preloaded with pinning.
	preloaded := func(t *testing.T) *Store {
		t.Helper()
		s := newStore(t, d.Socket)
		p, err := preload.New(s, []preload.Source{preload.NewFSSource("iso", fsys)},
			preload.WithRegisterer(prometheus.NewRegistry()), preload.WithRetry(5*time.Second, 10*time.Millisecond),
			preload.WithPin("v1"))
		require.NoError(t, err)
		_, _, err = p.Run(t.Context(), fsys)
		require.NoError(t, err)
		return s
	}

	t.Run("preload pins every listed image for its release", func(t *testing.T) {
		t.Parallel()
		s := preloaded(t)
		require.ElementsMatch(t, all, pinned(t, s))
		for name, l := range labelsOf(t, s) {
			require.Equal(t, "true", l[ClaimLabelPrefix+"v1"], name)
			require.Equal(t, "managed", l[criLabel], name)
		}
	})

	t.Run("unpin withdraws one release and keeps images another claims", func(t *testing.T) {
		t.Parallel()
		s := preloaded(t)
		shared := rel.docker.Refs[:2]
		n, err := s.Pin(t.Context(), "v2", shared)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		n, err = s.Unpin(t.Context(), func(r string) bool { return r == "v1" })
		require.NoError(t, err)
		require.Equal(t, len(all), n)
		require.ElementsMatch(t, shared, pinned(t, s))
		for name, l := range labelsOf(t, s) {
			require.Empty(t, l[ClaimLabelPrefix+"v1"], name)
		}
		// Withdrawing again changes nothing.
		n, err = s.Unpin(t.Context(), func(r string) bool { return r == "v1" })
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("a pin made before the first claim outlives the claims", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, d.Socket)
		p := newPreloader(t, s, prometheus.NewRegistry(), preload.NewFSSource("iso", fsys))
		_, _, err := p.Run(t.Context(), fsys)
		require.NoError(t, err)
		require.Empty(t, pinned(t, s))
		ctx := namespaces.WithNamespace(t.Context(), s.ns)
		own := all[0]
		_, err = s.client.ImageService().Update(ctx, images.Image{Name: own, Labels: map[string]string{PinnedLabel: "pinned"}}, "labels."+PinnedLabel)
		require.NoError(t, err)

		_, err = s.Pin(t.Context(), "v1", all)
		require.NoError(t, err)
		require.ElementsMatch(t, all, pinned(t, s))
		_, err = s.Unpin(t.Context(), func(string) bool { return true })
		require.NoError(t, err)
		require.Equal(t, []string{own}, pinned(t, s))
		require.Empty(t, labelsOf(t, s)[own][pinnedBeforeLabel])
	})

	t.Run("pinned counts the listed images that carry the CRI label, whoever set it", func(t *testing.T) {
		t.Parallel()
		s := preloaded(t)
		absent := "docker.io/library/absent:v1"
		// A reference listed twice counts once; one the store lacks counts as unpinned.
		n, err := s.Pinned(t.Context(), append([]string{absent, all[0]}, all...))
		require.NoError(t, err)
		require.Equal(t, len(all), n)
		_, err = s.Unpin(t.Context(), func(r string) bool { return r == "v1" })
		require.NoError(t, err)
		n, err = s.Pinned(t.Context(), all)
		require.NoError(t, err)
		require.Zero(t, n)
		ctx := namespaces.WithNamespace(t.Context(), s.ns)
		_, err = s.client.ImageService().Update(ctx, images.Image{Name: all[1], Labels: map[string]string{PinnedLabel: "pinned"}}, "labels."+PinnedLabel)
		require.NoError(t, err)
		n, err = s.Pinned(t.Context(), all)
		require.NoError(t, err)
		require.Equal(t, 1, n, "an operator's pin counts")
	})

	t.Run("pin skips images the store lacks", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, d.Socket)
		n, err := s.Pin(t.Context(), "v1", []string{"docker.io/library/absent:v1"})
		require.NoError(t, err)
		require.Zero(t, n)
		require.Empty(t, labelsOf(t, s))
	})
}

func TestCheckRelease(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		release string
		wantErr string
	}{
		{name: "version", release: "v1.5.2"},
		{name: "rke2 version", release: "v1.32.7+rke2r1"},
		{name: "empty", release: "", wantErr: "empty release name"},
		{name: "space", release: "v1 v2", wantErr: "contains a space"},
		{name: "equals", release: "a=b", wantErr: "contains a space"},
		{name: "too long", release: string(make([]byte, 129)), wantErr: "longer than 128 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := checkRelease(tt.release)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}
