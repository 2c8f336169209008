package httprange_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
)

// counting serves data with ranges (http.ServeContent) and counts requests and bytes sent.
type counting struct {
	data            []byte
	etag            atomic.Value
	requests, bytes atomic.Int64
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.requests.Add(1)
	if e, _ := c.etag.Load().(string); e != "" {
		w.Header().Set("ETag", e)
	}
	cw := &countingWriter{ResponseWriter: w, n: &c.bytes}
	http.ServeContent(cw, r, "release.iso", time.Time{}, bytes.NewReader(c.data))
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n.Add(int64(n))
	return n, err
}

// releaseISO builds a release-like ISO with xorriso: metadata, image lists and an archive.
func releaseISO(t *testing.T) []byte {
	t.Helper()
	isotest.RequireXorriso(t)
	src := t.TempDir()
	for p, body := range map[string]string{
		"harvester-release.yaml":                   "harvester: v1.6.0\nminUpgradableVersion: v1.5.0\n",
		"bundle/metadata.yaml":                     "images:\n  common:\n  - list: images-lists/common.txt\n    archive: images/common.tar.zst\n",
		"bundle/harvester/images-lists/common.txt": "docker.io/library/nginx:1.27\n",
	} {
		require.NoError(t, os.MkdirAll(filepath.Join(src, filepath.Dir(p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(src, p), []byte(body), 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(src, "bundle/harvester/images"), 0o755))
	big := bytes.Repeat([]byte("0123456789abcdef"), 4<<20/16*3) // 12 MiB of "images"
	require.NoError(t, os.WriteFile(filepath.Join(src, "bundle/harvester/images/common.tar.zst"), big, 0o644))
	data, err := os.ReadFile(isotest.Build(t, src))
	require.NoError(t, err)
	return data
}

// A remote ISO is read like a local one, its metadata in a few requests and a few hundred KB,
// whatever its size; a file read whole through the reader is the file.
func TestReaderReadsAnISO(t *testing.T) {
	t.Parallel()
	data := releaseISO(t)
	origin := &counting{data: data}
	origin.etag.Store(`"r1"`)
	srv := httptest.NewServer(origin)
	t.Cleanup(srv.Close)

	r, err := httprange.Open(t.Context(), srv.Client(), srv.URL+"/release.iso?X-Amz-Signature=s")
	require.NoError(t, err)
	require.Equal(t, int64(len(data)), r.Size())
	fsys, err := iso.Open(r, r.Size())
	require.NoError(t, err)
	b, err := fsys.ReadFile("harvester-release.yaml")
	require.NoError(t, err)
	require.Contains(t, string(b), "harvester: v1.6.0")
	b, err = fsys.ReadFile("bundle/harvester/images-lists/common.txt")
	require.NoError(t, err)
	require.Equal(t, "docker.io/library/nginx:1.27\n", string(b))
	reqs, got := r.Stats()
	require.Equal(t, origin.requests.Load(), reqs)
	require.LessOrEqual(t, reqs, int64(16), "requests for the metadata")
	require.LessOrEqual(t, got, int64(1<<20), "bytes for the metadata")
	require.Less(t, got, int64(len(data))/4)
	t.Logf("metadata of a %d-byte ISO: %d requests, %d bytes", len(data), reqs, got)

	// Every byte, in odd pieces, is the file's.
	whole := make([]byte, 0, len(data))
	buf := make([]byte, 99991)
	for off := int64(0); ; {
		n, err := r.ReadAt(buf, off)
		whole = append(whole, buf[:n]...)
		off += int64(n)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
	}
	require.Equal(t, data, whole)
}

func TestReaderRefuses(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte{1}, 8<<20)
	fast := backoff.Policy{Initial: time.Millisecond, Attempts: 2}

	t.Run("origin without ranges", func(t *testing.T) {
		t.Parallel()
		var sent atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			for off := 0; off < len(data); off += 64 << 10 {
				n, err := w.Write(data[off : off+64<<10])
				sent.Add(int64(n))
				if err != nil {
					return
				}
			}
		}))
		t.Cleanup(srv.Close)
		_, err := httprange.Open(t.Context(), srv.Client(), srv.URL+"/x.iso")
		require.ErrorIs(t, err, httprange.ErrNoRanges)
		require.ErrorContains(t, err, "does not serve ranges")
		require.Less(t, sent.Load(), int64(len(data)), "the whole body is never read")
	})
	t.Run("file changes between requests", func(t *testing.T) {
		t.Parallel()
		origin := &counting{data: data}
		origin.etag.Store(`"v1"`)
		srv := httptest.NewServer(origin)
		t.Cleanup(srv.Close)
		r, err := httprange.Open(t.Context(), srv.Client(), srv.URL+"/x.iso", httprange.WithReadTimeouts(time.Second, fast))
		require.NoError(t, err)
		origin.etag.Store(`"v2"`)
		_, err = r.ReadAt(make([]byte, 10), 4<<20)
		require.ErrorIs(t, err, httprange.ErrChanged)
	})
	t.Run("size changes between requests", func(t *testing.T) {
		t.Parallel()
		origin := &counting{data: data}
		origin.etag.Store(`"v1"`)
		srv := httptest.NewServer(origin)
		t.Cleanup(srv.Close)
		r, err := httprange.Open(t.Context(), srv.Client(), srv.URL+"/x.iso", httprange.WithReadTimeouts(time.Second, fast))
		require.NoError(t, err)
		origin.data = data[:6<<20]
		_, err = r.ReadAt(make([]byte, 10), 5<<20)
		require.ErrorIs(t, err, httprange.ErrChanged)
	})
	t.Run("stalled origin", func(t *testing.T) {
		t.Parallel()
		stop := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-stop:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(func() { close(stop); srv.Close() })
		_, err := httprange.Open(t.Context(), srv.Client(), srv.URL+"/x.iso", httprange.WithReadTimeouts(100*time.Millisecond, fast))
		require.ErrorContains(t, err, "no byte received for 100ms")
	})
	t.Run("not found, secret kept", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		t.Cleanup(srv.Close)
		_, err := httprange.Open(t.Context(), srv.Client(), srv.URL+"/x.iso?X-Amz-Signature=secret")
		var se *httprange.StatusError
		require.ErrorAs(t, err, &se)
		require.Equal(t, http.StatusNotFound, se.Code)
		require.NotContains(t, err.Error(), "secret")
	})
}

// A remote ISO cut short or damaged is an error from the ISO reader, never a panic.
func TestReaderDamagedISO(t *testing.T) {
	t.Parallel()
	data := releaseISO(t)
	damaged := bytes.Clone(data)
	copy(damaged[16*2048:], bytes.Repeat([]byte{0xff}, 2048)) // the primary volume descriptor
	for name, body := range map[string][]byte{"truncated": data[:40*1024], "damaged": damaged} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			origin := &counting{data: body}
			origin.etag.Store(`"v1"`)
			srv := httptest.NewServer(origin)
			t.Cleanup(srv.Close)
			r, err := httprange.Open(t.Context(), srv.Client(), srv.URL+"/x.iso")
			require.NoError(t, err)
			_, err = iso.Open(r, r.Size())
			require.Error(t, err)
		})
	}
}
