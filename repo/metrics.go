package repo

import (
	"fmt"

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
}

// File response modes: sent with sendfile, copied through user space, or served from memory.
const (
	modeZeroCopy = "zerocopy"
	modeCopied   = "copied"
	modeMemory   = "memory"
)

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
	for _, mode := range []string{modeZeroCopy, modeCopied, modeMemory} {
		m.fileResponses.WithLabelValues(mode)
		m.fileBytes.WithLabelValues(mode)
	}
	return m, nil
}

// file records one file response.
func (m *Metrics) file(mode string, n int64) {
	if m == nil {
		return
	}
	m.fileResponses.WithLabelValues(mode).Inc()
	m.fileBytes.WithLabelValues(mode).Add(float64(n))
}
