package containerd

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
)

// importLeases returns the leases of imports in the store's namespace.
func importLeases(t *testing.T, s *Store) []leases.Lease {
	t.Helper()
	ctx := namespaces.WithNamespace(t.Context(), s.ns)
	ls, err := s.client.LeasesService().List(ctx)
	require.NoError(t, err)
	var out []leases.Lease
	for _, l := range ls {
		if l.Labels[LeaseLabel] != "" {
			out = append(out, l)
		}
	}
	return out
}

// gatedSource reads archives from a directory; the first read of gated that reaches half of
// it signals reached and waits for resume.
type gatedSource struct {
	preload.Source
	gated   string
	once    sync.Once
	reached chan struct{}
	resume  chan struct{}
}

func (g *gatedSource) Open(ctx context.Context, path string, off int64) (io.ReadCloser, int64, error) {
	rc, size, err := g.Source.Open(ctx, path, off)
	if err != nil || path != g.gated {
		return rc, size, err
	}
	return &gatedReader{ReadCloser: rc, g: g, left: size/2 - off}, size, nil
}

type gatedReader struct {
	io.ReadCloser
	g    *gatedSource
	left int64
}

func (r *gatedReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		r.g.once.Do(func() {
			close(r.g.reached)
			<-r.g.resume
		})
	} else if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.ReadCloser.Read(p)
	r.left -= int64(n)
	return n, err
}

// The lease of an import in progress expires within the hour, so that what a killed preload
// wrote is collected soon; it is gone once the import ends.
func TestImportLeaseExpiry(t *testing.T) {
	d := containerdtest.Start(t)
	s := newStore(t, d.Socket)
	rel := newRelease(t)
	src := &gatedSource{Source: preload.NewFSSource("iso", nil), reached: make(chan struct{}), resume: make(chan struct{})}
	r := &gatedReader{ReadCloser: io.NopCloser(zstdReader(t, rel.docker.Data)), g: src, left: 64 << 10}
	done := make(chan error, 1)
	go func() {
		_, err := s.Import(t.Context(), r)
		done <- err
	}()
	<-src.reached
	ls := importLeases(t, s)
	require.Len(t, ls, 1)
	expire, err := time.Parse(time.RFC3339, ls[0].Labels["containerd.io/gc.expire"])
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(DefaultLeaseExpiry), expire, time.Minute)
	close(src.resume)
	require.NoError(t, <-done)
	require.Empty(t, importLeases(t, s))
}

// A containerd that is killed in the middle of a preload and comes back 8 seconds later (longer
// than the few seconds preload used to retry) is waited for: the preload completes, and the lease
// of the interrupted import, which could not be deleted while the daemon was down, is deleted
// once it is back.
func TestPreloadSurvivesContainerdRestart(t *testing.T) {
	d := containerdtest.Start(t)
	s, err := New(t.Context(), d.Socket, WithNamespace("restart"), WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	rel := newRelease(t)
	// An archive of one large layer: stopped at half of it, the import is in the middle of
	// writing the layer into containerd's content store.
	img := preloadtest.NewImage(t, "docker.io/library/big:1", preloadtest.ImageOptions{OS: "linux", Arch: "amd64",
		Shared: []v1.Layer{preloadtest.NewLayer(t, 4<<20, false, 11)}})
	big := preloadtest.Archive{Group: "common", Name: "big.tar.zst", Refs: []string{img.Ref},
		Data: preloadtest.Zstd(t, preloadtest.DockerArchive(t, img))}
	dir := t.TempDir()
	preloadtest.WriteRelease(t, dir, big, rel.oci)
	fsys := os.DirFS(dir)
	src := &gatedSource{Source: preload.NewFSSource("iso", fsys), gated: preloadtest.ArchivePath(big),
		reached: make(chan struct{}), resume: make(chan struct{})}
	// The default retry policy: what the preload command and the agent use.
	p, err := preload.New(s, []preload.Source{src}, preload.WithConcurrency(1),
		preload.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	require.NoError(t, err)
	type result struct {
		st  preload.Status
		err error
	}
	done := make(chan result, 1)
	go func() {
		_, st, err := p.Run(t.Context(), fsys)
		done <- result{st, err}
	}()

	<-src.reached // half of the first archive is in containerd
	require.NoError(t, d.Kill())
	close(src.resume)
	// The outage itself: 8 seconds, longer than the retries of old (about 7 s in all).
	select {
	case res := <-done:
		t.Fatalf("the preload ended while containerd was down: %v", res.err)
	case <-time.After(8 * time.Second):
	}
	require.NoError(t, d.Restart())
	res := <-done
	require.NoError(t, res.err)
	require.Equal(t, preload.StatePreloaded, res.st.State)
	missing, err := s.Missing(t.Context(), append(append([]string(nil), big.Refs...), rel.oci.Refs...))
	require.NoError(t, err)
	require.Empty(t, missing)
	require.Empty(t, importLeases(t, s), "the interrupted import's lease is deleted")
}
