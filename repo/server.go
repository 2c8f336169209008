package repo

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
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

// ServeHTTP routes the request and records its metrics.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := s.metrics
	m.inFlight.Inc()
	start := time.Now()
	rec := &recorder{ResponseWriter: w, code: http.StatusOK}
	s.mux.ServeHTTP(rec, r)
	route := r.Pattern
	if route == "" {
		route = "none"
	}
	m.inFlight.Dec()
	m.request(route, method(r.Method), codeString(rec.code)).Inc()
	rm := m.route(route)
	rm.bytes.Add(float64(rec.bytes))
	rm.duration.Observe(time.Since(start).Seconds())
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
