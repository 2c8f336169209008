package repo

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server is the HTTP face of a node's repository: /livez, /readyz and /metrics, and every other
// path answered by the Handler set with SetHandler (503 until then). It records the request
// metrics of every route. It is safe for concurrent use.
type Server struct {
	mux     *http.ServeMux
	metrics *Metrics
	handler atomic.Pointer[Handler]
	log     *slog.Logger
}

var _ http.Handler = (*Server)(nil)

// NewServer returns a Server recording into m (required) and answering /metrics with
// metricsHandler (such as promhttp.HandlerFor(registry, ...)). log may be nil.
func NewServer(m *Metrics, metricsHandler http.Handler, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{mux: http.NewServeMux(), metrics: m, log: log}
	s.mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n") // the client hung up; nothing to tell it
	})
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.handler.Load() == nil {
			writeError(w, http.StatusServiceUnavailable, errNotReady.Error())
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n") // the client hung up; nothing to tell it
	})
	if metricsHandler != nil {
		s.mux.Handle("GET /metrics", metricsHandler)
	}
	// The content routes; contentRoute knows them too.
	content := http.HandlerFunc(s.content)
	for _, p := range []string{"/v1/release", "/v1/bundle", "/v1/images", Prefix + "/", "/"} {
		s.mux.Handle("GET "+p, content)
	}
	return s
}

// SetHandler makes h the release served; the Server is ready from then on.
func (s *Server) SetHandler(h *Handler) { s.handler.Store(h) }

// Ready reports whether a release is being served.
func (s *Server) Ready() bool { return s.handler.Load() != nil }

func (s *Server) content(w http.ResponseWriter, r *http.Request) {
	h := s.handler.Load()
	if h == nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, errNotReady.Error())
		return
	}
	h.ServeHTTP(w, r)
}

// ServeHTTP routes the request and records its metrics. Repeated slashes in the path are merged
// first (see MergeSlashes).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r = mergeSlashes(r)
	m := s.metrics
	m.inFlight.Inc()
	start := time.Now()
	rec := recorders.Get().(*recorder)
	*rec = recorder{ResponseWriter: w, code: http.StatusOK}
	if route := contentRoute(r); route != "" {
		// What the mux would do, without its matching: most requests are for a file.
		r.Pattern = route
		s.content(rec, r)
	} else {
		s.mux.ServeHTTP(rec, r)
	}
	m.inFlight.Dec()
	s.record(r.Pattern, r.Method, rec.code, rec.bytes, start)
	*rec = recorder{}
	recorders.Put(rec)
}

// record records a finished request: its route pattern ("" for none), method, status, body
// bytes and the time it started.
func (s *Server) record(route, method string, code int, n int64, start time.Time) {
	if route == "" {
		route = "none"
	}
	rm := s.metrics.route(route)
	s.metrics.requestOf(rm, method, code).Inc()
	rm.bytes.Add(float64(n))
	rm.duration.Observe(time.Since(start).Seconds())
}

// recorders are the recorders of finished requests: a handler must not use its ResponseWriter
// once it returned.
var recorders = sync.Pool{New: func() any { return new(recorder) }}

// contentRoute returns the pattern of the route under which the mux answers r with the release's
// content when that needs no matching: r is a GET or HEAD of a clean path that the mux takes as
// it is (no escapes of its own, no dot segments, no run of slashes) and that no other route
// names. It returns "" for every other request, for the mux to route, redirect or refuse.
func contentRoute(r *http.Request) string {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return ""
	}
	p := r.URL.Path
	if r.URL.RawPath != "" || p == "" || p[0] != '/' || !isClean(p) {
		return ""
	}
	return pathRoute(p)
}

// pathRoute returns the pattern of the route that answers the clean path p with the release's
// content, "" for a path another route answers (the fast path asks it too).
func pathRoute(p string) string {
	switch p {
	case "/v1/release":
		return "GET /v1/release"
	case "/v1/bundle":
		return "GET /v1/bundle"
	case "/v1/images":
		return "GET /v1/images"
	case "/livez", "/readyz", "/metrics", Prefix:
		// Their own routes, and the redirect of the prefix to Prefix+"/".
		return ""
	}
	if strings.HasPrefix(p, Prefix+"/") {
		return "GET " + Prefix + "/"
	}
	return "GET /"
}

// isClean reports whether the mux would take the URL path p (which starts with a slash) as it is,
// rather than redirect to its cleaned form: path.Clean leaves it alone, but for the trailing slash
// of a path other than the root.
func isClean(p string) bool {
	c := path.Clean(p)
	return c == p || c != "/" && len(p) == len(c)+1 && p[len(p)-1] == '/' && strings.HasPrefix(p, c)
}

// MergeSlashes returns a handler that merges every run of slashes in the request's path into one
// before next sees it, as nginx does by default (merge_slashes), so that a path such as
// /harvester-iso/bundle//harvester/images/a.tar.zst is answered directly. Without it an
// http.ServeMux answers such a path with a redirect (307), which a client without -L saves as the
// file. Dot segments are left to the mux (a redirect to the cleaned path). A Server does this
// itself; wrap any mux that routes to a Server with it.
func MergeSlashes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { next.ServeHTTP(w, mergeSlashes(r)) })
}

// mergeSlashes returns r, or a shallow copy of it whose path has its runs of slashes merged.
func mergeSlashes(r *http.Request) *http.Request {
	if !strings.Contains(r.URL.Path, "//") {
		return r
	}
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	// The escaped form is kept when it still encodes the new path (url.URL.EscapedPath checks),
	// so that escaped characters reach the mux as they came.
	u.Path, u.RawPath = merge(u.Path), merge(u.RawPath)
	r2.URL = &u
	return r2
}

// merge replaces every run of slashes in p with one slash.
func merge(p string) string {
	if !strings.Contains(p, "//") {
		return p
	}
	b := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && i > 0 && p[i-1] == '/' {
			continue
		}
		b = append(b, p[i])
	}
	return string(b)
}

// method bounds the method label to the methods HTTP defines.
func method(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodPatch, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

var codes [600]string

func init() {
	for i := range codes {
		codes[i] = itoa(i)
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [4]byte
	n := len(b)
	for i > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	return string(b[n:])
}

func codeString(c int) string {
	if c >= 0 && c < len(codes) {
		return codes[c]
	}
	return "other"
}

// recorder captures the status and body size of a response. It passes io.ReaderFrom through to
// the connection's writer, which is what keeps sendfile in use: hiding it would copy every byte.
type recorder struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
	bytes       int64
}

var _ io.ReaderFrom = (*recorder)(nil)

func (r *recorder) WriteHeader(code int) {
	if !r.wroteHeader && code >= 200 {
		r.code, r.wroteHeader = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	r.wroteHeader = true
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	return n, err
}

// ReadFrom hands src to the underlying writer's ReadFrom (sendfile for files).
func (r *recorder) ReadFrom(src io.Reader) (int64, error) {
	r.wroteHeader = true
	var n int64
	var err error
	if rf, ok := r.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(src)
	} else {
		n, err = io.Copy(writerOnly{r.ResponseWriter}, src)
	}
	r.bytes += n
	return n, err
}

// Flush flushes the underlying writer when it can.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Hijack lets protocol upgrades through.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(r.ResponseWriter).Hijack()
}

type writerOnly struct{ io.Writer }
