package containerd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/zstd"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
)

// release is a test release of two archives: a classic docker-save archive of three images
// sharing a layer (one without a platform in its config) and an OCI-layout archive of two.
type release struct {
	docker, oci preloadtest.Archive
	// images are the release's images by reference.
	images map[string]v1.Image
}

func newRelease(t *testing.T) release {
	t.Helper()
	shared := preloadtest.NewLayer(t, 96<<10, false, 7)
	alpha := preloadtest.NewImage(t, "docker.io/library/alpha:v1", preloadtest.ImageOptions{OS: "linux", Arch: "amd64", Shared: []v1.Layer{shared}, Own: 2, Seed: 1})
	beta := preloadtest.NewImage(t, "docker.io/rancher/beta:v2", preloadtest.ImageOptions{OS: "linux", Arch: "amd64", Shared: []v1.Layer{shared}, Own: 1, Seed: 2})
	noPlatform := preloadtest.NewImage(t, "registry.example.com/x/gamma:v3", preloadtest.ImageOptions{Shared: []v1.Layer{shared}, Own: 1, Seed: 3})
	ociShared := preloadtest.NewLayer(t, 64<<10, true, 8)
	delta := preloadtest.NewImage(t, "docker.io/library/delta:1.0", preloadtest.ImageOptions{OS: "linux", Arch: "amd64", OCI: true, Shared: []v1.Layer{ociShared}, Own: 1, Seed: 4})
	eps := preloadtest.NewImage(t, "docker.io/library/epsilon:2.0", preloadtest.ImageOptions{OS: "linux", Arch: "arm64", OCI: true, Shared: []v1.Layer{ociShared}, Own: 2, Seed: 5})
	return release{
		docker: preloadtest.Archive{
			Group: "common", Name: "common-images.tar.zst",
			Refs: []string{alpha.Ref, beta.Ref, noPlatform.Ref},
			Data: preloadtest.Zstd(t, preloadtest.DockerArchive(t, alpha, beta, noPlatform)),
		},
		oci: preloadtest.Archive{
			Group: "rke2", Name: "rke2-images.tar.zst",
			Refs: []string{delta.Ref, eps.Ref},
			Data: preloadtest.Zstd(t, preloadtest.OCIArchive(t, delta, eps)),
		},
		images: map[string]v1.Image{alpha.Ref: alpha.Img, beta.Ref: beta.Img, noPlatform.Ref: noPlatform.Img, delta.Ref: delta.Img, eps.Ref: eps.Img},
	}
}

func newStore(t *testing.T, socket string) *Store {
	t.Helper()
	s, err := New(t.Context(), socket, WithNamespace(fmt.Sprintf("test-%d", nsSeq.Add(1))))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// nsSeq numbers the namespaces: the tests share one daemon, each in a namespace of its own.
var nsSeq atomic.Int64

// leftovers returns what the store's namespace still holds: images, blobs and active ingests.
func leftovers(t *testing.T, s *Store) (imgs, blobs, ingests int) {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), s.ns)
	list, err := s.client.ImageService().List(ctx)
	require.NoError(t, err)
	require.NoError(t, s.client.ContentStore().Walk(ctx, func(content.Info) error { blobs++; return nil }))
	st, err := s.client.ContentStore().ListStatuses(ctx)
	require.NoError(t, err)
	return len(list), blobs, len(st)
}

func newPreloader(t *testing.T, s *Store, reg prometheus.Registerer, sources ...preload.Source) *preload.Preloader {
	t.Helper()
	p, err := preload.New(s, sources, preload.WithRegisterer(reg), preload.WithRetry(5*time.Second, 10*time.Millisecond))
	require.NoError(t, err)
	return p
}

func TestPreloadRealContainerd(t *testing.T) {
	d := containerdtest.Start(t)
	rel := newRelease(t)
	all := append(append([]string(nil), rel.docker.Refs...), rel.oci.Refs...)

	t.Run("import, verify, then skip when present", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, d.Socket)
		dir := t.TempDir()
		preloadtest.WriteRelease(t, dir, rel.docker, rel.oci)
		fsys := os.DirFS(dir)
		reg := prometheus.NewRegistry()
		p := newPreloader(t, s, reg, preload.NewFSSource("iso", fsys))

		missing, err := s.Missing(t.Context(), all)
		require.NoError(t, err)
		require.Equal(t, all, missing)

		plan, st, err := p.Run(t.Context(), fsys)
		require.NoError(t, err)
		require.Len(t, plan.Imports(), 2)
		require.Equal(t, preload.StatePreloaded, st.State)
		require.Equal(t, 5, st.ImagesPresent)
		require.Equal(t, 5, st.ImagesTotal)
		wantBytes := int64(len(rel.docker.Data) + len(rel.oci.Data))
		require.Equal(t, wantBytes, st.BytesRead)
		require.Equal(t, wantBytes, st.BytesTotal)
		require.InDelta(t, float64(wantBytes), metricValue(t, reg, "upgrade_repo_preload_read_bytes_total"), 0)

		missing, err = s.Missing(t.Context(), all)
		require.NoError(t, err)
		require.Empty(t, missing)

		// A second run finds everything present and reads nothing.
		p2 := newPreloader(t, s, nil, preload.NewFSSource("iso", fsys))
		plan, st, err = p2.Run(t.Context(), fsys)
		require.NoError(t, err)
		require.Empty(t, plan.Imports())
		require.Zero(t, st.BytesRead)
		for _, a := range st.Archives {
			require.Equal(t, preload.PhaseSkipped, a.Phase, a.Name)
		}
	})

	t.Run("an image whose blob was removed counts as missing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, d.Socket)
		names, err := s.Import(t.Context(), zstdReader(t, rel.oci.Data))
		require.NoError(t, err)
		require.ElementsMatch(t, rel.oci.Refs, names)
		ctx := namespaces.WithNamespace(t.Context(), s.ns)
		// Delete one layer unique to epsilon.
		img, err := s.client.ImageService().Get(ctx, "docker.io/library/epsilon:2.0")
		require.NoError(t, err)
		m, err := manifestLayers(ctx, s, img.Target)
		require.NoError(t, err)
		require.NoError(t, s.client.ContentStore().Delete(ctx, m[len(m)-1]))
		missing, err := s.Missing(t.Context(), rel.oci.Refs)
		require.NoError(t, err)
		require.Equal(t, []string{"docker.io/library/epsilon:2.0"}, missing)
	})

	failures := []struct {
		name    string
		corrupt func([]byte) []byte
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)*2/3] }},
		{"corrupt", func(b []byte) []byte {
			c := append([]byte(nil), b...)
			for i := len(c) / 2; i < len(c)/2+64; i++ {
				c[i] ^= 0x5a
			}
			return c
		}},
	}
	for _, tc := range failures {
		t.Run(tc.name+" archive leaves nothing, then a re-run succeeds", func(t *testing.T) {
			t.Parallel()
			s := newStore(t, d.Socket)
			dir := t.TempDir()
			bad := rel.docker
			bad.Data = tc.corrupt(rel.docker.Data)
			preloadtest.WriteRelease(t, dir, bad)
			fsys := os.DirFS(dir)

			_, st, err := newPreloader(t, s, nil, preload.NewFSSource("iso", fsys)).Run(t.Context(), fsys)
			require.Error(t, err)
			t.Logf("first run: %v", err)
			var ae *preload.ArchiveError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, preloadtest.ArchivePath(bad), ae.Archive)
			require.Equal(t, "iso", ae.Source)
			require.Positive(t, ae.Offset)
			require.LessOrEqual(t, ae.Offset, int64(len(bad.Data)))
			require.Contains(t, err.Error(), bad.Name)
			require.Contains(t, err.Error(), fmt.Sprintf("of %d", len(bad.Data)))
			require.ErrorIs(t, err, preload.ErrIncomplete)
			require.Equal(t, preload.StateFailed, st.State)
			require.Equal(t, preload.ReasonImportFailed, st.Reason)
			require.Equal(t, preload.PhaseFailed, st.Archives[0].Phase)

			imgs, blobs, ingests := leftovers(t, s)
			require.Zero(t, imgs, "images left")
			require.Zero(t, blobs, "blobs left")
			require.Zero(t, ingests, "ingests left")

			// The archive is repaired; the re-run imports it.
			preloadtest.WriteRelease(t, dir, rel.docker)
			_, st, err = newPreloader(t, s, nil, preload.NewFSSource("iso", fsys)).Run(t.Context(), fsys)
			require.NoError(t, err)
			require.Equal(t, preload.StatePreloaded, st.State)
			missing, err := s.Missing(t.Context(), rel.docker.Refs)
			require.NoError(t, err)
			require.Empty(t, missing)
		})
	}

	t.Run("re-run after a partial failure imports only what is missing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, d.Socket)
		dir := t.TempDir()
		bad := rel.oci
		bad.Data = bad.Data[:len(bad.Data)/2]
		preloadtest.WriteRelease(t, dir, rel.docker, bad)
		fsys := os.DirFS(dir)
		_, st, err := newPreloader(t, s, nil, preload.NewFSSource("iso", fsys)).Run(t.Context(), fsys)
		require.ErrorIs(t, err, preload.ErrIncomplete)
		require.Equal(t, 3, st.ImagesPresent)
		require.Equal(t, []string{preload.PhaseImported, preload.PhaseFailed}, phases(st))
		require.Equal(t, rel.oci.Refs, st.Archives[1].Missing)

		preloadtest.WriteRelease(t, dir, rel.docker, rel.oci)
		plan, st, err := newPreloader(t, s, nil, preload.NewFSSource("iso", fsys)).Run(t.Context(), fsys)
		require.NoError(t, err)
		require.Equal(t, []string{preload.PhaseSkipped, preload.PhaseImported}, phases(st))
		require.Len(t, plan.Imports(), 1)
		require.Equal(t, int64(len(rel.oci.Data)), st.BytesRead)
	})

	t.Run("repo over HTTP resumes after the connection is cut", func(t *testing.T) {
		t.Parallel()
		s := newStore(t, d.Socket)
		dir := t.TempDir()
		preloadtest.WriteRelease(t, dir, rel.docker, rel.oci)
		var cuts atomic.Int64
		files := http.FileServer(http.Dir(dir))
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// The first full GET of each archive is cut after a third of its bytes.
			if filepath.Ext(r.URL.Path) == ".zst" && r.Header.Get("Range") == "" {
				data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(r.URL.Path)))
				require.NoError(t, err)
				cuts.Add(1)
				cutAfter(w, data, len(data)/3)
				return
			}
			files.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		src, err := preload.NewHTTPSource(srv.URL, srv.Client())
		require.NoError(t, err)
		reg := prometheus.NewRegistry()
		_, st, err := newPreloader(t, s, reg, src).Run(t.Context(), src.FS())
		require.NoError(t, err)
		require.Equal(t, preload.StatePreloaded, st.State)
		require.Equal(t, int64(2), cuts.Load())
		require.Equal(t, int64(len(rel.docker.Data)+len(rel.oci.Data)), st.BytesRead)
		require.GreaterOrEqual(t, metricValue(t, reg, "upgrade_repo_preload_retries_total"), 2.0)
		for _, a := range st.Archives {
			require.Equal(t, "repo", a.Source)
		}
		missing, err := s.Missing(t.Context(), all)
		require.NoError(t, err)
		require.Empty(t, missing)
	})
}

func phases(st preload.Status) []string {
	var out []string
	for _, a := range st.Archives {
		out = append(out, a.Phase)
	}
	return out
}

// cutAfter answers with the full length announced, sends n bytes and drops the connection.
func cutAfter(w http.ResponseWriter, data []byte, n int) {
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	w.Header().Set("Content-Type", "application/zstd")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data[:n])
	w.(http.Flusher).Flush()
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		_ = conn.(*net.TCPConn).SetLinger(0)
		_ = conn.Close()
	}
}

// metricValue sums the samples of the named counter or gauge.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

func zstdReader(t *testing.T, data []byte) io.Reader {
	t.Helper()
	dec, err := zstd.NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	t.Cleanup(dec.Close)
	return dec
}

// manifestLayers returns the layer descriptors' digests of an image manifest.
func manifestLayers(ctx context.Context, s *Store, desc ocispec.Descriptor) ([]digest.Digest, error) {
	p, err := content.ReadBlob(ctx, s.client.ContentStore(), desc)
	if err != nil {
		return nil, err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(p, &m); err != nil {
		return nil, err
	}
	var out []digest.Digest
	for _, l := range m.Layers {
		out = append(out, l.Digest)
	}
	return out, nil
}
