package containerd

import (
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

func TestWatchRemovalsRealContainerd(t *testing.T) {
	d := containerdtest.Start(t)
	rel := newRelease(t)
	dir := t.TempDir()
	preloadtest.WriteRelease(t, dir, rel.docker)
	fsys := os.DirFS(dir)
	s := newStore(t, d.Socket)
	_, _, err := newPreloader(t, s, prometheus.NewRegistry(), preload.NewFSSource("iso", fsys)).Run(t.Context(), fsys)
	require.NoError(t, err)
	other := newStore(t, d.Socket) // another namespace: its removals are not reported

	got := make(chan string, 16)
	done := make(chan error, 1)
	go func() { done <- s.WatchRemovals(t.Context(), func(name string) { got <- name }) }()
	require.Empty(t, <-got, "the watch first reports that it is live")

	_, err = other.Pin(t.Context(), "v1", rel.docker.Refs) // a change elsewhere, no removal
	require.NoError(t, err)
	ctx := namespaces.WithNamespace(t.Context(), s.ns)
	require.NoError(t, s.client.ImageService().Delete(ctx, rel.docker.Refs[1], images.SynchronousDelete()))
	require.Equal(t, rel.docker.Refs[1], <-got)
	select {
	case err := <-done:
		t.Fatalf("the watch ended: %v", err)
	default:
	}
}

func TestGuardRealContainerd(t *testing.T) {
	d := containerdtest.Start(t)
	rel := newRelease(t)
	all := append(append([]string(nil), rel.docker.Refs...), rel.oci.Refs...)
	dir := t.TempDir()
	preloadtest.WriteRelease(t, dir, rel.docker, rel.oci)
	fsys := os.DirFS(dir)
	s := newStore(t, d.Socket)
	sources := []preload.Source{preload.NewFSSource("iso", fsys)}
	opts := []preload.Option{preload.WithRetry(5*time.Second, 10*time.Millisecond), preload.WithPin("v1")}
	p, err := preload.New(s, sources, opts...)
	require.NoError(t, err)
	_, _, err = p.Run(t.Context(), fsys)
	require.NoError(t, err)

	restores := make(chan []preload.Restore, 4)
	counts := make(chan int, 16)
	reg := prometheus.NewRegistry()
	// An hour between checks: what brings the image back is the removal's event, or the check
	// made once the watch is live.
	g, err := preload.NewGuard(s, sources, preload.GuardConfig{
		Interval: time.Hour, Registerer: reg, OnRestore: func(r []preload.Restore) { restores <- r },
		OnPinned: func(n int) {
			select {
			case counts <- n:
			default:
			}
		},
	}, opts...)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- g.Run(t.Context(), fsys) }()
	require.Equal(t, len(all), <-counts, "the first check counts every preloaded image pinned")

	gone := rel.oci.Refs[0]
	ctx := namespaces.WithNamespace(t.Context(), s.ns)
	require.NoError(t, s.client.ImageService().Delete(ctx, gone, images.SynchronousDelete()))

	var back []preload.Restore
	select {
	case back = <-restores:
	case err := <-done:
		t.Fatalf("the guard ended: %v", err)
	}
	require.Len(t, back, 1)
	require.Equal(t, gone, back[0].Image)
	require.Equal(t, "iso", back[0].Source)
	require.False(t, back[0].Time.IsZero())
	missing, err := s.Missing(t.Context(), all)
	require.NoError(t, err)
	require.Empty(t, missing)
	require.Contains(t, pinned(t, s), gone, "the image is pinned again")
	require.InDelta(t, 1, metricValue(t, reg, "upgrade_repo_preload_restored_images_total"), 0)
}
