package containerd

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
)

// twoReleases are the images of a release v1 and the release v2 after it, as written by
// preloadtest: v1 lists keep, gone, byName and byDigest; v2 lists keep and fresh.
type twoReleases struct {
	v1, v2                              preloadtest.Archive
	keep, gone, byName, byDigest, fresh string
}

func newTwoReleases(t *testing.T) twoReleases {
	t.Helper()
	base := preloadtest.NewLayer(t, 64<<10, false, 20)
	img := func(ref string, seed int64) preloadtest.Image {
		return preloadtest.NewImage(t, ref, preloadtest.ImageOptions{OS: "linux", Arch: "amd64", Shared: []v1.Layer{base}, Own: 2, Seed: seed})
	}
	keep := img("docker.io/library/keep:v1", 21)
	gone := img("docker.io/library/gone:v1", 22)
	byName := img("docker.io/rancher/used-by-name:v1", 23)
	byDigest := img("docker.io/rancher/used-by-digest:v1", 24)
	fresh := img("docker.io/library/fresh:v2", 25)
	return twoReleases{
		v1: preloadtest.Archive{
			Group: "common", Name: "v1-images.tar.zst",
			Refs: []string{keep.Ref, gone.Ref, byName.Ref, byDigest.Ref},
			Data: preloadtest.Zstd(t, preloadtest.DockerArchive(t, keep, gone, byName, byDigest)),
		},
		v2: preloadtest.Archive{
			Group: "common", Name: "v2-images.tar.zst",
			Refs: []string{keep.Ref, fresh.Ref},
			Data: preloadtest.Zstd(t, preloadtest.DockerArchive(t, keep, fresh)),
		},
		keep: keep.Ref, gone: gone.Ref, byName: byName.Ref, byDigest: byDigest.Ref, fresh: fresh.Ref,
	}
}

// contentBytes is the size of every blob of the store's namespace.
func contentBytes(t *testing.T, s *Store) int64 {
	t.Helper()
	var n int64
	ctx := namespaces.WithNamespace(context.Background(), s.ns)
	require.NoError(t, s.client.ContentStore().Walk(ctx, func(i content.Info) error { n += i.Size; return nil }))
	return n
}

func TestCleanPreviousReleaseRealContainerd(t *testing.T) {
	d := containerdtest.Start(t)
	rels := newTwoReleases(t)

	// upgraded returns a store into which v1 then v2 were preloaded (pinned, their lists
	// archived), a container that names byName, one that names byDigest's repo digest, and
	// the archive; with unpin, v1's claims are withdrawn as the agent does once v2 Succeeded.
	upgraded := func(t *testing.T, unpin bool) (*Store, *preload.ListArchive) {
		t.Helper()
		s := newStore(t, d.Socket)
		archive := preload.NewListArchive(filepath.Join(t.TempDir(), "images-lists-archive"))
		for name, a := range map[string]preloadtest.Archive{"v1": rels.v1, "v2": rels.v2} {
			dir := t.TempDir()
			preloadtest.WriteRelease(t, dir, a)
			fsys := os.DirFS(dir)
			require.NoError(t, archive.Save(name, a.Refs))
			p, err := preload.New(s, []preload.Source{preload.NewFSSource("iso", fsys)},
				preload.WithRegisterer(prometheus.NewRegistry()), preload.WithRetry(5*time.Second, 10*time.Millisecond),
				preload.WithPin(name))
			require.NoError(t, err)
			_, _, err = p.Run(t.Context(), fsys)
			require.NoError(t, err)
		}
		if unpin {
			_, err := s.Unpin(t.Context(), func(r string) bool { return r != "v2" })
			require.NoError(t, err)
		}
		ctx := s.nsctx(t.Context())
		img, err := s.client.ImageService().Get(ctx, rels.byDigest)
		require.NoError(t, err)
		repoDigest := "docker.io/rancher/used-by-digest@" + img.Target.Digest.String()
		for id, ref := range map[string]string{"by-name": rels.byName, "by-digest": repoDigest} {
			_, err := s.client.NewContainer(ctx, id, client.WithImageName(ref), client.WithNewSpec())
			require.NoError(t, err)
		}
		// Collect what the imports left unreferenced, so that what the store holds now is what
		// its images reference.
		ls := s.client.LeasesService()
		l, err := ls.Create(ctx, leases.WithRandomID())
		require.NoError(t, err)
		require.NoError(t, ls.Delete(ctx, l, leases.SynchronousDelete))
		return s, archive
	}
	all := []string{rels.keep, rels.gone, rels.byName, rels.byDigest, rels.fresh}

	t.Run("dry run lists what would go and removes nothing", func(t *testing.T) {
		t.Parallel()
		s, archive := upgraded(t, true)
		reg := prometheus.NewRegistry()
		c, err := preload.NewCleaner(s, archive, preload.CleanerConfig{DryRun: true, Registerer: reg})
		require.NoError(t, err)
		before := contentBytes(t, s)
		got, err := c.Clean(t.Context(), "v2")
		require.NoError(t, err)
		require.True(t, got.DryRun)
		require.Equal(t, []string{rels.gone}, got.Removed)
		require.Positive(t, got.Bytes)
		require.Equal(t, 3, got.Candidates)
		missing, err := s.Missing(t.Context(), all)
		require.NoError(t, err)
		require.Empty(t, missing)
		require.Equal(t, before, contentBytes(t, s))
		require.Zero(t, metricValue(t, reg, "upgrade_repo_preload_images_cleaned_bytes_total"))
		rs, err := archive.Releases()
		require.NoError(t, err)
		require.Equal(t, []string{"v1", "v2"}, rs, "a dry run keeps the lists")
	})

	t.Run("removes the unused previous images, keeps and names the used ones", func(t *testing.T) {
		t.Parallel()
		s, archive := upgraded(t, true)
		dry, err := preload.NewCleaner(s, archive, preload.CleanerConfig{DryRun: true})
		require.NoError(t, err)
		would, err := dry.Clean(t.Context(), "v2")
		require.NoError(t, err)

		reg := prometheus.NewRegistry()
		c, err := preload.NewCleaner(s, archive, preload.CleanerConfig{Registerer: reg})
		require.NoError(t, err)
		before := contentBytes(t, s)
		got, err := c.Clean(t.Context(), "v2")
		require.NoError(t, err)
		require.Equal(t, "v2", got.Release)
		require.Equal(t, []string{"v1"}, got.Previous)
		require.Equal(t, []string{rels.gone}, got.Removed)
		require.Equal(t, []preload.Kept{
			{Image: rels.byDigest, Reason: preload.KeptInUse, Users: []string{"by-digest"}},
			{Image: rels.byName, Reason: preload.KeptInUse, Users: []string{"by-name"}},
		}, got.Kept)
		missing, err := s.Missing(t.Context(), all)
		require.NoError(t, err)
		require.Equal(t, []string{rels.gone}, missing)
		// What is reported freed is what left the content store, and what the dry run said.
		require.Equal(t, before-contentBytes(t, s), got.Bytes)
		require.Equal(t, would.Bytes, got.Bytes)
		require.InDelta(t, float64(got.Bytes), metricValue(t, reg, "upgrade_repo_preload_images_cleaned_bytes_total"), 0)
		require.InDelta(t, 1, metricValue(t, reg, "upgrade_repo_preload_images_cleaned_total"), 0)
		// The running release's images keep their pins.
		require.ElementsMatch(t, []string{rels.keep, rels.fresh}, pinned(t, s))
		rs, err := archive.Releases()
		require.NoError(t, err)
		require.Equal(t, []string{"v1", "v2"}, rs, "v1's list stays while some of its images are kept")

		// Once the containers are gone, the next cleanup removes the rest and drops v1's list.
		ctx := s.nsctx(t.Context())
		for _, id := range []string{"by-name", "by-digest"} {
			require.NoError(t, s.client.ContainerService().Delete(ctx, id))
		}
		got, err = c.Clean(t.Context(), "v2")
		require.NoError(t, err)
		require.Equal(t, []string{rels.byDigest, rels.byName}, got.Removed)
		require.Empty(t, got.Kept)
		missing, err = s.Missing(t.Context(), all)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{rels.gone, rels.byName, rels.byDigest}, missing)
		rs, err = archive.Releases()
		require.NoError(t, err)
		require.Equal(t, []string{"v2"}, rs)
	})

	t.Run("before the previous release's pins are withdrawn nothing goes", func(t *testing.T) {
		t.Parallel()
		s, archive := upgraded(t, false)
		c, err := preload.NewCleaner(s, archive, preload.CleanerConfig{})
		require.NoError(t, err)
		got, err := c.Clean(t.Context(), "v2")
		require.NoError(t, err)
		require.Empty(t, got.Removed)
		require.Zero(t, got.Bytes)
		require.Contains(t, got.Kept, preload.Kept{Image: rels.gone, Reason: preload.KeptPinned})
		missing, err := s.Missing(t.Context(), all)
		require.NoError(t, err)
		require.Empty(t, missing)
	})

	t.Run("without the running release's list nothing goes", func(t *testing.T) {
		t.Parallel()
		s, archive := upgraded(t, true)
		c, err := preload.NewCleaner(s, archive, preload.CleanerConfig{})
		require.NoError(t, err)
		_, err = c.Clean(t.Context(), "v3")
		require.ErrorIs(t, err, os.ErrNotExist)
		missing, err := s.Missing(t.Context(), all)
		require.NoError(t, err)
		require.Empty(t, missing)
	})
}
