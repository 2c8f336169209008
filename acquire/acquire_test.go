package acquire

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

func content(seed uint64, n int) []byte {
	b := make([]byte, n)
	var s [32]byte
	s[0] = byte(seed)
	rand.NewChaCha8(s).Read(b)
	return b
}

func checksumOf(t *testing.T, b []byte) Checksum {
	t.Helper()
	s := sha512.Sum512(b)
	c, err := ParseChecksum("sha512:" + hex.EncodeToString(s[:]))
	require.NoError(t, err)
	return c
}

// origin is an HTTP origin serving data with Range support, recording what it was asked and
// sent, and misbehaving as its fail function decides for each request (by number, from 1).
type origin struct {
	data   []byte
	fail   func(n int, w http.ResponseWriter, r *http.Request) bool
	mu     sync.Mutex
	ranges []string
	sent   atomic.Int64
	count  atomic.Int64
}

func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := int(o.count.Add(1))
	o.mu.Lock()
	o.ranges = append(o.ranges, r.Header.Get("Range"))
	o.mu.Unlock()
	if o.fail != nil && o.fail(n, w, r) {
		return
	}
	cw := &countWriter{ResponseWriter: w, n: &o.sent}
	http.ServeContent(cw, r, "", time.Time{}, bytes.NewReader(o.data))
}

// countWriter counts the content bytes of successful responses.
type countWriter struct {
	http.ResponseWriter
	n    *atomic.Int64
	code int
}

func (c *countWriter) WriteHeader(code int) {
	c.code = code
	c.ResponseWriter.WriteHeader(code)
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	if c.code < 300 {
		c.n.Add(int64(n))
	}
	return n, err
}

func newOrigin(t *testing.T, o *origin) string {
	t.Helper()
	ts := httptest.NewServer(o)
	t.Cleanup(ts.Close)
	return ts.URL + "/release.iso"
}

func newCache(t *testing.T, opts ...Option) (*Cache, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	c, err := NewCache(t.TempDir(), append([]Option{WithMetrics(m), WithRetry(5, time.Millisecond, 5*time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	return c, m
}

func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	require.NoError(t, c.Write(&d))
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

func TestGet(t *testing.T) {
	t.Parallel()
	data := content(1, 3<<20+7)
	tests := []struct {
		name string
		// prefix is how many correct bytes an earlier run left in the partial file.
		prefix int
		fail   func(n int, w http.ResponseWriter, r *http.Request) bool
		// wantSent bounds the bytes the origin sends.
		wantSent    int
		wantRetries float64
		firstRange  string
	}{
		{name: "fresh", wantSent: len(data)},
		{name: "resume", prefix: 1 << 20, wantSent: len(data) - 1<<20, firstRange: fmt.Sprintf("bytes=%d-", 1<<20)},
		{name: "already complete", prefix: len(data), wantSent: 0, firstRange: fmt.Sprintf("bytes=%d-", len(data))},
		{
			name: "dead origin comes back",
			fail: func(n int, w http.ResponseWriter, _ *http.Request) bool {
				if n <= 3 {
					w.WriteHeader(http.StatusServiceUnavailable)
					return true
				}
				return false
			},
			wantSent: len(data), wantRetries: 3,
		},
		{
			name: "connection cut mid-way resumes",
			fail: func(n int, w http.ResponseWriter, _ *http.Request) bool {
				if n == 1 {
					w.Header().Set("Content-Length", fmt.Sprint(len(data)))
					w.WriteHeader(http.StatusOK)
					w.Write(data[:1<<20])
					panic(http.ErrAbortHandler)
				}
				return false
			},
			wantSent: len(data) - 1<<20, wantRetries: 1,
		},
		{
			name:   "origin without ranges",
			prefix: 1000,
			fail: func(_ int, w http.ResponseWriter, r *http.Request) bool {
				w.WriteHeader(http.StatusOK)
				w.Write(data)
				return true
			},
			wantSent: 0, firstRange: "bytes=1000-",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := &origin{data: data, fail: tt.fail}
			url := newOrigin(t, o)
			c, m := newCache(t)
			sum := checksumOf(t, data)
			if tt.prefix > 0 {
				require.NoError(t, os.WriteFile(c.PartialPath(sum), data[:tt.prefix], 0o644))
			}
			p, err := c.Get(t.Context(), sum, &HTTPFetcher{URL: url})
			require.NoError(t, err)
			require.Equal(t, c.Path(sum), p)
			got, err := os.ReadFile(p)
			require.NoError(t, err)
			require.True(t, bytes.Equal(data, got))
			_, err = os.Stat(c.PartialPath(sum))
			require.ErrorIs(t, err, os.ErrNotExist)
			require.LessOrEqual(t, o.sent.Load(), int64(tt.wantSent)+int64(len(data))*boolInt(tt.name == "origin without ranges"))
			if tt.name != "origin without ranges" {
				require.EqualValues(t, tt.wantSent, o.sent.Load())
			}
			require.Equal(t, tt.wantRetries, value(t, m.retries))
			require.Equal(t, float64(len(data)), value(t, m.present))
			require.Equal(t, float64(len(data)), value(t, m.expected))
			require.GreaterOrEqual(t, value(t, m.fetched), float64(len(data)-tt.prefix))
			require.Equal(t, 1.0, value(t, m.verified.WithLabelValues("ok")))
			if tt.firstRange != "" {
				require.Equal(t, tt.firstRange, o.ranges[0])
			}
		})
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func TestGetPartialLongerThanContent(t *testing.T) {
	t.Parallel()
	data := content(7, 100<<10)
	o := &origin{data: data}
	url := newOrigin(t, o)
	c, _ := newCache(t)
	sum := checksumOf(t, data)
	require.NoError(t, os.WriteFile(c.PartialPath(sum), content(8, 200<<10), 0o644))
	p, err := c.Get(t.Context(), sum, &HTTPFetcher{URL: url})
	require.NoError(t, err)
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))
	require.Equal(t, []string{fmt.Sprintf("bytes=%d-", 200<<10), ""}, o.ranges)
}

// TestProgress checks that the size is known, and progress logged, while the download runs.
func TestProgress(t *testing.T) {
	t.Parallel()
	data := content(9, 1<<20)
	proceed := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(proceed) }) }
	// The origin's handler must end for the test server to close, whatever the test's outcome.
	t.Cleanup(release)
	url := newOrigin(t, &origin{data: data, fail: func(n int, w http.ResponseWriter, _ *http.Request) bool {
		if n > 1 {
			w.WriteHeader(http.StatusGone)
			return true
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data[:len(data)/2])
		w.(http.Flusher).Flush()
		<-proceed
		w.Write(data[len(data)/2:])
		return true
	}})
	logs := &chanHandler{records: make(chan slog.Record, 1000)}
	c, m := newCache(t, WithLogger(slog.New(logs)), WithProgressInterval(time.Millisecond))
	sum := checksumOf(t, data)
	done := make(chan error, 1)
	go func() {
		_, err := c.Get(t.Context(), sum, &HTTPFetcher{URL: url})
		done <- err
	}()
	for progressed := false; !progressed; {
		var r slog.Record
		select {
		case r = <-logs.records:
		case err := <-done:
			t.Fatalf("the download ended before any progress was logged: %v", err)
		}
		if r.Message != "download progress" {
			require.NotEqual(t, slog.LevelWarn, r.Level, r.Message)
			continue
		}
		var size int64
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "size" {
				size = a.Value.Int64()
			}
			return true
		})
		if size == -1 {
			continue // logged before the response headers arrived
		}
		require.EqualValues(t, len(data), size)
		progressed = true
	}
	require.Equal(t, float64(len(data)), value(t, m.expected))
	release()
	require.NoError(t, <-done)
}

// chanHandler is a slog.Handler that hands every record to a channel, dropping them when full.
type chanHandler struct{ records chan slog.Record }

func (h *chanHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *chanHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *chanHandler) WithGroup(string) slog.Handler            { return h }
func (h *chanHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.records <- r.Clone():
	default:
	}
	return nil
}

func TestGetWrongChecksum(t *testing.T) {
	t.Parallel()
	data := content(2, 100<<10)
	url := newOrigin(t, &origin{data: data})
	c, m := newCache(t)
	sum := checksumOf(t, content(3, 10))
	_, err := c.Get(t.Context(), sum, &HTTPFetcher{URL: url})
	require.ErrorIs(t, err, ErrChecksumMismatch)
	require.Contains(t, err.Error(), "want "+sum.String())
	for _, p := range []string{c.Path(sum), c.PartialPath(sum)} {
		_, err := os.Stat(p)
		require.ErrorIs(t, err, os.ErrNotExist, p)
	}
	require.Equal(t, 1.0, value(t, m.verified.WithLabelValues("mismatch")))
}

func TestGetPermanentAndBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		status   int
		requests int64
	}{
		{"not found is not retried", http.StatusNotFound, 1},
		{"forbidden is not retried", http.StatusForbidden, 1},
		{"server errors are retried a bounded number of times", http.StatusBadGateway, 5},
		{"too many requests is retried", http.StatusTooManyRequests, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := &origin{fail: func(_ int, w http.ResponseWriter, _ *http.Request) bool {
				w.WriteHeader(tt.status)
				return true
			}}
			url := newOrigin(t, o)
			c, _ := newCache(t)
			_, err := c.Get(t.Context(), checksumOf(t, []byte("x")), &HTTPFetcher{URL: url})
			require.Error(t, err)
			require.Contains(t, err.Error(), fmt.Sprint(tt.status))
			require.Equal(t, tt.requests, o.count.Load())
		})
	}
}

func TestGetCancelledDuringBackoff(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.NotFoundHandler())
	url := ts.URL
	ts.Close() // a dead origin: connections are refused
	c, err := NewCache(t.TempDir(), WithRetry(100, time.Hour, time.Hour))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Get(ctx, checksumOf(t, []byte("x")), &HTTPFetcher{URL: url})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 10*time.Second)
}

func TestReuse(t *testing.T) {
	t.Parallel()
	data := content(4, 200<<10)
	o := &origin{data: data}
	url := newOrigin(t, o)
	c, m := newCache(t)
	sum := checksumOf(t, data)
	p, err := c.Get(t.Context(), sum, &HTTPFetcher{URL: url})
	require.NoError(t, err)

	// Unchanged: reused from the marker, no fetch, no hashing.
	_, err = c.Get(t.Context(), sum, failFetcher{t})
	require.NoError(t, err)
	require.Equal(t, 1.0, value(t, m.verified.WithLabelValues("reused")))
	require.Equal(t, 1.0, value(t, m.verified.WithLabelValues("ok")))

	// Touched but intact: hashed again, reused.
	later := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(p, later, later))
	_, err = c.Get(t.Context(), sum, failFetcher{t})
	require.NoError(t, err)
	require.Equal(t, 2.0, value(t, m.verified.WithLabelValues("ok")))

	// Corrupted: removed and fetched again.
	bad := bytes.Clone(data)
	bad[100] ^= 1
	require.NoError(t, os.WriteFile(p, bad, 0o644))
	requests := o.count.Load()
	_, err = c.Get(t.Context(), sum, &HTTPFetcher{URL: url})
	require.NoError(t, err)
	require.Equal(t, requests+1, o.count.Load())
	require.Equal(t, 1.0, value(t, m.verified.WithLabelValues("mismatch")))
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))
}

type failFetcher struct{ t *testing.T }

func (f failFetcher) Fetch(context.Context, io.WriterAt, int64) (int64, error) {
	f.t.Error("Fetch called for content the cache has")
	return 0, errors.New("unexpected fetch")
}

// holeFetcher writes ranges out of order, leaves a hole and fails: only the contiguous prefix
// may survive in the partial file.
type holeFetcher struct {
	data  []byte
	calls int
}

func (h *holeFetcher) Fetch(_ context.Context, dst io.WriterAt, from int64) (int64, error) {
	h.calls++
	if h.calls == 1 {
		var wg sync.WaitGroup
		for _, r := range [][2]int{{0, 100}, {300, 400}, {100, 200}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = dst.WriteAt(h.data[r[0]:r[1]], int64(r[0])) // a failed write leaves a hole, which is what the test is about
			}()
		}
		wg.Wait()
		return 0, errors.New("peer went away")
	}
	if from != 200 {
		return 0, fmt.Errorf("resumed from %d, want 200: %w", from, ErrPermanent)
	}
	_, err := dst.WriteAt(h.data[from:], from)
	return int64(len(h.data)), err
}

func TestFetcherHolesAreNotTrusted(t *testing.T) {
	t.Parallel()
	data := content(5, 1000)
	c, _ := newCache(t)
	sum := checksumOf(t, data)
	p, err := c.Get(t.Context(), sum, &holeFetcher{data: data})
	require.NoError(t, err)
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, data, got)
}

func TestAcquire(t *testing.T) {
	t.Parallel()
	data := content(6, 50<<10)
	url := newOrigin(t, &origin{data: data})
	local := t.TempDir() + "/local.iso"
	require.NoError(t, os.WriteFile(local, data, 0o644))
	sum := checksumOf(t, data)
	wrong := checksumOf(t, []byte("other"))
	cache := t.TempDir()

	tests := []struct {
		name string
		src  Source
		want string
		err  string
	}{
		{"local path", Source{Path: local}, local, ""},
		{"local path verified", Source{Path: local, Checksum: sum}, local, ""},
		{"local path wrong checksum", Source{Path: local, Checksum: wrong}, "", "checksum mismatch"},
		{"local path missing", Source{Path: local + ".nope"}, "", "no such file"},
		{"url", Source{URL: url, Checksum: sum, CacheDir: cache}, cache + "/" + sum.Hex() + ".iso", ""},
		{"url without checksum", Source{URL: url, CacheDir: cache}, "", "needs its checksum"},
		{"url without cache", Source{URL: url, Checksum: sum}, "", "needs a cache directory"},
		{"both", Source{Path: local, URL: url}, "", "not both"},
		{"none", Source{}, "", "is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := Acquire(t.Context(), tt.src)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, p)
		})
	}
}

func TestParseChecksum(t *testing.T) {
	t.Parallel()
	good := strings.Repeat("ab", 64)
	tests := []struct {
		in  string
		err string
	}{
		{"sha512:" + good, ""},
		{"SHA512:" + strings.ToUpper(good), ""},
		{good, ""},
		{"sha256:" + good, `algorithm "sha256" is not supported`},
		{"sha512:abc", "128 hex digits"},
		{"sha512:" + strings.Repeat("zz", 64), "128 hex digits"},
		{"", "128 hex digits"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			c, err := ParseChecksum(tt.in)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "sha512:"+good, c.String())
		})
	}
}

func TestParseContentRange(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in               string
		start, end, size int64
		ok               bool
	}{
		{"bytes 0-9/100", 0, 9, 100, true},
		{"bytes 5-9/*", 5, 9, -1, true},
		{"bytes */100", -1, -1, 100, true},
		{"bytes x-9/100", 0, 0, 0, false},
		{"0-9/100", 0, 0, 0, false},
		{"bytes 0-9", 0, 0, 0, false},
	} {
		s, e, n, err := parseContentRange(tt.in)
		if !tt.ok {
			require.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, [3]int64{tt.start, tt.end, tt.size}, [3]int64{s, e, n}, tt.in)
	}
}
