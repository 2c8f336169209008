package repo

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDoubleSlashes requests the paths the product's upgrade scripts build (the metadata's paths
// start with a slash, so every archive URL holds "bundle//"): they are answered directly, never
// with a redirect, by a Server and by a mux wrapped in MergeSlashes that routes to one (as the
// agent's does).
func TestDoubleSlashes(t *testing.T) {
	t.Parallel()
	files := fixtureFiles()
	fsys, backing := newSpanFS(t, files)
	ts, _, _ := newTestServer(t, fsys, WithBackingFile(backing))

	// The agent's layout: its own mux in front of the Server.
	inner := ts.Config.Handler
	outer := http.NewServeMux()
	outer.Handle("GET /v1/status", http.NotFoundHandler())
	outer.Handle("/", inner)
	wrapped := httptest.NewServer(MergeSlashes(outer))
	t.Cleanup(wrapped.Close)

	big := files["bundle/harvester/images/big.tar.zst"]
	tests := []struct {
		name   string
		method string
		path   string
		rng    string
		code   int
		body   []byte
	}{
		{name: "archive", path: "/harvester-iso/bundle//harvester/images/big.tar.zst", code: 200, body: big},
		{name: "archive without prefix", path: "/bundle//harvester/images/big.tar.zst", code: 200, body: big},
		{name: "list", path: "/harvester-iso/bundle//harvester/images-lists/big.txt", code: 200, body: files["bundle/harvester/images-lists/big.txt"]},
		{name: "many slashes", path: "//harvester-iso///bundle////harvester//images/big.tar.zst", code: 200, body: big},
		{name: "after the prefix", path: "/harvester-iso//harvester-release.yaml", code: 200, body: files["harvester-release.yaml"]},
		{name: "head", method: http.MethodHead, path: "/harvester-iso/bundle//harvester/images/big.tar.zst", code: 200, body: []byte{}},
		{name: "range", path: "/harvester-iso/bundle//harvester/images/big.tar.zst", rng: "bytes=100-1099", code: 206, body: big[100:1100]},
		{name: "range of a small file", path: "/harvester-iso//harvester-release.yaml", rng: "bytes=0-8", code: 206, body: files["harvester-release.yaml"][:9]},
		{name: "escaped name", path: "/harvester-iso//dir%20with%20space//a&b.txt", code: 200, body: []byte("x")},
		{name: "missing", path: "/harvester-iso/bundle//nope.tar.zst", code: 404},
		{name: "dot segments still redirect", path: "/harvester-iso/bundle/../harvester-release.yaml", code: 307},
	}
	for _, srv := range []struct {
		name string
		url  string
	}{{"server", ts.URL}, {"wrapped mux", wrapped.URL}} {
		for _, tt := range tests {
			t.Run(srv.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				method := tt.method
				if method == "" {
					method = http.MethodGet
				}
				hdr := map[string]string{}
				if tt.rng != "" {
					hdr["Range"] = tt.rng
				}
				// do does not follow redirects, as curl without -L.
				resp, body := do(t, method, srv.url+tt.path, hdr)
				require.Equal(t, tt.code, resp.StatusCode, string(body))
				if tt.body != nil {
					require.Equal(t, sum(tt.body), sum(body))
				}
				if method == http.MethodHead {
					require.Equal(t, fmt.Sprint(len(big)), resp.Header.Get("Content-Length"))
				}
			})
		}
	}
}

func TestMerge(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":        "",
		"/":       "/",
		"//":      "/",
		"/a//b":   "/a/b",
		"///a///": "/a/",
		"/a/b":    "/a/b",
		"a//b":    "a/b",
	} {
		require.Equal(t, want, merge(in), in)
	}
}
