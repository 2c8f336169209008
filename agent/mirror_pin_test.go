package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
	"github.com/upgrade-repo/upgrade-repo/registry"
)

// pinStore is an image store that holds images under tags, as the registry reads it.
type pinStore struct {
	*preloadtest.Store
	digests map[string]string
}

func (s pinStore) Resolve(_ context.Context, ref string) (registry.Descriptor, error) {
	d, ok := s.digests[ref]
	if !ok {
		return registry.Descriptor{}, registry.ErrNotFound
	}
	return registry.Descriptor{Digest: d}, nil
}

func (pinStore) Open(context.Context, string) (registry.Blob, error) {
	return nil, registry.ErrNotFound
}

// Once the release's images are preloaded, the mirror serves each tag the node's store holds
// only as the digest it holds it at, and keeps the pins across a restart; an image the store
// lacks stays listed without a pin.
func TestPinImages(t *testing.T) {
	dir, cache := t.TempDir(), t.TempDir()
	held, lacking := "docker.io/rancher/harvester:v1.5.2", "docker.io/rancher/harvester-webhook:v1.5.2"
	preloadtest.WriteRelease(t, dir, preloadtest.Archive{Group: "harvester", Name: "harvester.tar.zst", Refs: []string{held, lacking}, Data: []byte("x")})
	dgst := "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	lists := &registry.Lists{}
	a := &Agent{log: slog.New(slog.DiscardHandler), cfg: Config{CacheDir: cache}, mirror: &Mirror{Lists: lists},
		images: pinStore{Store: preloadtest.NewStore(held), digests: map[string]string{held: dgst}}}
	a.pinImages(t.Context(), os.DirFS(dir), "v1.5.2")
	require.ElementsMatch(t, []string{held, lacking}, lists.Refs())
	require.Equal(t, []string{dgst}, lists.Pins(held))
	require.Empty(t, lists.Pins(lacking))

	kept, err := os.ReadFile(filepath.Join(cache, listsDir, "v1.5.2.txt"))
	require.NoError(t, err)
	require.Equal(t, held+"@"+dgst+"\n"+lacking+"\n", string(kept))
	restarted := &Agent{log: a.log, cfg: a.cfg, mirror: &Mirror{Lists: &registry.Lists{}}}
	restarted.loadLists()
	require.Equal(t, []string{dgst}, restarted.mirror.Lists.Pins(held))
}
