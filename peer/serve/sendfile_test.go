package serve_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/cache"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
	"github.com/upgrade-repo/upgrade-repo/peer/serve"
)

const testChunk = 1 << 20

// complete returns a store holding a complete, verified ISO of size random bytes, its bytes, its
// sha512 and its path.
func complete(t *testing.T, size int) (*cache.Store, []byte, string, string) {
	t.Helper()
	data := make([]byte, size)
	_, err := rand.Read(data)
	require.NoError(t, err)
	sum := sha512.Sum512(data)
	sha := hex.EncodeToString(sum[:])
	path := filepath.Join(t.TempDir(), sha+".iso")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	store := cache.NewStore(inventory.NewDirectory("self"))
	l, err := store.AddComplete(path, sha, testChunk)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return store, data, sha, path
}

// testServer serves a store with metrics of its own. A client may have read a whole answer
// before the handler counted it: wait for done, which receives once per request the handler has
// returned from, before reading the metrics.
type testServer struct {
	*httptest.Server
	m    *peer.Metrics
	done chan struct{}
}

func server(t *testing.T, store *cache.Store) *testServer {
	t.Helper()
	m, err := peer.NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	h := serve.NewHandler(slog.New(slog.DiscardHandler), store, m)
	s := &testServer{m: m, done: make(chan struct{}, 64)}
	// The ResponseWriter is handed on as it is: a wrapper would hide the connection from sendfile.
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		s.done <- struct{}{}
	}))
	t.Cleanup(s.Close)
	return s
}

// sent returns the bytes sent in mode, once n requests were answered.
func (s *testServer) sent(t *testing.T, n int, mode string) float64 {
	t.Helper()
	for range n {
		select {
		case <-s.done:
		case <-t.Context().Done():
			t.Fatal("the handler did not return")
		}
	}
	return testutil.ToFloat64(s.m.FileBytes.WithLabelValues(mode))
}

// get fetches the ISO's bytes, in rng when it is not empty.
func get(t *testing.T, url, rng string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// The chunks a peer asks for leave the ISO's file with sendfile, counted by mode as repo counts its
// files: every byte zerocopy, none copied through user space. A Go upgrade, or a wrapper that hides
// the file from net/http, would turn this into copying.
func TestChunksLeaveWithSendfile(t *testing.T) {
	t.Parallel()
	const size = 8*testChunk + 12345
	store, data, sha, _ := complete(t, size)
	tests := []struct {
		name   string
		rng    string
		off, n int
		status int
	}{
		{name: "whole ISO", off: 0, n: size, status: http.StatusOK},
		{name: "one chunk", rng: fmt.Sprintf("bytes=%d-%d", testChunk, 2*testChunk-1), off: testChunk, n: testChunk, status: http.StatusPartialContent},
		{name: "across chunks, unaligned", rng: "bytes=1000-3000000", off: 1000, n: 3000000 - 1000 + 1, status: http.StatusPartialContent},
		{name: "last bytes", rng: "bytes=-5000", off: size - 5000, n: 5000, status: http.StatusPartialContent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := server(t, store)
			resp, body := get(t, srv.URL+"/v1/iso/"+sha, tt.rng)
			require.Equal(t, tt.status, resp.StatusCode)
			require.True(t, bytes.Equal(data[tt.off:tt.off+tt.n], body), "the bytes of the range")
			require.InDelta(t, float64(tt.n), srv.sent(t, 1, peer.FileZeroCopy), 0, "bytes sent with sendfile")
			require.Zero(t, srv.sent(t, 0, peer.FileCopied), "bytes copied through user space")
		})
	}
}

// Concurrent requests each send their own range: a file position shared between them would mix
// their bytes.
func TestConcurrentRangesWithSendfile(t *testing.T) {
	t.Parallel()
	const size = 6*testChunk + 777
	store, data, sha, _ := complete(t, size)
	srv := server(t, store)
	const requests = 24
	var wg sync.WaitGroup
	var total int64
	var mu sync.Mutex
	for g := range requests {
		wg.Go(func() {
			off := (g * 262147) % (size - 1)
			end := min(size-1, off+testChunk+g*1001)
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/v1/iso/"+sha, nil)
			if !assertNoError(t, err) {
				return
			}
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, end))
			resp, err := http.DefaultClient.Do(req)
			if !assertNoError(t, err) {
				return
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !assertNoError(t, err) {
				return
			}
			if !bytes.Equal(data[off:end+1], body) {
				t.Errorf("range %d-%d: other bytes than the file's", off, end)
			}
			mu.Lock()
			total += int64(len(body))
			mu.Unlock()
		})
	}
	wg.Wait()
	require.InDelta(t, float64(total), srv.sent(t, requests, peer.FileZeroCopy), 0, "bytes sent with sendfile")
	require.Zero(t, srv.sent(t, 0, peer.FileCopied), "bytes copied through user space")
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// A chunk damaged on disk is still checked before anything is sent: it is refused, not sent.
func TestDamagedChunkIsNotSent(t *testing.T) {
	t.Parallel()
	store, _, sha, path := complete(t, 4*testChunk)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("rot"), 2*testChunk+10)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	srv := server(t, store)
	resp, _ := get(t, srv.URL+"/v1/iso/"+sha, fmt.Sprintf("bytes=%d-%d", 2*testChunk, 3*testChunk-1))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Zero(t, srv.sent(t, 1, peer.FileZeroCopy))
	require.Zero(t, srv.sent(t, 0, peer.FileCopied))
	resp, _ = get(t, srv.URL+"/v1/iso/"+sha, fmt.Sprintf("bytes=0-%d", testChunk-1))
	require.Equal(t, http.StatusPartialContent, resp.StatusCode, "the intact chunks are still served")
	require.InDelta(t, float64(testChunk), srv.sent(t, 1, peer.FileZeroCopy), 0)
}
