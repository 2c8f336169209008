package repo

import (
	"crypto/sha256"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// spanFS is a test double of an image reader: a MapFS whose files also lie, at known offsets, in a
// backing file, as an ISO reader reports them.
type spanFS struct {
	fstest.MapFS
	spans map[string][2]int64
}

func (s *spanFS) Span(name string) (int64, int64, bool) {
	sp, ok := s.spans[name]
	return sp[0], sp[1], ok
}

var _ SpanFS = (*spanFS)(nil)

// randomBytes returns n deterministic pseudo-random bytes.
func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	var s [32]byte
	s[0] = byte(seed)
	rand.NewChaCha8(s).Read(b)
	return b
}

// newSpanFS writes files into a backing file, 2 KiB aligned with garbage between them so an
// offset mistake shows, and returns the double and the backing file's path.
func newSpanFS(t *testing.T, files map[string][]byte) (*spanFS, string) {
	t.Helper()
	backing := filepath.Join(t.TempDir(), "image.bin")
	f, err := os.Create(backing)
	require.NoError(t, err)
	defer f.Close()
	s := &spanFS{MapFS: fstest.MapFS{}, spans: map[string][2]int64{}}
	off := int64(0)
	garbage := randomBytes(99, 4096)
	for name, data := range files {
		_, err := f.WriteAt(garbage, off)
		require.NoError(t, err)
		off += int64(len(garbage))
		_, err = f.WriteAt(data, off)
		require.NoError(t, err)
		s.MapFS[name] = &fstest.MapFile{Data: data, Mode: 0o444, ModTime: time.Unix(1700000000, 0)}
		s.spans[name] = [2]int64{off, int64(len(data))}
		off += (int64(len(data)) + 2047) / 2048 * 2048
	}
	_, err = f.WriteAt(garbage, off)
	require.NoError(t, err)
	return s, backing
}

// newTestServer serves fsys through a Server with fresh metrics on a real loopback listener.
func newTestServer(t *testing.T, fsys fs.FS, opts ...Option) (*httptest.Server, *Metrics, *Handler) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	h, err := New(fsys, append([]Option{WithMetrics(m), WithVolumeID("TESTVOL"), WithIdentity("test-image")}, opts...)...)
	require.NoError(t, err)
	s := NewServer(m, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil)
	s.SetHandler(h)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts, m, h
}

func get(t *testing.T, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	return do(t, http.MethodGet, url, hdr)
}

func do(t *testing.T, method, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	resp, body, whole := fetch(t, method, url, hdr)
	require.True(t, whole, "%s %s: the body was cut", method, url)
	return resp, body
}

func sum(b []byte) [32]byte { return sha256.Sum256(b) }

// value reads a counter's or gauge's current value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	require.NoError(t, m.Write(&d))
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// discardWriter is a ResponseWriter that keeps nothing, for benchmarks of the handler alone.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
