package registry

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the registry's metrics. A nil *Metrics counts nothing.
type Metrics struct {
	requests *prometheus.CounterVec
	sentB    *prometheus.CounterVec
	recvB    prometheus.Counter
	refusals prometheus.Counter
	fetches  *prometheus.CounterVec
}

// NewMetrics returns the registry's metrics, registered on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "upgrade_repo_registry_requests_total",
			Help: "Requests to the release image registry (/v2/), by route (base, manifests, blobs, other) and status code.",
		}, []string{"route", "code"}),
		sentB: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "upgrade_repo_registry_sent_bytes_total",
			Help: "Blob bytes the release image registry sent, by where they came from (local: the node's containerd; peer: another agent).",
		}, []string{"source"}),
		recvB: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "upgrade_repo_registry_peer_received_bytes_total",
			Help: "Bytes of manifests and blobs the release image registry received from peers.",
		}),
		refusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "upgrade_repo_registry_peer_refusals_total",
			Help: "Answers of peers the release image registry refused: wrong bytes, a failed request or an error status.",
		}),
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "upgrade_repo_registry_peer_blob_fetches_total",
			Help: "Requests for blobs the node lacks, by whether they started a fetch from peers (started) or waited for one under way (joined).",
		}, []string{"kind"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.sentB, m.recvB, m.refusals, m.fetches} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register registry metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) request(route string, status int) {
	if m != nil {
		m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	}
}

func (m *Metrics) sent(source string, n int64) {
	if m != nil {
		m.sentB.WithLabelValues(source).Add(float64(n))
	}
}

func (m *Metrics) received(n int64) {
	if m != nil {
		m.recvB.Add(float64(n))
	}
}

func (m *Metrics) refused() {
	if m != nil {
		m.refusals.Inc()
	}
}

func (m *Metrics) fetch(kind string) {
	if m != nil {
		m.fetches.WithLabelValues(kind).Inc()
	}
}

// SentBytes returns the counter of blob bytes sent from source ("local" or "peer").
func (m *Metrics) SentBytes(source string) prometheus.Counter { return m.sentB.WithLabelValues(source) }

// ReceivedBytes returns the counter of manifest and blob bytes received from peers.
func (m *Metrics) ReceivedBytes() prometheus.Counter { return m.recvB }

// Refusals returns the counter of peers' answers refused.
func (m *Metrics) Refusals() prometheus.Counter { return m.refusals }

// BlobFetches returns the counter of requests for blobs the node lacks of kind "started" (a fetch
// from peers) or "joined" (a wait for one under way).
func (m *Metrics) BlobFetches(kind string) prometheus.Counter { return m.fetches.WithLabelValues(kind) }
