package repo

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func fixtureFiles() map[string][]byte {
	return map[string][]byte{
		"harvester-release.yaml":                []byte("harvester: v1.5.2\nos: Harvester v1.5.2\n"),
		"bundle/harvester/images/big.tar.zst":   randomBytes(1, 3<<20+17),
		"bundle/harvester/images-lists/big.txt": []byte("rancher/a:v1\n"),
		"rootfs.squashfs":                       randomBytes(2, 200<<10+5),
		"dir with space/a&b.txt":                []byte("x"),
		"notes.json":                            []byte(`{"a":1}`),
		"boot/kernel":                           randomBytes(3, 100),
	}
}

func TestServeFiles(t *testing.T) {
	t.Parallel()
	files := fixtureFiles()
	fsys, backing := newSpanFS(t, files)
	ts, _, _ := newTestServer(t, fsys, WithBackingFile(backing))

	tests := []struct {
		name     string
		method   string
		path     string
		hdr      map[string]string
		code     int
		body     []byte
		ctype    string
		contains string
	}{
		{name: "small yaml", path: "/harvester-release.yaml", code: 200, body: files["harvester-release.yaml"], ctype: "application/yaml"},
		{name: "large archive", path: "/bundle/harvester/images/big.tar.zst", code: 200, body: files["bundle/harvester/images/big.tar.zst"], ctype: "application/zstd"},
		{name: "squashfs", path: "/rootfs.squashfs", code: 200, body: files["rootfs.squashfs"], ctype: "application/vnd.squashfs"},
		{name: "json file", path: "/notes.json", code: 200, body: files["notes.json"], ctype: "application/json"},
		{name: "unknown type is not sniffed", path: "/boot/kernel", code: 200, body: files["boot/kernel"], ctype: "application/octet-stream"},
		{name: "escaped name", path: "/dir%20with%20space/a&b.txt", code: 200, body: []byte("x"), ctype: "text/plain; charset=utf-8"},
		{name: "prefix", path: "/harvester-iso/harvester-release.yaml", code: 200, body: files["harvester-release.yaml"]},
		{name: "prefix large", path: "/harvester-iso/rootfs.squashfs", code: 200, body: files["rootfs.squashfs"]},
		{name: "head", method: http.MethodHead, path: "/rootfs.squashfs", code: 200, body: []byte{}},
		{name: "head small", method: http.MethodHead, path: "/harvester-release.yaml", code: 200, body: []byte{}, ctype: "application/yaml"},
		{name: "missing", path: "/nope.yaml", code: 404, contains: `"error":"/nope.yaml: no such file in the release"`},
		{name: "post", method: http.MethodPost, path: "/harvester-release.yaml", code: 405},
		{name: "delete", method: http.MethodDelete, path: "/", code: 405},
		{name: "dotdot is cleaned inside the image", path: "/bundle/../../../harvester-release.yaml", code: 307},
		{name: "encoded dotdot", path: "/bundle/%2e%2e/%2e%2e/etc/passwd", code: 404, contains: `"/etc/passwd: no such file in the release"`},
		{name: "encoded dotdot inside", path: "/bundle%2f%2e%2e%2f%2e%2e%2fharvester-release.yaml", code: 200, body: files["harvester-release.yaml"]},
		{name: "backslash", path: "/bundle\\..\\harvester-release.yaml", code: 400},
		{name: "encoded backslash", path: "/bundle%5c..%5charvester-release.yaml", code: 400},
		{name: "nul", path: "/harvester-release.yaml%00.txt", code: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			resp, body := do(t, method, ts.URL+tt.path, tt.hdr)
			require.Equal(t, tt.code, resp.StatusCode, string(body))
			if tt.body != nil {
				require.Equal(t, sum(tt.body), sum(body))
			}
			if tt.ctype != "" {
				require.Equal(t, tt.ctype, resp.Header.Get("Content-Type"))
			}
			if tt.contains != "" {
				require.Contains(t, string(body), tt.contains)
			}
			switch tt.code {
			case 200:
				require.Equal(t, "bytes", resp.Header.Get("Accept-Ranges"))
				if tt.method == http.MethodHead {
					require.Equal(t, fmt.Sprint(len(files[strings.TrimPrefix(tt.path, "/")])), resp.Header.Get("Content-Length"))
				}
				require.Regexp(t, `^"[0-9a-f]{32}"$`, resp.Header.Get("ETag"))
				require.Equal(t, "Tue, 14 Nov 2023 22:13:20 GMT", resp.Header.Get("Last-Modified"))
			case 405:
				require.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))
			case 307:
				// The mux answers with the cleaned path, which stays inside the image.
				require.False(t, strings.Contains(resp.Header.Get("Location"), ".."), resp.Header.Get("Location"))
			case 400, 404:
				require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			}
		})
	}
}

// TestHandlerResolvesTraversal sends unclean paths to the Handler directly (no mux cleaning them
// first): they resolve inside the image.
func TestHandlerResolvesTraversal(t *testing.T) {
	t.Parallel()
	h, err := New(fstest.MapFS{"a.txt": {Data: []byte("A")}, "d/b.txt": {Data: []byte("B")}})
	require.NoError(t, err)
	for _, p := range []string{"/../../a.txt", "/d/../a.txt", "/d/../../../a.txt", "/harvester-iso/../a.txt", "//a.txt"} {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://x/", nil)
			require.NoError(t, err)
			req.URL.Path = p
			rec := newRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, 200, rec.code)
			require.Equal(t, "A", rec.body.String())
		})
	}
}

type memRecorder struct {
	hdr  http.Header
	code int
	body bytes.Buffer
}

func newRecorder() *memRecorder                    { return &memRecorder{hdr: http.Header{}, code: 200} }
func (m *memRecorder) Header() http.Header         { return m.hdr }
func (m *memRecorder) WriteHeader(c int)           { m.code = c }
func (m *memRecorder) Write(p []byte) (int, error) { return m.body.Write(p) }

func TestConditionalAndRanges(t *testing.T) {
	t.Parallel()
	files := fixtureFiles()
	fsys, backing := newSpanFS(t, files)
	ts, _, _ := newTestServer(t, fsys, WithBackingFile(backing))
	big := files["bundle/harvester/images/big.tar.zst"]
	small := files["harvester-release.yaml"]
	url := ts.URL + "/bundle/harvester/images/big.tar.zst"
	resp, _ := do(t, http.MethodHead, url, nil)
	etag := resp.Header.Get("ETag")
	lastMod := resp.Header.Get("Last-Modified")
	require.NotEmpty(t, etag)
	smallResp, _ := do(t, http.MethodHead, ts.URL+"/harvester-release.yaml", nil)
	require.NotEqual(t, etag, smallResp.Header.Get("ETag"))

	for _, path := range []string{"/bundle/harvester/images/big.tar.zst", "/harvester-release.yaml"} {
		data := big
		if path == "/harvester-release.yaml" {
			data = small
		}
		u := ts.URL + path
		r, _ := do(t, http.MethodHead, u, nil)
		tag := r.Header.Get("ETag")
		tests := []struct {
			name  string
			hdr   map[string]string
			code  int
			body  []byte
			crang string
		}{
			{"if-none-match", map[string]string{"If-None-Match": tag}, 304, []byte{}, ""},
			{"if-none-match other", map[string]string{"If-None-Match": `"other"`}, 200, data, ""},
			{"if-modified-since", map[string]string{"If-Modified-Since": lastMod}, 304, []byte{}, ""},
			{"if-modified-since older", map[string]string{"If-Modified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"}, 200, data, ""},
			{"range", map[string]string{"Range": "bytes=10-19"}, 206, data[10:20], fmt.Sprintf("bytes 10-19/%d", len(data))},
			{"suffix range", map[string]string{"Range": "bytes=-5"}, 206, data[len(data)-5:], fmt.Sprintf("bytes %d-%d/%d", len(data)-5, len(data)-1, len(data))},
			{"open range", map[string]string{"Range": "bytes=7-"}, 206, data[7:], fmt.Sprintf("bytes 7-%d/%d", len(data)-1, len(data))},
			{"if-range matching", map[string]string{"Range": "bytes=0-3", "If-Range": tag}, 206, data[:4], ""},
			{"if-range stale", map[string]string{"Range": "bytes=0-3", "If-Range": `"stale"`}, 200, data, ""},
			{"unsatisfiable", map[string]string{"Range": fmt.Sprintf("bytes=%d-", len(data)+10)}, 416, nil, fmt.Sprintf("bytes */%d", len(data))},
		}
		for _, tt := range tests {
			t.Run(path+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				resp, body := get(t, u, tt.hdr)
				require.Equal(t, tt.code, resp.StatusCode)
				if tt.body != nil {
					require.Equal(t, sum(tt.body), sum(body))
				}
				if tt.crang != "" {
					require.Equal(t, tt.crang, resp.Header.Get("Content-Range"))
				}
			})
		}
		t.Run(path+"/multiple ranges", func(t *testing.T) {
			t.Parallel()
			resp, body := get(t, u, map[string]string{"Range": "bytes=0-9,20-29,-3"})
			require.Equal(t, 206, resp.StatusCode)
			mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
			require.NoError(t, err)
			require.Equal(t, "multipart/byteranges", mt)
			mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
			want := [][]byte{data[0:10], data[20:30], data[len(data)-3:]}
			for i := range want {
				p, err := mr.NextPart()
				require.NoError(t, err)
				got, err := io.ReadAll(p)
				require.NoError(t, err)
				require.Equal(t, want[i], got, "part %d", i)
			}
			_, err = mr.NextPart()
			require.ErrorIs(t, err, io.EOF)
		})
	}
}

func TestListings(t *testing.T) {
	t.Parallel()
	fsys, backing := newSpanFS(t, fixtureFiles())
	ts, _, _ := newTestServer(t, fsys, WithBackingFile(backing))
	for _, prefix := range []string{"", "/harvester-iso"} {
		t.Run("json"+prefix, func(t *testing.T) {
			t.Parallel()
			resp, body := get(t, ts.URL+prefix+"/bundle/harvester", map[string]string{"Accept": "application/json"})
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var l Listing
			require.NoError(t, json.Unmarshal(body, &l))
			require.Equal(t, prefix+"/bundle/harvester/", l.Path)
			require.Len(t, l.Entries, 2)
			require.Equal(t, "images", l.Entries[0].Name)
			require.True(t, l.Entries[0].Dir)
			require.Equal(t, "images-lists", l.Entries[1].Name)

			_, body = get(t, ts.URL+prefix+"/bundle/harvester/images/", map[string]string{"Accept": "application/json"})
			l = Listing{}
			require.NoError(t, json.Unmarshal(body, &l))
			require.Equal(t, []ListingEntry{{Name: "big.tar.zst", Size: 3<<20 + 17, ModTime: time.Unix(1700000000, 0).UTC()}}, l.Entries)
		})
		t.Run("html"+prefix, func(t *testing.T) {
			t.Parallel()
			resp, body := get(t, ts.URL+prefix+"/", map[string]string{"Accept": "text/html"})
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
			require.Contains(t, string(body), `<a href="`+prefix+`/dir%20with%20space/">dir with space/</a>`)
			require.Contains(t, string(body), `<a href="`+prefix+`/harvester-release.yaml">harvester-release.yaml</a>`)
		})
	}
}

// TestZeroCopy downloads more than 100 MiB and fails if the content went through user space:
// net/http must hand the extent to sendfile. A Go upgrade or a wrapper that hides io.ReaderFrom
// would turn this into copying.
func TestZeroCopy(t *testing.T) {
	t.Parallel()
	const size = 100<<20 + 12345
	data := randomBytes(7, size)
	fsys, backing := newSpanFS(t, map[string][]byte{"rootfs.squashfs": data, "small.txt": []byte("s")})
	ts, m, _ := newTestServer(t, fsys, WithBackingFile(backing))

	resp, err := http.Get(ts.URL + "/rootfs.squashfs")
	require.NoError(t, err)
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.EqualValues(t, size, n)
	require.Equal(t, sha256.Sum256(data), [32]byte(h.Sum(nil)))

	direct := value(t, m.fileBytes.WithLabelValues(modeLabels[modeZeroCopy]))
	copied := value(t, m.fileBytes.WithLabelValues(modeLabels[modeCopied]))
	require.GreaterOrEqual(t, direct, float64(size-512), "bytes sent with sendfile")
	require.LessOrEqual(t, copied, 512.0, "bytes copied through user space")
	require.Equal(t, 1.0, value(t, m.fileResponses.WithLabelValues(modeLabels[modeZeroCopy])))
	require.Equal(t, float64(size), value(t, m.responseBytes.WithLabelValues("GET /")))
}

// TestParallelRanges runs many concurrent range downloads of one large file and checks each by
// sha256.
func TestParallelRanges(t *testing.T) {
	t.Parallel()
	const size = 16 << 20
	data := randomBytes(8, size)
	fsys, backing := newSpanFS(t, map[string][]byte{"a/big.tar.zst": data, "b/other.bin": randomBytes(9, 1<<20)})
	ts, m, _ := newTestServer(t, fsys, WithBackingFile(backing))

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 4 {
				start := rng.IntN(size)
				end := min(size-1, start+rng.IntN(4<<20))
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.URL+"/harvester-iso/a/big.tar.zst", nil)
				if err != nil {
					errs <- err
					return
				}
				req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", start, end))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					errs <- err
					return
				}
				h := sha256.New()
				_, err = io.Copy(h, resp.Body)
				resp.Body.Close()
				if err != nil {
					errs <- err
					return
				}
				if resp.StatusCode != 206 || [32]byte(h.Sum(nil)) != sha256.Sum256(data[start:end+1]) {
					errs <- fmt.Errorf("range %d-%d: status %d, wrong content", start, end, resp.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 256.0, value(t, m.requests.WithLabelValues("GET /harvester-iso/", "GET", "206")))
}

func TestFallbacks(t *testing.T) {
	t.Parallel()
	big := randomBytes(4, 300<<10)
	tests := []struct {
		name string
		fsys func(t *testing.T) ([]Option, fs.FS)
		mode mode
	}{
		{"os.DirFS sends with sendfile", func(t *testing.T) ([]Option, fs.FS) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(dir+"/big.bin", big, 0o644))
			return nil, os.DirFS(dir)
		}, modeZeroCopy},
		{"MapFS copies", func(t *testing.T) ([]Option, fs.FS) {
			return nil, fstest.MapFS{"big.bin": {Data: big}}
		}, modeCopied},
		{"span without backing file copies", func(t *testing.T) ([]Option, fs.FS) {
			s, _ := newSpanFS(t, map[string][]byte{"big.bin": big})
			return nil, s
		}, modeCopied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts, fsys := tt.fsys(t)
			ts, m, _ := newTestServer(t, fsys, opts...)
			resp, body := get(t, ts.URL+"/big.bin", nil)
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, sum(big), sum(body))
			// Recorded once the handler returned: maybe after the client read the body.
			require.Eventually(t, func() bool {
				return value(t, m.fileResponses.WithLabelValues(modeLabels[tt.mode])) == 1
			}, 10*time.Second, 10*time.Millisecond)
		})
	}
}

func TestServerReadiness(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	s := NewServer(m, nil, nil)
	for _, tc := range []struct {
		path string
		code int
	}{{"/livez", 200}, {"/readyz", 503}, {"/harvester-release.yaml", 503}, {"/v1/release", 503}} {
		rec := newRecorder()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, tc.path, nil)
		require.NoError(t, err)
		s.ServeHTTP(rec, req)
		require.Equal(t, tc.code, rec.code, tc.path)
	}
	h, err := New(fstest.MapFS{"harvester-release.yaml": {Data: []byte("harvester: v1.5.2\n")}}, WithMetrics(m), WithVolumeID("VOL"))
	require.NoError(t, err)
	s.SetHandler(h)
	for _, p := range []string{"/readyz", "/harvester-release.yaml", "/v1/release"} {
		rec := newRecorder()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, p, nil)
		require.NoError(t, err)
		s.ServeHTTP(rec, req)
		require.Equal(t, 200, rec.code, p)
	}
	require.Equal(t, 1.0, value(t, m.info.WithLabelValues("VOL", "v1.5.2")))
	require.Equal(t, 1.0, value(t, m.requests.WithLabelValues("GET /readyz", "GET", "503")))
	require.Equal(t, 1.0, value(t, m.requests.WithLabelValues("GET /v1/release", "GET", "200")))
}
