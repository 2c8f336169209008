package fetch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/chunks"
	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/cache"
	"github.com/upgrade-repo/upgrade-repo/peer/fetch"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
)

// originSize is the size of the ISOs the origin tests fetch: four whole chunks and a short one.
const originSize = 4*testChunk + 1000

// originChunks is how many chunks an ISO of originSize has.
const originChunks = 5

// badOrigin serves one ISO over HTTP with Range support, records what it was asked, counts what it
// sent, and misbehaves as its fail function decides for each request (numbered from 1; the first
// request of a fresh fetch is the probe of the first byte).
type badOrigin struct {
	data []byte
	fail func(o *badOrigin, n int, w http.ResponseWriter, r *http.Request) bool
	url  string

	mu    sync.Mutex
	asked []string // "METHOD RANGE" of every request
	// sent counts the content bytes of the answers with a 2xx status, the probes' excepted.
	sent  atomic.Int64
	count atomic.Int64
}

func newBadOrigin(t *testing.T, data []byte, fail func(o *badOrigin, n int, w http.ResponseWriter, r *http.Request) bool) *badOrigin {
	t.Helper()
	o := &badOrigin{data: data, fail: fail}
	srv := httptest.NewServer(o)
	t.Cleanup(srv.Close)
	o.url = srv.URL + "/release.iso"
	return o
}

func (o *badOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := int(o.count.Add(1))
	o.mu.Lock()
	o.asked = append(o.asked, r.Method+" "+r.Header.Get("Range"))
	o.mu.Unlock()
	if !isProbe(r) {
		w = &sentCounter{ResponseWriter: w, n: &o.sent}
	}
	if o.fail != nil && o.fail(o, n, w, r) {
		return
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(o.data))
}

// requests returns what the origin was asked, in order.
func (o *badOrigin) requests() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.asked...)
}

// isProbe reports whether r asks for the first byte alone, as a fetcher does to learn the size.
func isProbe(r *http.Request) bool { return r.Header.Get("Range") == "bytes=0-0" }

// serveRange answers r's Range with a 206 of its full length but sends at most limit bytes of it,
// flushed; it reports whether the answer was cut short.
func (o *badOrigin) serveRange(w http.ResponseWriter, r *http.Request, limit int) bool {
	from, to, ok := strings.Cut(strings.TrimPrefix(r.Header.Get("Range"), "bytes="), "-")
	a, aerr := strconv.Atoi(from)
	b, berr := strconv.Atoi(to)
	if !ok || aerr != nil || berr != nil || a > b || b >= len(o.data) {
		w.WriteHeader(http.StatusBadRequest)
		return false
	}
	w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", a, b, len(o.data)))
	w.Header().Set("Content-Length", strconv.Itoa(b-a+1))
	w.WriteHeader(http.StatusPartialContent)
	end := min(a+limit, b+1)
	_, _ = w.Write(o.data[a:end])
	_ = http.NewResponseController(w).Flush()
	return end <= b
}

// sentCounter counts the content bytes written in an answer with a 2xx status.
type sentCounter struct {
	http.ResponseWriter
	n    *atomic.Int64
	code int
}

func (c *sentCounter) WriteHeader(code int) {
	c.code = code
	c.ResponseWriter.WriteHeader(code)
}

func (c *sentCounter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	if c.code < 300 {
		c.n.Add(int64(n))
	}
	return n, err
}

// Unwrap lets http.ResponseController reach the server's writer.
func (c *sentCounter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// status is a fail function that answers every request with code.
func status(code int) func(*badOrigin, int, http.ResponseWriter, *http.Request) bool {
	return func(_ *badOrigin, _ int, w http.ResponseWriter, _ *http.Request) bool {
		w.WriteHeader(code)
		return true
	}
}

// lone fetches as a node without peers does (`serve --iso-url`): its directory and membership
// hold itself alone. Every fetch uses a fresh directory, store and fetcher on the same cache
// directory, as after a restart.
type lone struct {
	cache   string
	metrics *peer.Metrics
	log     *slog.Logger
	client  *http.Client
	opts    []fetch.Option
	// watch, when set, sees every progress as the fetch reports it, on the fetch's goroutine.
	watch func(fetch.Progress)
}

func newLone(t *testing.T, opts ...fetch.Option) *lone {
	t.Helper()
	m, err := peer.NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	l := &lone{cache: t.TempDir(), metrics: m, log: testLog(), client: &http.Client{Transport: &http.Transport{}}, opts: opts}
	t.Cleanup(l.client.CloseIdleConnections)
	return l
}

// path is where the verified ISO lands.
func (l *lone) path() string { return filepath.Join(l.cache, "release.iso") }

// fetch runs one Fetch with a fresh store and fetcher and returns what it returned and every
// progress it reported.
func (l *lone) fetch(t *testing.T, ctx context.Context, sha, url string) (*cache.LocalISO, []fetch.Progress, error) {
	t.Helper()
	dir := inventory.NewDirectory("lone")
	members := &peer.StaticMembers{Local: "lone", List: []peer.Member{{Name: "lone"}}}
	store := cache.NewStore(dir)
	opts := append([]fetch.Option{fetch.WithHTTPClient(l.client), fetch.WithMetrics(l.metrics),
		fetch.WithRetry(5, time.Millisecond, 5*time.Millisecond), fetch.WithSettle(0), fetch.WithChunkSize(testChunk)}, l.opts...)
	f, err := fetch.NewFetcher(l.log, dir, members, store, opts...)
	require.NoError(t, err)
	var progress []fetch.Progress
	iso, err := f.Fetch(ctx, fetch.Request{SHA512: sha, OriginURL: url, Path: l.path()}, func(p fetch.Progress) {
		progress = append(progress, p)
		if l.watch != nil {
			l.watch(p)
		}
	})
	if held, ok := store.ISO(sha); ok {
		t.Cleanup(func() { _ = held.Close() })
	}
	return iso, progress, err
}

// requireISO checks that the verified ISO holds want, with its record and no partial download.
func (l *lone) requireISO(t *testing.T, want []byte) {
	t.Helper()
	got, err := os.ReadFile(l.path())
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "the fetched ISO differs from the origin's")
	for _, p := range []string{l.path() + ".partial", l.path() + ".partial.json"} {
		require.NoFileExists(t, p)
	}
	rec := readRecord(t, l.path()+".json")
	require.Contains(t, rec, "verified")
}

// readRecord reads the JSON record at p by key.
func readRecord(t *testing.T, p string) map[string]json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	var rec map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &rec))
	return rec
}

// heldChunks returns how many chunks the record at p lists as held.
func heldChunks(t *testing.T, p string) int {
	t.Helper()
	var digests []string
	require.NoError(t, json.Unmarshal(readRecord(t, p)["digests"], &digests))
	n := 0
	for _, d := range digests {
		if d != "" {
			n++
		}
	}
	return n
}

// value returns the value of a counter.
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	require.NoError(t, c.Write(&d))
	return d.GetCounter().GetValue()
}

// A lone fetcher asks the origin for its chunks from the first on, in order, so that the sha512,
// computed over the chunks held from the start of the ISO, is done as the last chunk lands.
func TestOriginLoneFetchesInOrder(t *testing.T) {
	t.Parallel()
	const n = 16
	data, sha := isoData(t, n*testChunk)
	o := newBadOrigin(t, data, nil)
	l := newLone(t, fetch.WithOriginParallel(1))
	_, _, err := l.fetch(t, t.Context(), sha, o.url)
	require.NoError(t, err)
	l.requireISO(t, data)
	want := []string{"GET bytes=0-0"}
	for c := range n {
		want = append(want, fmt.Sprintf("GET bytes=%d-%d", c*testChunk, (c+1)*testChunk-1))
	}
	require.Equal(t, want, o.requests())
}

// A lone fetcher gets the ISO from its origin whatever the origin's manners, and takes no byte of
// it twice.
func TestOriginFetch(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, originSize)
	tests := []struct {
		name string
		fail func(o *badOrigin, n int, w http.ResponseWriter, r *http.Request) bool
		opts []fetch.Option
		// requests is how many requests the origin gets.
		requests int64
		// sent is how many content bytes the origin sends (-1: not checked).
		sent    int64
		retries float64
		// originError is what a progress reports of the failures while they are retried.
		originError string
		check       func(t *testing.T, asked []string)
	}{
		{name: "fresh", requests: 1 + originChunks, sent: originSize},
		{name: "no idle limit", opts: []fetch.Option{fetch.WithIdleTimeout(0)}, requests: 1 + originChunks, sent: originSize},
		{
			name: "dead origin comes back",
			fail: func(_ *badOrigin, n int, w http.ResponseWriter, _ *http.Request) bool {
				if n <= 3 {
					w.WriteHeader(http.StatusServiceUnavailable)
					return true
				}
				return false
			},
			requests: 3 + 1 + originChunks, sent: originSize, retries: 3, originError: "503",
		},
		{
			name: "origin fails between chunks and comes back",
			fail: func(_ *badOrigin, n int, w http.ResponseWriter, _ *http.Request) bool {
				if n == 3 || n == 4 || n == 5 {
					w.WriteHeader(http.StatusBadGateway)
					return true
				}
				return false
			},
			opts:     []fetch.Option{fetch.WithOriginParallel(1)},
			requests: 1 + 3 + originChunks, sent: originSize, retries: 3, originError: "502",
		},
		{
			name: "connection cut mid-chunk resumes inside the chunk",
			fail: func(o *badOrigin, n int, w http.ResponseWriter, r *http.Request) bool {
				if n == 2 && o.serveRange(w, r, testChunk/2) {
					panic(http.ErrAbortHandler)
				}
				return n == 2
			},
			opts:     []fetch.Option{fetch.WithOriginParallel(1)},
			requests: 1 + originChunks + 1, sent: originSize,
			check: func(t *testing.T, asked []string) {
				var from, to int
				_, err := fmt.Sscanf(asked[1], "GET bytes=%d-%d", &from, &to)
				require.NoError(t, err, asked[1])
				require.Contains(t, asked, fmt.Sprintf("GET bytes=%d-%d", from+testChunk/2, to))
			},
		},
		{
			name: "origin without ranges",
			fail: func(o *badOrigin, _ int, w http.ResponseWriter, _ *http.Request) bool {
				w.Header().Set("Content-Length", strconv.Itoa(len(o.data)))
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write(o.data)
				return true
			},
			requests: 2, sent: originSize,
			check: func(t *testing.T, asked []string) {
				require.Equal(t, []string{"GET bytes=0-0", "GET "}, asked)
			},
		},
		{
			name: "origin without ranges cutting the first read",
			fail: func(o *badOrigin, n int, w http.ResponseWriter, _ *http.Request) bool {
				w.Header().Set("Content-Length", strconv.Itoa(len(o.data)))
				w.WriteHeader(http.StatusOK)
				if n == 2 {
					_, _ = w.Write(o.data[:testChunk*3/2])
					_ = http.NewResponseController(w).Flush()
					panic(http.ErrAbortHandler)
				}
				_, _ = w.Write(o.data)
				return true
			},
			requests: 3, sent: originSize + testChunk*3/2, retries: 1, originError: "chunk 1",
		},
		{
			name: "origin that stops serving ranges after the probe",
			fail: func(o *badOrigin, _ int, w http.ResponseWriter, r *http.Request) bool {
				if isProbe(r) {
					return false
				}
				w.Header().Set("Content-Length", strconv.Itoa(len(o.data)))
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write(o.data)
				return true
			},
			opts:     []fetch.Option{fetch.WithOriginParallel(1)},
			requests: 3, sent: -1,
			check: func(t *testing.T, asked []string) {
				require.Equal(t, "GET ", asked[2], "the whole ISO is read by one request without a range")
			},
		},
		{
			name: "origin refusing HEAD",
			fail: func(_ *badOrigin, _ int, w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodHead {
					w.WriteHeader(http.StatusForbidden)
					return true
				}
				return false
			},
			requests: 1 + originChunks, sent: originSize,
			check: func(t *testing.T, asked []string) {
				for _, a := range asked {
					require.True(t, strings.HasPrefix(a, "GET "), a)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := newBadOrigin(t, data, tc.fail)
			l := newLone(t, tc.opts...)
			iso, progress, err := l.fetch(t, t.Context(), sha, o.url)
			require.NoError(t, err)
			require.True(t, iso.Complete())
			l.requireISO(t, data)
			require.Equal(t, tc.requests, o.count.Load(), "requests: %q", o.requests())
			if tc.sent >= 0 {
				require.Equal(t, tc.sent, o.sent.Load())
			}
			require.Equal(t, tc.retries, value(t, l.metrics.OriginRetries))
			require.Equal(t, float64(originSize), value(t, l.metrics.FetchedBytes.WithLabelValues("origin")))
			require.Equal(t, 1.0, value(t, l.metrics.Verifications.WithLabelValues("ok")))
			last := progress[len(progress)-1]
			require.Equal(t, fetch.Progress{Size: originSize, Held: originSize, FromOrigin: originSize, Verified: true}, last)
			if tc.originError != "" {
				seen := false
				for _, p := range progress {
					seen = seen || strings.Contains(p.OriginError, tc.originError)
				}
				require.True(t, seen, "no progress reported the origin's failure")
			}
			if tc.check != nil {
				tc.check(t, o.requests())
			}
		})
	}
}

// A fetch interrupted part-way is resumed by the next one, after a restart: no chunk is taken
// from the origin twice, and an origin without ranges read again whole only fills the chunks
// missing.
func TestOriginResumesInterruptedRun(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, originSize)
	tests := []struct {
		name string
		// ranges is whether the origin serves ranges to the run that resumes.
		ranges bool
	}{
		{name: "ranges", ranges: true},
		{name: "no ranges"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan struct{})
			o := newBadOrigin(t, data, func(o *badOrigin, n int, w http.ResponseWriter, r *http.Request) bool {
				switch {
				case n == 4:
					// The probe and two chunks came: the node stops during the third.
					cancel()
					select {
					case <-r.Context().Done():
					case <-done:
					}
					return true
				case n > 4 && !tc.ranges:
					w.Header().Set("Content-Length", strconv.Itoa(len(o.data)))
					w.WriteHeader(http.StatusOK)
					_, _ = w.Write(o.data)
					return true
				}
				return false
			})
			t.Cleanup(func() { close(done) }) // runs before the server's Close: the handler must end
			l := newLone(t, fetch.WithOriginParallel(1))
			_, _, err := l.fetch(t, ctx, sha, o.url)
			require.ErrorIs(t, err, context.Canceled)
			require.Equal(t, 2, heldChunks(t, l.path()+".partial.json"))
			first := o.sent.Load()
			require.Less(t, first, int64(originSize))

			_, progress, err := l.fetch(t, t.Context(), sha, o.url)
			require.NoError(t, err)
			l.requireISO(t, data)
			require.Equal(t, originSize-first, progress[len(progress)-1].FromOrigin)
			require.EqualValues(t, originSize, value(t, l.metrics.FetchedBytes.WithLabelValues("origin")))
			if tc.ranges {
				require.EqualValues(t, originSize, o.sent.Load(), "bytes sent over both runs")
				require.EqualValues(t, 4+1+originChunks-2, o.count.Load(), "requests: %q", o.requests())
			} else {
				require.EqualValues(t, first+originSize, o.sent.Load(), "bytes sent over both runs")
				require.EqualValues(t, 4+2, o.count.Load(), "requests: %q", o.requests())
			}
		})
	}
}

// An origin that refuses is given up at once; one that keeps failing after WithRetry's attempts.
// What was fetched is kept.
func TestOriginGivesUp(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, originSize)
	probeOK := func(fail func(*badOrigin, int, http.ResponseWriter, *http.Request) bool) func(*badOrigin, int, http.ResponseWriter, *http.Request) bool {
		return func(o *badOrigin, n int, w http.ResponseWriter, r *http.Request) bool {
			if isProbe(r) {
				// A fresh connection for every request: the client retries a request on a
				// reused connection that closes before answering, which would count twice here.
				w.Header().Set("Connection", "close")
				return false
			}
			return fail(o, n, w, r)
		}
	}
	tests := []struct {
		name     string
		fail     func(*badOrigin, int, http.ResponseWriter, *http.Request) bool
		requests int64
		refused  bool
		// partial is true when the probe passed: the partial download is kept.
		partial bool
		errText []string
	}{
		{name: "not found", fail: status(http.StatusNotFound), requests: 1, refused: true, errText: []string{"404"}},
		{name: "forbidden", fail: status(http.StatusForbidden), requests: 1, refused: true, errText: []string{"403"}},
		{name: "unauthorized", fail: status(http.StatusUnauthorized), requests: 1, refused: true, errText: []string{"401"}},
		{name: "bad gateway", fail: status(http.StatusBadGateway), requests: 5, errText: []string{"502", "failed 5 times in a row"}},
		{name: "too many requests", fail: status(http.StatusTooManyRequests), requests: 5, errText: []string{"429"}},
		{name: "request timeout", fail: status(http.StatusRequestTimeout), requests: 5, errText: []string{"408"}},
		{
			name: "chunks not found", fail: probeOK(status(http.StatusNotFound)), requests: 2, refused: true, partial: true,
			errText: []string{"404", "kept for the next attempt"},
		},
		{
			name: "chunks fail", fail: probeOK(status(http.StatusServiceUnavailable)), requests: 1 + 5, partial: true,
			errText: []string{"503", "failed 5 times in a row", "kept for the next attempt"},
		},
		{
			name:     "connections cut before the first byte",
			fail:     probeOK(func(*badOrigin, int, http.ResponseWriter, *http.Request) bool { panic(http.ErrAbortHandler) }),
			requests: 1 + 5, partial: true, errText: []string{"failed 5 times in a row"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := newBadOrigin(t, data, tc.fail)
			l := newLone(t, fetch.WithOriginParallel(1))
			_, _, err := l.fetch(t, t.Context(), sha, o.url)
			require.Error(t, err)
			require.Equal(t, tc.refused, errors.Is(err, fetch.ErrOriginRefused), err.Error())
			for _, s := range tc.errText {
				require.ErrorContains(t, err, s)
			}
			require.Equal(t, tc.requests, o.count.Load(), "requests: %q", o.requests())
			retries := float64(tc.requests - 1)
			if tc.refused {
				retries = 0
			}
			require.Equal(t, retries, value(t, l.metrics.OriginRetries))
			require.NoFileExists(t, l.path())
			if tc.partial {
				require.FileExists(t, l.path()+".partial")
			} else {
				require.NoFileExists(t, l.path()+".partial")
			}
		})
	}
}

// An origin that refuses connections is a failure like any other: given up after WithRetry's
// attempts, with the network error named.
func TestOriginDeadGivesUp(t *testing.T) {
	t.Parallel()
	_, sha := isoData(t, originSize)
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL + "/release.iso"
	dead.Close()
	l := newLone(t)
	_, progress, err := l.fetch(t, t.Context(), sha, url)
	require.ErrorContains(t, err, "failed 5 times in a row")
	require.ErrorContains(t, err, "connection refused")
	require.NotErrorIs(t, err, fetch.ErrOriginRefused)
	require.Equal(t, 4.0, value(t, l.metrics.OriginRetries))
	require.Len(t, progress, 4)
	require.Contains(t, progress[0].OriginError, "connection refused")
}

// A 404 that starts once some chunks came ends the fetch; the chunks are kept, and a later fetch
// takes only the others.
func TestOriginRefusalKeepsChunks(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, originSize)
	o := newBadOrigin(t, data, func(_ *badOrigin, n int, w http.ResponseWriter, _ *http.Request) bool {
		if n > 3 {
			w.WriteHeader(http.StatusNotFound)
			return true
		}
		return false
	})
	l := newLone(t, fetch.WithOriginParallel(1))
	_, _, err := l.fetch(t, t.Context(), sha, o.url)
	require.ErrorIs(t, err, fetch.ErrOriginRefused)
	require.ErrorContains(t, err, "404")
	require.ErrorContains(t, err, "kept for the next attempt")
	require.Equal(t, 2, heldChunks(t, l.path()+".partial.json"))
	first := o.sent.Load()

	healthy := newBadOrigin(t, data, nil)
	_, _, err = l.fetch(t, t.Context(), sha, healthy.url)
	require.NoError(t, err)
	l.requireISO(t, data)
	require.EqualValues(t, originSize, first+healthy.sent.Load(), "bytes sent by both origins")
	require.EqualValues(t, 1+originChunks-2, healthy.count.Load(), "requests: %q", healthy.requests())
}

// A fetch cancelled while it waits to ask a failing origin again returns at once. It is cancelled
// when it reports the origin's failure, which it does before it starts to wait.
func TestOriginCancelledDuringBackoff(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, originSize)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL + "/release.iso"
	dead.Close() // connections are refused
	tests := []struct {
		name string
		url  func(t *testing.T) string
	}{
		{name: "probe", url: func(*testing.T) string { return deadURL }},
		{name: "chunks", url: func(t *testing.T) string {
			return newBadOrigin(t, data, func(_ *badOrigin, _ int, w http.ResponseWriter, r *http.Request) bool {
				if isProbe(r) {
					return false
				}
				w.WriteHeader(http.StatusServiceUnavailable)
				return true
			}).url
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newLone(t, fetch.WithRetry(100, time.Hour, time.Hour))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var failedAt time.Time
			l.watch = func(p fetch.Progress) {
				if p.OriginError != "" && failedAt.IsZero() {
					failedAt = time.Now()
					cancel()
				}
			}
			_, _, err := l.fetch(t, ctx, sha, tc.url(t))
			require.ErrorIs(t, err, context.Canceled)
			require.False(t, failedAt.IsZero(), "the origin's failure was reported")
			require.Less(t, time.Since(failedAt), 5*time.Second, "an hour's wait was cut short")
			require.Equal(t, 1.0, value(t, l.metrics.OriginRetries))
		})
	}
}

// An ISO that does not match its sha512 is removed, partial download and all, and the error says
// what was found and what was wanted.
func TestOriginWrongChecksum(t *testing.T) {
	t.Parallel()
	data, got := isoData(t, originSize)
	_, want := isoData(t, 10)
	o := newBadOrigin(t, data, nil)
	l := newLone(t)
	_, _, err := l.fetch(t, t.Context(), want, o.url)
	require.ErrorIs(t, err, peer.ErrVerification)
	require.ErrorContains(t, err, "sha512 is "+got+", want "+want)
	for _, p := range []string{l.path(), l.path() + ".json", l.path() + ".partial", l.path() + ".partial.json"} {
		require.NoFileExists(t, p)
	}
	require.Equal(t, 1.0, value(t, l.metrics.Verifications.WithLabelValues("mismatch")))
	require.Zero(t, value(t, l.metrics.Verifications.WithLabelValues("ok")))
}

// A verified ISO is reused after a restart without hashing it while its record says it is
// unchanged, hashed again once touched, and, changed in place, only its changed chunk is fetched
// again.
func TestOriginCachedISO(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, originSize)
	o := newBadOrigin(t, data, nil)
	l := newLone(t)
	_, _, err := l.fetch(t, t.Context(), sha, o.url)
	require.NoError(t, err)
	requests := o.count.Load()
	verifications := func(result string) float64 {
		return value(t, l.metrics.Verifications.WithLabelValues(result))
	}
	require.Equal(t, 1.0, verifications("ok"))

	// Unchanged: reused from its record, the origin not asked.
	iso, _, err := l.fetch(t, t.Context(), sha, o.url)
	require.NoError(t, err)
	require.True(t, iso.Complete())
	require.Equal(t, 1.0, verifications("reused"))
	require.Equal(t, requests, o.count.Load())

	// Touched but intact: hashed again, and its record renewed.
	later := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(l.path(), later, later))
	_, _, err = l.fetch(t, t.Context(), sha, o.url)
	require.NoError(t, err)
	require.Equal(t, 2.0, verifications("ok"))
	_, _, err = l.fetch(t, t.Context(), sha, o.url)
	require.NoError(t, err)
	require.Equal(t, 2.0, verifications("reused"))
	require.Equal(t, requests, o.count.Load())

	// Four bytes changed in place, the modification time put back: the changed chunk alone is
	// fetched again.
	corrupt(t, l.path(), 2*testChunk+100)
	sent := o.sent.Load()
	_, _, err = l.fetch(t, t.Context(), sha, o.url)
	require.NoError(t, err)
	require.Equal(t, 1.0, verifications("mismatch"))
	require.EqualValues(t, testChunk, o.sent.Load()-sent)
	l.requireISO(t, data)

	// Changed, and no record tells which chunks were verified: fetched again whole.
	require.NoError(t, os.Remove(l.path()+".json"))
	corrupt(t, l.path(), 100)
	sent = o.sent.Load()
	_, _, err = l.fetch(t, t.Context(), sha, o.url)
	require.NoError(t, err)
	require.Equal(t, 2.0, verifications("mismatch"))
	require.EqualValues(t, originSize, o.sent.Load()-sent)
	l.requireISO(t, data)
}

// corrupt flips four bytes of the file at p, at off, in place, and puts its modification time back.
func corrupt(t *testing.T, p string, off int64) {
	t.Helper()
	st, err := os.Stat(p)
	require.NoError(t, err)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	b := make([]byte, 4)
	_, err = f.ReadAt(b, off)
	require.NoError(t, err)
	for i := range b {
		b[i] ^= 0xff
	}
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.Chtimes(p, st.ModTime(), st.ModTime()))
}

// A reused copy that rotted without its stamp changing is caught chunk by chunk as it is served:
// the damaged chunk is withdrawn and the record no longer says the file was verified, so that the
// next start hashes it and fetches the chunk again.
func TestOriginRottenReusedCopy(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, originSize)
	o := newBadOrigin(t, data, nil)
	l := newLone(t)
	_, _, err := l.fetch(t, t.Context(), sha, o.url)
	require.NoError(t, err)

	corrupt(t, l.path(), testChunk+10)
	// Bit rot leaves the stamp as it was: the record is made to say so.
	st, err := os.Stat(l.path())
	require.NoError(t, err)
	rec := readRecord(t, l.path()+".json")
	rec["verified"], err = json.Marshal(chunks.StampOf(st))
	require.NoError(t, err)
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(l.path()+".json", b, 0o644))

	iso, _, err := l.fetch(t, t.Context(), sha, o.url)
	require.NoError(t, err)
	require.Equal(t, 1.0, value(t, l.metrics.Verifications.WithLabelValues("reused")))
	require.NoError(t, iso.Check(0, testChunk))
	require.ErrorIs(t, iso.Check(testChunk, testChunk), chunks.ErrDamaged)
	require.False(t, iso.Has(1))
	require.False(t, iso.Complete())
	require.NotContains(t, readRecord(t, l.path()+".json"), "verified")

	sent := o.sent.Load()
	_, _, err = l.fetch(t, t.Context(), sha, o.url)
	require.NoError(t, err)
	require.Equal(t, 1.0, value(t, l.metrics.Verifications.WithLabelValues("mismatch")))
	require.EqualValues(t, testChunk, o.sent.Load()-sent)
	l.requireISO(t, data)
}

// A response that stops sending without closing is abandoned after the idle timeout and resumed
// where it stopped; one that stalls before its first byte is a failure, retried.
func TestOriginStalled(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, originSize)
	tests := []struct {
		name    string
		request int // the request that stalls
		before  int // bytes sent before the stall; -1: not even the headers
		retries float64
	}{
		{name: "mid-chunk", request: 2, before: testChunk / 2},
		{name: "before the first byte", request: 2, before: 0, retries: 1},
		{name: "before the headers", request: 2, before: -1, retries: 1},
		{name: "probe", request: 1, before: -1, retries: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stalled := make(chan struct{})
			o := newBadOrigin(t, data, func(o *badOrigin, n int, w http.ResponseWriter, r *http.Request) bool {
				if n != tc.request {
					return false
				}
				if tc.before >= 0 {
					o.serveRange(w, r, tc.before)
				}
				select {
				case <-stalled:
				case <-r.Context().Done():
				}
				return true
			})
			t.Cleanup(func() { close(stalled) }) // runs before the server's Close: the handler must end
			l := newLone(t, fetch.WithIdleTimeout(300*time.Millisecond), fetch.WithOriginParallel(1))
			start := time.Now()
			_, _, err := l.fetch(t, t.Context(), sha, o.url)
			require.NoError(t, err)
			require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
			l.requireISO(t, data)
			require.EqualValues(t, originSize, o.sent.Load())
			require.EqualValues(t, 1+originChunks+1, o.count.Load(), "requests: %q", o.requests())
			require.Equal(t, tc.retries, value(t, l.metrics.OriginRetries))
		})
	}
}

// An origin that cuts every response after 32 KiB is followed to the end, however many cuts that
// takes, as each request brings bytes.
func TestOriginFlakyMakingProgress(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, originSize)
	const cutAfter = 32 << 10
	o := newBadOrigin(t, data, func(o *badOrigin, _ int, w http.ResponseWriter, r *http.Request) bool {
		if isProbe(r) {
			return false
		}
		if o.serveRange(w, r, cutAfter) {
			panic(http.ErrAbortHandler)
		}
		return true
	})
	l := newLone(t)
	_, _, err := l.fetch(t, t.Context(), sha, o.url)
	require.NoError(t, err)
	l.requireISO(t, data)
	require.EqualValues(t, originSize, o.sent.Load())
	// 8 requests for each whole chunk, one for the short one, and the probe.
	require.EqualValues(t, 1+4*testChunk/cutAfter+1, o.count.Load())
	require.Zero(t, value(t, l.metrics.OriginRetries))
}

// The origin's password and signed query appear neither in the logs nor in the error of a failed
// download.
func TestOriginSecretsNotPrinted(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, originSize)
	withSecrets := func(url string) string {
		return strings.Replace(url, "http://", "http://user:s3cret@", 1) + "?X-Amz-Signature=deadbeef"
	}
	tests := []struct {
		name string
		url  func(t *testing.T) string
	}{
		{name: "probe fails", url: func(t *testing.T) string {
			return withSecrets(newBadOrigin(t, data, status(http.StatusServiceUnavailable)).url)
		}},
		{name: "chunks fail", url: func(t *testing.T) string {
			return withSecrets(newBadOrigin(t, data, func(_ *badOrigin, _ int, w http.ResponseWriter, r *http.Request) bool {
				if isProbe(r) {
					return false
				}
				w.WriteHeader(http.StatusServiceUnavailable)
				return true
			}).url)
		}},
		{name: "no ranges after the probe, wrong bytes", url: func(t *testing.T) string {
			return withSecrets(newBadOrigin(t, data, func(o *badOrigin, _ int, w http.ResponseWriter, r *http.Request) bool {
				if isProbe(r) {
					return false
				}
				w.Header().Set("Content-Length", strconv.Itoa(len(o.data)-1))
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write(o.data[1:])
				return true
			}).url)
		}},
		{name: "dead", url: func(*testing.T) string { return "http://user:s3cret@127.0.0.1:1/x.iso?X-Amz-Signature=deadbeef" }},
		{name: "unparsable", url: func(*testing.T) string { return "http://user:s3cret@[::1/x?X-Amz-Signature=deadbeef" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs syncBuffer
			l := newLone(t)
			l.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			_, _, err := l.fetch(t, t.Context(), sha, tc.url(t))
			require.Error(t, err)
			require.NotEmpty(t, logs.String()+err.Error())
			for _, out := range []string{err.Error(), logs.String()} {
				require.NotContains(t, out, "s3cret")
				require.NotContains(t, out, "deadbeef")
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// An origin that is not an absolute http(s) URL is refused at once, before any request.
func TestCheckURL(t *testing.T) {
	t.Parallel()
	_, sha := isoData(t, 10)
	tests := []struct {
		url string
		ok  bool
	}{
		{url: "http://origin/x.iso", ok: true},
		{url: "https://user:pw@origin:8443/x.iso?sig=1", ok: true},
		{url: "ftp://origin/x.iso"},
		{url: "file:///x.iso"},
		{url: "origin/x.iso"},
		{url: "http:///x.iso"},
		{url: "http://[::1/x.iso"},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			err := fetch.CheckURL(tc.url)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, fetch.ErrOriginRefused)
			l := newLone(t)
			_, _, err = l.fetch(t, t.Context(), sha, tc.url)
			require.ErrorIs(t, err, fetch.ErrOriginRefused)
			require.Zero(t, value(t, l.metrics.OriginRetries))
			require.NoFileExists(t, l.path()+".partial")
		})
	}
}

// While a download runs, its progress is logged with the ISO's size.
func TestOriginProgressLogged(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, originSize)
	proceed := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(proceed) }) }
	o := newBadOrigin(t, data, func(_ *badOrigin, n int, _ http.ResponseWriter, r *http.Request) bool {
		if n == 3 { // the second chunk waits until progress was logged
			select {
			case <-proceed:
			case <-r.Context().Done():
				return true
			}
		}
		return false
	})
	t.Cleanup(release) // runs before the server's Close: the handler must end
	logs := &recordHandler{records: make(chan slog.Record, 1000)}
	l := newLone(t, fetch.WithProgressInterval(time.Millisecond), fetch.WithOriginParallel(1))
	l.log = slog.New(logs)
	done := make(chan error, 1)
	go func() {
		_, _, err := l.fetch(t, t.Context(), sha, o.url)
		done <- err
	}()
	for logged := false; !logged; {
		var r slog.Record
		select {
		case r = <-logs.records:
		case err := <-done:
			t.Fatalf("the download ended before its progress was logged: %v", err)
		}
		if r.Message != "download progress" {
			continue
		}
		attrs := map[string]int64{}
		r.Attrs(func(a slog.Attr) bool {
			if a.Value.Kind() == slog.KindInt64 {
				attrs[a.Key] = a.Value.Int64()
			}
			return true
		})
		require.EqualValues(t, originSize, attrs["size"])
		require.EqualValues(t, testChunk, attrs["held"])
		require.EqualValues(t, testChunk, attrs["from_origin"])
		require.Contains(t, attrs, "from_peers")
		require.Contains(t, attrs, "bytes_per_second")
		logged = true
	}
	release()
	require.NoError(t, <-done)
}

// recordHandler is a slog.Handler that hands every record to a channel, dropping them when full.
type recordHandler struct{ records chan slog.Record }

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordHandler) WithGroup(string) slog.Handler            { return h }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.records <- r.Clone():
	default:
	}
	return nil
}
