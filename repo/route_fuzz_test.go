package repo

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// FuzzContentRoute checks the Server's own routing of content requests against its mux on any
// path: whenever contentRoute takes a request, the mux routes it to the same pattern and answers
// it the same way (status, headers but Date, body).
func FuzzContentRoute(f *testing.F) {
	for _, p := range []string{"/", "/harvester-release.yaml", "/harvester-iso/", "/harvester-iso", "/v1/release",
		"/v1/release/", "/bundle/../x", "/a//b", "/%2e%2e/", "/metrics", "/livez/", "/a/b/", "/a/./", "/dir%20with%20space/a&b.txt"} {
		f.Add("GET", p)
		f.Add("HEAD", p)
	}
	fsys := fstest.MapFS{}
	for name, data := range fixtureFiles() {
		fsys[name] = &fstest.MapFile{Data: data, ModTime: time.Unix(1700000000, 0)}
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		f.Fatal(err)
	}
	h, err := New(fsys, WithMetrics(m), WithIdentity("x"))
	if err != nil {
		f.Fatal(err)
	}
	s := NewServer(m, http.NotFoundHandler(), nil)
	s.SetHandler(h)
	f.Fuzz(func(t *testing.T, method, target string) {
		if method != http.MethodGet && method != http.MethodHead && method != http.MethodPost {
			return
		}
		if len(target) == 0 || target[0] != '/' {
			return
		}
		// As a server reads a request line: the target is a path and a query.
		u, err := url.ParseRequestURI(target)
		if err != nil || u.Host != "" || u.Scheme != "" || u.Opaque != "" {
			return
		}
		r, err := http.NewRequestWithContext(t.Context(), method, "http://x"+target, nil)
		if err != nil {
			return
		}
		r.RequestURI = target
		route := contentRoute(r)
		if route == "" {
			return
		}
		byMux := r.Clone(t.Context())
		want := httptest.NewRecorder()
		s.mux.ServeHTTP(want, byMux)
		if byMux.Pattern != route {
			t.Fatalf("%s %q: contentRoute %q, the mux %q", method, target, route, byMux.Pattern)
		}
		byServer := r.Clone(t.Context())
		got := httptest.NewRecorder()
		s.ServeHTTP(got, byServer)
		want.Header().Del("Date")
		got.Header().Del("Date")
		if want.Code != got.Code || want.Body.String() != got.Body.String() || len(want.Header()) != len(got.Header()) {
			t.Fatalf("%s %q: the mux answered %d %v, the server %d %v", method, target, want.Code, want.Header(), got.Code, got.Header())
		}
		for k := range want.Header() {
			if want.Header().Get(k) != got.Header().Get(k) {
				t.Fatalf("%s %q: header %s: the mux %q, the server %q", method, target, k, want.Header().Get(k), got.Header().Get(k))
			}
		}
	})
}
