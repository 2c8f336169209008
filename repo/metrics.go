package repo

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of the artifact server, all prefixed upgrade_repo_. One
// Metrics is shared by a Server and the Handlers it serves; it is safe for concurrent use.
type Metrics struct {
	requests      *prometheus.CounterVec
	responseBytes *prometheus.CounterVec
	inFlight      prometheus.Gauge
	duration      *prometheus.HistogramVec
	info          *prometheus.GaugeVec
	fileResponses *prometheus.CounterVec
	fileBytes     *prometheus.CounterVec

	// Children of the vectors by label values, so that a request costs no label hashing.
	requestChildren sync.Map // [3]string -> prometheus.Counter
	routeChildren   sync.Map // string -> *routeMetrics
	fileResponsesBy [modes]prometheus.Counter
	fileBytesBy     [modes]prometheus.Counter
}

// routeMetrics are the children of one route's metrics.
type routeMetrics struct {
	route    string
	bytes    prometheus.Counter
	duration prometheus.Observer
	// ok holds the request counters of GET and HEAD answered 200, created at their first use:
	// nearly every request is one of them, and then finds its counter without hashing labels.
	ok [2]atomic.Pointer[counterRef]
}

type counterRef struct{ prometheus.Counter }

func (m *Metrics) request(route, method, code string) prometheus.Counter {
	k := [3]string{route, method, code}
	if c, ok := m.requestChildren.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c := m.requests.WithLabelValues(route, method, code)
	m.requestChildren.Store(k, c)
	return c
}

func (m *Metrics) route(route string) *routeMetrics {
	if rm, ok := m.routeChildren.Load(route); ok {
		return rm.(*routeMetrics)
	}
	rm := &routeMetrics{route: route, bytes: m.responseBytes.WithLabelValues(route), duration: m.duration.WithLabelValues(route)}
	actual, _ := m.routeChildren.LoadOrStore(route, rm)
	return actual.(*routeMetrics)
}

// requestOf returns the request counter of the route rm for the request method verb and the
// status code.
func (m *Metrics) requestOf(rm *routeMetrics, verb string, code int) prometheus.Counter {
	i := -1
	if code == http.StatusOK {
		switch verb {
		case http.MethodGet:
			i = 0
		case http.MethodHead:
			i = 1
		}
	}
	if i >= 0 {
		if c := rm.ok[i].Load(); c != nil {
			return c.Counter
		}
	}
	c := m.request(rm.route, method(verb), codeString(code))
	if i >= 0 {
		rm.ok[i].Store(&counterRef{c})
	}
	return c
}

// mode is how a file response's content was sent.
type mode int

// File response modes: sent with sendfile, copied through user space, or served from memory.
const (
	modeZeroCopy mode = iota
	modeCopied
	modeMemory
	modes
)

// modeLabels are the mode label values, by mode.
var modeLabels = [modes]string{modeZeroCopy: "zerocopy", modeCopied: "copied", modeMemory: "memory"}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "upgrade_repo_http_requests_total",
			Help: "HTTP requests answered, by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		responseBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "upgrade_repo_http_response_bytes_total",
			Help: "Bytes of response bodies sent, by route pattern.",
		}, []string{"route"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "upgrade_repo_http_requests_in_flight",
			Help: "HTTP requests being answered.",
		}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "upgrade_repo_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route pattern.",
			Buckets: []float64{.0005, .001, .005, .01, .05, .1, .5, 1, 5, 30, 120, 600},
		}, []string{"route"}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "upgrade_repo_release_info",
			Help: "The release being served: 1 for its volume id and Harvester version.",
		}, []string{"volume_id", "version"}),
		fileResponses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "upgrade_repo_file_responses_total",
			Help: "File responses by how their content was sent: zerocopy (sendfile), copied (through user space) or memory.",
		}, []string{"mode"}),
		fileBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "upgrade_repo_file_bytes_total",
			Help: "File content bytes by how they were sent: zerocopy (sendfile), copied (through user space) or memory.",
		}, []string{"mode"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.responseBytes, m.inFlight, m.duration, m.info, m.fileResponses, m.fileBytes} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	for i, label := range modeLabels {
		m.fileResponsesBy[i] = m.fileResponses.WithLabelValues(label)
		m.fileBytesBy[i] = m.fileBytes.WithLabelValues(label)
	}
	return m, nil
}

// file records one file response.
func (m *Metrics) file(how mode, n int64) {
	if m == nil {
		return
	}
	m.fileResponsesBy[how].Inc()
	m.fileBytesBy[how].Add(float64(n))
}
