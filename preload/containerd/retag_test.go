package containerd

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/platforms"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
)

// A node that holds, under a release image's name, another image than the release's (a rebuilt
// release that re-tags, the previous release's image under the same tag) gets the release's: the
// preload imports the archive and the name ends on the release's digest, by manifest where the
// archive records one (an OCI layout) and by config where it records only that (docker save's
// classic layout). The claims on the image the name held go with it; the name is claimed for the
// release that imported its image. A second preload finds everything present and imports nothing.
func TestPreloadReplacesAnotherImageUnderAReleaseName(t *testing.T) {
	d := containerdtest.Start(t)
	rel := newRelease(t)
	all := append(append([]string(nil), rel.docker.Refs...), rel.oci.Refs...)
	dir := t.TempDir()
	preloadtest.WriteRelease(t, dir, rel.docker, rel.oci)
	fsys := os.DirFS(dir)

	// The release's images, then other images under two of their names, complete and pinned by
	// an earlier release: one name from each archive, whose other images stay the release's.
	const alpha, delta = "docker.io/library/alpha:v1", "docker.io/library/delta:1.0"
	otherAlpha := preloadtest.NewImage(t, alpha, preloadtest.ImageOptions{OS: "linux", Arch: "amd64", Own: 1, Seed: 41})
	otherDelta := preloadtest.NewImage(t, delta, preloadtest.ImageOptions{OS: "linux", Arch: "amd64", OCI: true, Own: 1, Seed: 42})
	s := newStore(t, d.Socket)
	for _, a := range []preloadtest.Archive{rel.docker, rel.oci} {
		_, err := s.Import(t.Context(), zstdReader(t, a.Data))
		require.NoError(t, err)
	}
	names, err := s.Import(t.Context(), zstdReader(t, preloadtest.Zstd(t, preloadtest.OCIArchive(t, otherAlpha, otherDelta))))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{alpha, delta}, names)
	_, err = s.Pin(t.Context(), "v0", names)
	require.NoError(t, err)

	run := func(t *testing.T) (*preload.Plan, preload.Status) {
		t.Helper()
		p, err := preload.New(s, []preload.Source{preload.NewFSSource("iso", fsys)},
			preload.WithRegisterer(prometheus.NewRegistry()), preload.WithRetry(5*time.Second, 10*time.Millisecond),
			preload.WithPin("v1"))
		require.NoError(t, err)
		plan, st, err := p.Run(t.Context(), fsys)
		require.NoError(t, err)
		return plan, st
	}
	plan, st := run(t)
	require.Equal(t, preload.StatePreloaded, st.State)
	require.Equal(t, len(all), st.ImagesPresent)

	ctx := namespaces.WithNamespace(context.Background(), s.ns)
	target := func(ref string) resolved {
		img, err := s.client.ImageService().Get(ctx, ref)
		require.NoError(t, err)
		m, err := images.Manifest(ctx, s.client.ContentStore(), img.Target, platforms.All)
		require.NoError(t, err)
		return resolved{manifest: img.Target.Digest.String(), config: m.Config.Digest.String()}
	}
	digestOf := func(img v1.Image) resolved {
		m, err := img.Digest()
		require.NoError(t, err)
		c, err := img.ConfigName()
		require.NoError(t, err)
		return resolved{manifest: m.String(), config: c.String()}
	}
	wantAlpha, wantDelta := digestOf(rel.images[alpha]), digestOf(rel.images[delta])
	require.Equal(t, wantAlpha.config, target(alpha).config, "%s ends on the release's config", alpha)
	require.Equal(t, wantDelta, target(delta), "%s ends on the release's manifest", delta)

	require.Len(t, plan.Imports(), 2, "both archives hold an image the node holds as another")
	for _, s := range plan.Steps {
		require.NotEmpty(t, s.Replace, "step %s", s.Name())
		require.Contains(t, s.Reason, "the release names", "step %s", s.Name())
	}
	labels := labelsOf(t, s)
	for _, ref := range []string{alpha, delta} {
		require.Equal(t, "pinned", labels[ref][PinnedLabel], ref)
		require.Equal(t, "true", labels[ref][ClaimLabelPrefix+"v1"], ref)
		require.NotContains(t, labels[ref], ClaimLabelPrefix+"v0", "%s: the earlier release claimed the image the name held", ref)
	}

	t.Run("a second preload imports nothing", func(t *testing.T) {
		plan, st := run(t)
		require.Empty(t, plan.Imports())
		require.Zero(t, st.BytesRead)
		require.Equal(t, wantDelta, target(delta))
	})

	t.Run("the guard points a name back to the release's image", func(t *testing.T) {
		_, err := s.Import(t.Context(), zstdReader(t, preloadtest.Zstd(t, preloadtest.OCIArchive(t, otherDelta))))
		require.NoError(t, err)
		require.NotEqual(t, wantDelta, target(delta))
		restores := make(chan []preload.Restore, 1)
		g, err := preload.NewGuard(s, []preload.Source{preload.NewFSSource("iso", fsys)}, preload.GuardConfig{
			Interval: time.Hour, OnRestore: func(r []preload.Restore) { restores <- r },
		}, preload.WithRetry(5*time.Second, 10*time.Millisecond), preload.WithPin("v1"))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- g.Run(ctx, fsys) }()
		var back []preload.Restore
		select {
		case back = <-restores:
		case err := <-done:
			t.Fatalf("the guard ended: %v", err)
		}
		cancel()
		<-done
		require.Len(t, back, 1)
		require.Equal(t, delta, back[0].Image)
		require.Equal(t, wantDelta, target(delta))
		require.Equal(t, "true", labelsOf(t, s)[delta][ClaimLabelPrefix+"v1"])
	})
}

// resolved is the two digests an image's name resolves to, in the order a failure shows them.
type resolved struct{ manifest, config string }
