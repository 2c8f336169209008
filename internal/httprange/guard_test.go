package httprange_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
)

// versions serves one of two versions of a file of the same size: the first answer is of v1,
// every later one of v2 (the file replaced on the origin while it is read). header sets the
// validators of each answer; conditions records the If-Match and If-Unmodified-Since of each
// request.
type versions struct {
	v1, v2     []byte
	header     func(h http.Header, version int)
	served     atomic.Int64
	mu         sync.Mutex
	conditions []string
}

func (v *versions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	version, data := 2, v.v2
	if v.served.Add(1) == 1 {
		version, data = 1, v.v1
	}
	v.mu.Lock()
	v.conditions = append(v.conditions, r.Header.Get("If-Match")+"|"+r.Header.Get("If-Unmodified-Since"))
	v.mu.Unlock()
	v.header(w.Header(), version)
	// ServeContent honours If-Match and If-Unmodified-Since against the validators set above.
	http.ServeContent(w, r, "release.iso", time.Time{}, bytes.NewReader(data))
}

// An origin that replaces the file while it is read never makes a read mix the two versions: its
// strong ETag or Last-Modified guards every read after the first (412, or an answer naming
// another version, is ErrChanged), and an origin with neither (a weak ETag, or none) is refused
// at Open, since nothing could tell the versions apart.
func TestReaderNeverMixesVersions(t *testing.T) {
	t.Parallel()
	v1, v2 := bytes.Repeat([]byte{1}, 1<<20), bytes.Repeat([]byte{2}, 1<<20)
	fast := backoff.Policy{Initial: time.Millisecond, Attempts: 2}
	lm := func(version int) string {
		return time.Date(2026, 1, version, 0, 0, 0, 0, time.UTC).Format(http.TimeFormat)
	}
	tests := []struct {
		name      string
		header    func(h http.Header, version int)
		wantOpen  error  // Open's error, or nil
		condition string // the precondition of the second request
	}{
		{
			name:      "strong ETag",
			header:    func(h http.Header, v int) { h.Set("ETag", fmt.Sprintf(`"v%d"`, v)) },
			condition: `"v1"|`,
		},
		{
			name:      "Last-Modified",
			header:    func(h http.Header, v int) { h.Set("Last-Modified", lm(v)) },
			condition: "|" + lm(1),
		},
		{
			name: "weak ETag and Last-Modified",
			header: func(h http.Header, v int) {
				h.Set("ETag", fmt.Sprintf(`W/"v%d"`, v))
				h.Set("Last-Modified", lm(v))
			},
			condition: "|" + lm(1),
		},
		{
			name:     "weak ETag only",
			header:   func(h http.Header, v int) { h.Set("ETag", fmt.Sprintf(`W/"v%d"`, v)) },
			wantOpen: httprange.ErrNoValidator,
		},
		{
			name:     "no validator",
			header:   func(http.Header, int) {},
			wantOpen: httprange.ErrNoValidator,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			origin := &versions{v1: v1, v2: v2, header: tc.header}
			srv := httptest.NewServer(origin)
			t.Cleanup(srv.Close)
			r, err := httprange.Open(t.Context(), srv.Client(), srv.URL+"/x.iso", httprange.WithReadTimeouts(time.Second, fast))
			if tc.wantOpen != nil {
				require.ErrorIs(t, err, tc.wantOpen)
				require.ErrorContains(t, err, "no strong ETag and no Last-Modified")
				return
			}
			require.NoError(t, err)
			t.Cleanup(func() { _ = r.Close() })
			whole, err := io.ReadAll(io.NewSectionReader(r, 0, r.Size()))
			require.ErrorIs(t, err, httprange.ErrChanged)
			require.NotContains(t, string(whole), "\x02", "no byte of the second version")
			origin.mu.Lock()
			defer origin.mu.Unlock()
			require.Equal(t, "|", origin.conditions[0], "the first read has nothing to compare with")
			require.Equal(t, tc.condition, origin.conditions[1])
		})
	}
}

// A file that comes whole in the first answer needs no validator: nothing is read twice.
func TestReaderSmallFileWithoutValidator(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("abc"), 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}))
	t.Cleanup(srv.Close)
	r, err := httprange.Open(t.Context(), srv.Client(), srv.URL+"/x.iso")
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	got, err := io.ReadAll(io.NewSectionReader(r, 0, r.Size()))
	require.NoError(t, err)
	require.Equal(t, data, got)
}

// ReadAt is safe for concurrent use, as io.ReaderAt promises: with a cache of one block, every
// block is evicted by another reader between its fetch and its use, and each read still returns
// the file's bytes.
func TestReaderConcurrentReadAt(t *testing.T) {
	t.Parallel()
	data := make([]byte, 256<<10)
	for i := range data {
		data[i] = byte(i * 7 / 3)
	}
	origin := &counting{data: data}
	origin.etag.Store(`"c"`)
	srv := httptest.NewServer(origin)
	t.Cleanup(srv.Close)
	r, err := httprange.Open(t.Context(), srv.Client(), srv.URL+"/x.iso", httprange.WithBlocks(512, 1, 1))
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			buf := make([]byte, 1500)
			for range 100 {
				off := rng.Int64N(int64(len(data) - len(buf)))
				n, err := r.ReadAt(buf, off)
				if err != nil || !bytes.Equal(buf[:n], data[off:off+int64(n)]) || n != len(buf) {
					errs <- fmt.Errorf("read %d at %d: %d bytes, %w", len(buf), off, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// A remote read has an overall deadline: an origin that sends a byte now and then, never idle
// long enough for the idle timeout, fails once the deadline passes, not after every retry of
// every block.
func TestReaderDeadline(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte{9}, 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		off, n, err := httprange.ParseRange(r.Header.Get("Range"), int64(len(data)))
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestedRangeNotSatisfiable)
			return
		}
		w.Header().Set("ETag", `"slow"`)
		w.Header().Set("Content-Range", httprange.Sent(off, n, int64(len(data))))
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		w.WriteHeader(http.StatusPartialContent)
		for i := range n {
			if _, err := w.Write(data[off+i : off+i+1]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(srv.Close)
	start := time.Now()
	_, err := httprange.Open(t.Context(), srv.Client(), srv.URL+"/x.iso",
		httprange.WithDeadline(300*time.Millisecond), httprange.WithReadTimeouts(time.Second, backoff.Policy{Initial: time.Millisecond, Attempts: 10}))
	require.ErrorIs(t, err, httprange.ErrDeadline)
	require.ErrorContains(t, err, "deadline of the remote read passed (300ms)")
	require.Less(t, time.Since(start), 5*time.Second)
	require.False(t, errors.Is(err, httprange.ErrChanged))
}

// The eviction that broke ReadAt, step by step: a read waits for its window (blocks 5 and 6) while
// other reads fetch block 5 and then others, so that when the window arrives, keeping block 6
// evicts block 5, the one the waiting read asked for. It still gets the file's bytes, from the
// answer it read, not from the cache.
func TestReaderBlockEvictedBeforeUse(t *testing.T) {
	t.Parallel()
	const block = 512
	data := make([]byte, 20*block)
	for i := range data {
		data[i] = byte(i % 251)
	}
	window := httprange.Request(5*block, 2*block) // the waiting read's window: blocks 5 and 6
	arrived, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") == window {
			close(arrived)
			<-release
		}
		w.Header().Set("ETag", `"e"`)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}))
	t.Cleanup(srv.Close)
	// Blocks of 512 bytes, a window of 2, 2 kept: Open keeps blocks 0 and 1.
	r, err := httprange.Open(t.Context(), srv.Client(), srv.URL+"/x.iso", httprange.WithBlocks(block, 2, 2))
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })

	type result struct {
		n   int
		err error
	}
	waiting := make(chan result, 1)
	got := make([]byte, 100)
	go func() {
		n, err := r.ReadAt(got, 5*block+10)
		waiting <- result{n, err}
	}()
	<-arrived
	one := make([]byte, 1)
	for _, off := range []int64{
		6 * block,  // fetches blocks 6 and 7: 6 and 7 kept
		5 * block,  // fetches block 5 alone (6 is held): 7 and 5 kept
		19 * block, // fetches the last block alone: 5 and 19 kept
	} {
		_, err := r.ReadAt(one, off)
		require.NoError(t, err)
	}
	close(release) // the window arrives: keeping block 6 evicts block 5
	res := <-waiting
	require.NoError(t, res.err)
	require.Equal(t, len(got), res.n)
	require.Equal(t, data[5*block+10:5*block+110], got)
}
