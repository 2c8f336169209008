package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/preload"
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

// The mirror pins each image of a release to what the release's own archive, in the verified
// ISO, says it is, never to what the node's store holds under its tag (a store that held another
// image under the tag before the preload, which then skipped it, would otherwise have it
// pinned); an image no archive holds stays listed without a pin. The pins outlive a restart, and
// the digests are served for the sequencer.
func TestPinsComeFromTheISO(t *testing.T) {
	dir, cache := t.TempDir(), t.TempDir()
	img := preloadtest.NewImage(t, "docker.io/rancher/harvester:v1.5.2", preloadtest.ImageOptions{OS: "linux", Arch: "amd64", Own: 1})
	lacking := "docker.io/rancher/harvester-webhook:v1.5.2"
	preloadtest.WriteRelease(t, dir, preloadtest.Archive{Group: "harvester", Name: "harvester.tar.zst", Refs: []string{img.Ref, lacking},
		Data: preloadtest.Zstd(t, preloadtest.DockerArchive(t, img))})
	cfg, err := img.Img.ConfigName()
	require.NoError(t, err)
	hostile := "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	hex := strings.Repeat("ab", 64)

	lists := &registry.Lists{}
	a := &Agent{log: slog.New(slog.DiscardHandler), cfg: Config{CacheDir: cache}, mirror: &Mirror{Lists: lists},
		images: pinStore{Store: preloadtest.NewStore(img.Ref), digests: map[string]string{img.Ref: hostile}}}
	images, err := a.releaseDigests(t.Context(), os.DirFS(dir), hex)
	require.NoError(t, err)
	a.digests.set(hex, images)
	a.pinImages(os.DirFS(dir), "v1.5.2", images)
	require.ElementsMatch(t, []string{img.Ref, lacking}, lists.Refs())
	require.Equal(t, []registry.Pin{{Config: cfg.String()}}, lists.Pins(img.Ref), "the archive's config, not the store's digest")
	require.Empty(t, lists.Pins(lacking))

	kept, err := os.ReadFile(filepath.Join(cache, listsDir, "v1.5.2.txt"))
	require.NoError(t, err)
	require.Equal(t, img.Ref+" config="+cfg.String()+"\n"+lacking+"\n", string(kept))
	restarted := &Agent{log: a.log, cfg: a.cfg, mirror: &Mirror{Lists: &registry.Lists{}}}
	restarted.loadLists()
	require.Equal(t, []registry.Pin{{Config: cfg.String()}}, restarted.mirror.Lists.Pins(img.Ref))
	// The digests are kept too: a restart does not read the archives again.
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "bundle", "harvester", "images")))
	again, err := restarted.releaseDigests(t.Context(), os.DirFS(dir), hex)
	require.NoError(t, err)
	require.Equal(t, images, again)

	nf := http.NotFoundHandler()
	srv := httptest.NewServer(routes(nf, nf, nf, &a.digests, nf, nil))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name, path string
		status     int
	}{
		{name: "the ISO read", path: ImageDigestsPath + hex, status: http.StatusOK},
		{name: "another ISO", path: ImageDigestsPath + strings.Repeat("cd", 64), status: http.StatusNotFound},
		{name: "not a sha512", path: ImageDigestsPath + "x", status: http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tc.path)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode)
			if tc.status != http.StatusOK {
				return
			}
			var got []preload.ImageDigest
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
			require.Equal(t, []preload.ImageDigest{{Ref: img.Ref, Config: cfg.String()}}, got)
		})
	}

	t.Run("a Version's digests count only on nodes that did not read its ISO", func(t *testing.T) {
		other := "sha256:" + strings.Repeat("ef", 32)
		v := version("v1.5.2", []string{img.Ref}, metav1.ConditionTrue)
		v.Spec.ISOChecksum = "sha512:" + hex
		v.Status.ImageDigests = []v1beta1.ImageDigest{{Ref: img.Ref, Config: other}}
		require.Equal(t, map[string][]string{"v1.5.2": {img.Ref + " config=" + other}},
			servedVersions([]v1beta1.Version{v}, nil, func(string) bool { return false }))
		require.Equal(t, map[string][]string{"v1.5.2": {img.Ref}}, servedVersions([]v1beta1.Version{v}, nil, a.readISO))
	})
}
