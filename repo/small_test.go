package repo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestContentRoute checks that the requests the Server routes without its mux are answered as
// the mux answers them: the same route label, status, headers and body; and that every other
// request is left to the mux.
func TestContentRoute(t *testing.T) {
	t.Parallel()
	files := fixtureFiles()
	fsys := fstest.MapFS{}
	for name, data := range files {
		fsys[name] = &fstest.MapFile{Data: data, ModTime: time.Unix(1700000000, 0)}
	}
	fsys["bundle/metadata.yaml"] = &fstest.MapFile{Data: []byte("not: [metadata")}
	m, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	h, err := New(fsys, WithMetrics(m), WithIdentity("x"))
	require.NoError(t, err)
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "metrics\n") })
	s := NewServer(m, metrics, nil)
	s.SetHandler(h)

	tests := []struct {
		name   string
		method string
		target string
		route  string // "" when the mux routes it
	}{
		{"file", "GET", "/harvester-release.yaml", "GET /"},
		{"file by HEAD", "HEAD", "/harvester-release.yaml", "GET /"},
		{"file with a query", "GET", "/harvester-release.yaml?x=1", "GET /"},
		{"root", "GET", "/", "GET /"},
		{"directory", "GET", "/bundle/", "GET /"},
		{"directory without its slash", "GET", "/bundle", "GET /"},
		{"missing file", "GET", "/no/such/file", "GET /"},
		{"file under the prefix", "GET", "/harvester-iso/harvester-release.yaml", "GET /harvester-iso/"},
		{"prefix with its slash", "GET", "/harvester-iso/", "GET /harvester-iso/"},
		{"prefix without its slash is redirected", "GET", "/harvester-iso", ""},
		{"prefix without its slash by HEAD", "HEAD", "/harvester-iso", ""},
		{"release", "GET", "/v1/release", "GET /v1/release"},
		{"bundle", "GET", "/v1/bundle", "GET /v1/bundle"},
		{"images", "HEAD", "/v1/images", "GET /v1/images"},
		{"release with a slash is a file path", "GET", "/v1/release/", "GET /"},
		{"livez", "GET", "/livez", ""},
		{"livez with a slash is a file path", "GET", "/livez/", "GET /"},
		{"readyz", "GET", "/readyz", ""},
		{"metrics", "GET", "/metrics", ""},
		{"metrics by HEAD", "HEAD", "/metrics", ""},
		{"dot segment", "GET", "/bundle/../harvester-release.yaml", ""},
		{"single dot", "GET", "/./harvester-release.yaml", ""},
		{"trailing dot", "GET", "/bundle/.", ""},
		{"trailing dot-dot", "GET", "/bundle/..", ""},
		{"escaped dot-dot", "GET", "/%2e%2e/harvester-release.yaml", ""},
		{"escaped slash", "GET", "/bundle%2Fharvester/images-lists/big.txt", ""},
		{"escaped space", "GET", "/dir%20with%20space/a&b.txt", "GET /"},
		{"needless escape", "GET", "/harvester%2Drelease.yaml", ""},
		{"double slashes are merged first", "GET", "/harvester-iso//bundle//harvester/images-lists/big.txt", "GET /harvester-iso/"},
		{"POST", "POST", "/harvester-release.yaml", ""},
		{"PUT to the metadata", "PUT", "/v1/release", ""},
		{"OPTIONS", "OPTIONS", "/harvester-release.yaml", ""},
		{"OPTIONS of the server", "OPTIONS", "*", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := mergeSlashes(httptest.NewRequest(tt.method, tt.target, nil))
			require.Equal(t, tt.route, contentRoute(r))

			byMux := r.Clone(t.Context())
			want := httptest.NewRecorder()
			s.mux.ServeHTTP(want, byMux)
			if tt.route != "" {
				require.Equal(t, byMux.Pattern, tt.route)
			}
			byServer := r.Clone(t.Context())
			got := httptest.NewRecorder()
			s.ServeHTTP(got, byServer)
			require.Equal(t, byMux.Pattern, byServer.Pattern)
			require.Equal(t, want.Code, got.Code)
			// The Date of responses a second apart differs.
			want.Header().Del("Date")
			got.Header().Del("Date")
			require.Equal(t, want.Header(), got.Header())
			require.Equal(t, want.Body.String(), got.Body.String())
		})
	}
}

// TestIsClean checks isClean against the mux's own rule: a path is taken as it is when cleaning
// it (and putting its trailing slash back) leaves it alone.
func TestIsClean(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path  string
		clean bool
	}{
		{"/", true},
		{"/a", true},
		{"/a/", true},
		{"/a/b.yaml", true},
		{"/a.b/..c/.d", true},
		{"//", false},
		{"/a//b", false},
		{"/a/./b", false},
		{"/a/../b", false},
		{"/..", false},
		{"/.", false},
		{"/a/.", false},
		{"/a/..", false},
		{"/a/../", false},
		{"/a/./", false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.clean, isClean(tt.path))
		})
	}
}

// TestSmallFileBudget checks that the small files kept in memory never exceed the budget, that
// the first ones asked for are those kept, and that every file is served whole either way.
func TestSmallFileBudget(t *testing.T) {
	t.Parallel()
	files := map[string][]byte{
		"a.txt":   randomBytes(11, 100),
		"b.txt":   randomBytes(12, 200),
		"c.txt":   randomBytes(13, 300),
		"big.bin": randomBytes(14, 2000),
	}
	order := []string{"a.txt", "b.txt", "c.txt", "big.bin", "c.txt", "b.txt", "a.txt"}
	tests := []struct {
		name   string
		budget int64
		kept   []string
	}{
		{"no budget", 0, nil},
		{"room for the first", 250, []string{"a.txt"}},
		{"room for the first two exactly", 300, []string{"a.txt", "b.txt"}},
		{"room for all but the large file", 1 << 20, []string{"a.txt", "b.txt", "c.txt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fsys := fstest.MapFS{}
			for name, data := range files {
				fsys[name] = &fstest.MapFile{Data: data}
			}
			ts, m, h := newTestServer(t, fsys, WithMemoryBudget(tt.budget), WithSmallFileLimit(1000))
			for _, name := range order {
				resp, body := get(t, ts.URL+"/"+name, nil)
				require.Equal(t, 200, resp.StatusCode)
				require.Equal(t, files[name], body)
			}
			var kept []string
			var bytes int64
			for name, e := range h.index {
				if e.small.Load() != nil {
					kept = append(kept, name)
					bytes += e.size
				}
			}
			sort.Strings(kept)
			require.Equal(t, tt.kept, kept)
			require.Equal(t, bytes, h.cached)
			require.LessOrEqual(t, h.cached, tt.budget)
			require.Equal(t, 6.0, value(t, m.fileResponsesBy[modeMemory]))
		})
	}
}

// TestSmallFileFromMemory checks that a small file served from memory is answered byte for byte
// as one read for the request, headers included (but for Date), whatever the request asks.
func TestSmallFileFromMemory(t *testing.T) {
	t.Parallel()
	data := []byte("harvester: v1.5.2\nos: Harvester v1.5.2\nkubernetes: v1.32.7+rke2r1\n")
	mod := time.Unix(1700000000, 0)
	fsys := fstest.MapFS{"harvester-release.yaml": {Data: data, ModTime: mod}}
	uncached, _, _ := newTestServer(t, fsys, WithMemoryBudget(0))
	cached, _, h := newTestServer(t, fsys)
	tag := etag("test-image", "harvester-release.yaml", int64(len(data)))
	lastMod := mod.UTC().Format(http.TimeFormat)

	tests := []struct {
		name    string
		request string
	}{
		{"GET", "GET /harvester-release.yaml HTTP/1.1\r\n"},
		{"GET under the prefix", "GET /harvester-iso/harvester-release.yaml HTTP/1.1\r\n"},
		{"HEAD", "HEAD /harvester-release.yaml HTTP/1.1\r\n"},
		{"HTTP/1.0", "GET /harvester-release.yaml HTTP/1.0\r\n"},
		{"If-None-Match that matches", "GET /harvester-release.yaml HTTP/1.1\r\nIf-None-Match: " + tag + "\r\n"},
		{"If-None-Match that does not", "GET /harvester-release.yaml HTTP/1.1\r\nIf-None-Match: \"other\"\r\n"},
		{"If-Modified-Since", "GET /harvester-release.yaml HTTP/1.1\r\nIf-Modified-Since: " + lastMod + "\r\n"},
		{"If-Modified-Since earlier", "GET /harvester-release.yaml HTTP/1.1\r\nIf-Modified-Since: Mon, 02 Jan 2006 15:04:05 GMT\r\n"},
		{"If-Match that fails", "GET /harvester-release.yaml HTTP/1.1\r\nIf-Match: \"other\"\r\n"},
		{"range", "GET /harvester-release.yaml HTTP/1.1\r\nRange: bytes=5-20\r\n"},
		{"suffix range", "GET /harvester-release.yaml HTTP/1.1\r\nRange: bytes=-7\r\n"},
		{"range past the end", "GET /harvester-release.yaml HTTP/1.1\r\nRange: bytes=1000-\r\n"},
		{"overlapping ranges are the whole file", "GET /harvester-release.yaml HTTP/1.1\r\nRange: bytes=0-10,5-20\r\n"},
		{"If-Range that matches", "GET /harvester-release.yaml HTTP/1.1\r\nRange: bytes=0-3\r\nIf-Range: " + tag + "\r\n"},
		{"If-Range that does not", "GET /harvester-release.yaml HTTP/1.1\r\nRange: bytes=0-3\r\nIf-Range: \"other\"\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := tt.request + "Host: x\r\nUser-Agent: Go-http-client/1.1\r\nConnection: close\r\n\r\n"
			want := rawExchange(t, uncached.Listener.Addr().String(), req)
			_ = rawExchange(t, cached.Listener.Addr().String(), req)
			require.NotNil(t, h.index["harvester-release.yaml"].small.Load(), "kept in memory")
			got := rawExchange(t, cached.Listener.Addr().String(), req)
			require.Equal(t, want, got)
		})
	}
}

// rawExchange sends req on a new connection to addr and returns the response's bytes, without
// its Date header.
func rawExchange(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, req)
	require.NoError(t, err)
	resp, err := io.ReadAll(c)
	require.NoError(t, err)
	var out []string
	for _, line := range strings.SplitAfter(string(resp), "\r\n") {
		if !strings.HasPrefix(line, "Date: ") {
			out = append(out, line)
		}
	}
	require.Contains(t, out, "\r\n", "a whole response")
	return strings.Join(out, "")
}

// unreadableFS is a MapFS whose files cannot be read while broken is set, as an image's files
// whose chunks fail their check.
type unreadableFS struct {
	fstest.MapFS
	broken atomic.Bool
}

var errUnreadable = errors.New("chunk damaged")

func (u *unreadableFS) Open(name string) (fs.File, error) {
	if u.broken.Load() && name != "." {
		return nil, &fs.PathError{Op: "open", Path: name, Err: errUnreadable}
	}
	return u.MapFS.Open(name)
}

func (u *unreadableFS) ReadFile(name string) ([]byte, error) {
	if u.broken.Load() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: errUnreadable}
	}
	return u.MapFS.ReadFile(name)
}

// TestSmallFileKeptOnlyOnceRead checks that only bytes the file system returned are kept in
// memory: a file that cannot be read (its chunk failed its check) is refused and not kept, and is
// kept once it could be read; the copy in memory is served from then on.
func TestSmallFileKeptOnlyOnceRead(t *testing.T) {
	t.Parallel()
	data := []byte("harvester: v1.5.2\n")
	fsys := &unreadableFS{MapFS: fstest.MapFS{"harvester-release.yaml": {Data: data}}}
	ts, _, h := newTestServer(t, fsys)
	e := h.index["harvester-release.yaml"]

	fsys.broken.Store(true)
	resp, body := get(t, ts.URL+"/harvester-release.yaml", nil)
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	require.NotContains(t, string(body), string(data))
	require.Nil(t, e.small.Load())
	require.Zero(t, h.cached)

	fsys.broken.Store(false)
	resp, body = get(t, ts.URL+"/harvester-release.yaml", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, data, body)
	require.NotNil(t, e.small.Load())
	require.EqualValues(t, len(data), h.cached)

	// What was read is what is served, whatever happens to the file afterwards.
	fsys.broken.Store(true)
	resp, body = get(t, ts.URL+"/harvester-release.yaml", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, bytes.Equal(data, body))
}

// TestSmallFileConcurrent asks for one small file from many goroutines at once, with and without
// conditions and ranges, while its first reading races to be kept: every response shares the
// header values of the copy in memory, which the race detector watches here.
func TestSmallFileConcurrent(t *testing.T) {
	t.Parallel()
	data := randomBytes(21, 3000)
	ts, _, _ := newTestServer(t, fstest.MapFS{"f.txt": {Data: data, ModTime: time.Unix(1700000000, 0)}})
	tag := etag("test-image", "f.txt", int64(len(data)))
	requests := []struct {
		hdr  map[string]string
		code int
		body []byte
	}{
		{nil, 200, data},
		{map[string]string{"If-None-Match": tag}, 304, []byte{}},
		{map[string]string{"Range": "bytes=10-19"}, 206, data[10:20]},
		{map[string]string{"If-None-Match": `"other"`}, 200, data},
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			for j := range 20 {
				rq := requests[(i+j)%len(requests)]
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.URL+"/f.txt", nil)
				if err != nil {
					errs <- err
					return
				}
				for k, v := range rq.hdr {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					errs <- err
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					errs <- err
					return
				}
				if resp.StatusCode != rq.code || !bytes.Equal(body, rq.body) || resp.Header.Get("Etag") != tag {
					errs <- fmt.Errorf("%v: status %d, %d bytes, ETag %s", rq.hdr, resp.StatusCode, len(body), resp.Header.Get("Etag"))
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

// TestDateHeader checks the Date of small files' responses, which the Handler writes itself: the
// time of the response, to the second.
func TestDateHeader(t *testing.T) {
	t.Parallel()
	data := []byte("harvester: v1.5.2\n")
	ts, _, _ := newTestServer(t, fstest.MapFS{"harvester-release.yaml": {Data: data}})
	tag := etag("test-image", "harvester-release.yaml", int64(len(data)))
	tests := []struct {
		name string
		hdr  map[string]string
		code int
	}{
		{"whole file", nil, 200},
		{"again, from memory", nil, 200},
		{"not modified", map[string]string{"If-None-Match": tag}, 304},
		{"range", map[string]string{"Range": "bytes=0-3"}, 206},
	}
	for _, tt := range tests {
		// In order: the second request is answered from memory.
		t.Run(tt.name, func(t *testing.T) {
			before := time.Now().Truncate(time.Second)
			resp, _ := get(t, ts.URL+"/harvester-release.yaml", tt.hdr)
			after := time.Now()
			require.Equal(t, tt.code, resp.StatusCode)
			require.Len(t, resp.Header.Values("Date"), 1)
			date, err := http.ParseTime(resp.Header.Get("Date"))
			require.NoError(t, err)
			require.False(t, date.Before(before) || date.After(after), "Date %s, sent between %s and %s", date, before, after)
		})
	}
}
