package peer

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of peer sharing, all prefixed upgrade_repo_peer_.
// A nil *Metrics is valid and records nothing.
type Metrics struct {
	// Members is the number of live gossip members, the local node included.
	Members prometheus.Gauge
	// DirectoryEntries is the number of items (ISOs) in the directory, over all members.
	DirectoryEntries prometheus.Gauge
	// FetchedBytes counts content bytes received and kept, by source ("peer" or "origin").
	FetchedBytes *prometheus.CounterVec
	// ServedBytes counts content bytes sent to peers, by kind ("iso").
	ServedBytes *prometheus.CounterVec
	// FileBytes counts the ISO bytes sent to peers by how they left the file: "zerocopy" (with
	// sendfile, never through user space) or "copied" (read, then written).
	FileBytes *prometheus.CounterVec
	// VerificationFailures counts received content that failed verification, by kind
	// ("chunk", or "iso" for a whole-ISO sha512 mismatch).
	VerificationFailures *prometheus.CounterVec
	// OriginRetries counts failed requests to the origin that were retried.
	OriginRetries prometheus.Counter
	// Verifications counts the checks of a whole ISO against its sha512 when it is fetched or
	// found in the cache, by result ("ok", "mismatch", or "reused" for a cached copy whose record
	// says it is unchanged since it was verified).
	Verifications *prometheus.CounterVec
	// GossipSentBytes counts the bytes the gossip layer sent, by transport ("packet" for UDP:
	// probes, gossip and directory deltas; "stream" for TCP: full-state exchanges).
	GossipSentBytes *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "upgrade_repo_peer_members", Help: "Live gossip members, this node included.",
		}),
		DirectoryEntries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "upgrade_repo_peer_directory_entries", Help: "ISOs the directory knows, over all members.",
		}),
		FetchedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "upgrade_repo_peer_fetched_bytes_total", Help: "Content bytes received, verified and kept, by source.",
		}, []string{"source"}),
		ServedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "upgrade_repo_peer_served_bytes_total", Help: "Content bytes sent to peers, by kind.",
		}, []string{"kind"}),
		FileBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "upgrade_repo_peer_file_bytes_total", Help: "ISO bytes sent to peers by how they left the file: zerocopy (sendfile) or copied (through user space).",
		}, []string{"mode"}),
		VerificationFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "upgrade_repo_peer_verification_failures_total", Help: "Received content that failed verification, by kind.",
		}, []string{"kind"}),
		OriginRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "upgrade_repo_peer_origin_retries_total", Help: "Failed requests to the origin that were retried.",
		}),
		Verifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "upgrade_repo_peer_iso_verifications_total", Help: "Checks of a whole ISO against its sha512, by result (ok, mismatch, reused).",
		}, []string{"result"}),
		GossipSentBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "upgrade_repo_peer_gossip_sent_bytes_total", Help: "Bytes the gossip layer sent, by transport (packet, stream).",
		}, []string{"transport"}),
	}
	for _, c := range []prometheus.Collector{m.Members, m.DirectoryEntries, m.FetchedBytes, m.ServedBytes, m.FileBytes, m.VerificationFailures, m.OriginRetries, m.Verifications, m.GossipSentBytes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every label value the code uses starts at 0, so that rate() and increase() see the first
	// byte or failure too, and an alert on a failure fires at the first.
	for _, mode := range []string{FileZeroCopy, FileCopied} {
		m.FileBytes.WithLabelValues(mode)
	}
	for _, source := range []string{SourcePeer, SourceOrigin} {
		m.FetchedBytes.WithLabelValues(source)
	}
	m.ServedBytes.WithLabelValues(KindISO)
	for _, kind := range []string{KindChunk, KindISO} {
		m.VerificationFailures.WithLabelValues(kind)
	}
	for _, result := range []string{VerifiedOK, VerifiedMismatch, VerifiedReused} {
		m.Verifications.WithLabelValues(result)
	}
	for _, transport := range []string{TransportPacket, TransportStream} {
		m.GossipSentBytes.WithLabelValues(transport)
	}
	return m, nil
}

// Fetched counts n content bytes received from source ("peer" or "origin"), verified and kept.
func (m *Metrics) Fetched(source string, n int64) {
	if m != nil && n > 0 {
		m.FetchedBytes.WithLabelValues(source).Add(float64(n))
	}
}

// Served counts n content bytes of kind ("iso") sent to a peer.
func (m *Metrics) Served(kind string, n int64) {
	if m != nil && n > 0 {
		m.ServedBytes.WithLabelValues(kind).Add(float64(n))
	}
}

// The label values of the metrics: the sources of FetchedBytes, the kinds of ServedBytes and
// VerificationFailures, the results of Verifications and the transports of GossipSentBytes.
const (
	SourcePeer       = "peer"
	SourceOrigin     = "origin"
	KindISO          = "iso"
	KindChunk        = "chunk"
	VerifiedOK       = "ok"
	VerifiedMismatch = "mismatch"
	VerifiedReused   = "reused"
	TransportPacket  = "packet"
	TransportStream  = "stream"
)

// The modes of FileBytes.
const (
	// FileZeroCopy: sent with sendfile, from the page cache to the socket.
	FileZeroCopy = "zerocopy"
	// FileCopied: read into user space, then written to the socket.
	FileCopied = "copied"
)

// SentFile counts n ISO bytes sent to a peer in mode (FileZeroCopy or FileCopied).
func (m *Metrics) SentFile(mode string, n int64) {
	if m != nil && n > 0 {
		m.FileBytes.WithLabelValues(mode).Add(float64(n))
	}
}

// Failed counts received content of kind ("chunk" or "iso") that failed verification.
func (m *Metrics) Failed(kind string) {
	if m != nil {
		m.VerificationFailures.WithLabelValues(kind).Inc()
	}
}

// Retried counts a failed request to the origin that is retried.
func (m *Metrics) Retried() {
	if m != nil {
		m.OriginRetries.Inc()
	}
}

// Verified counts a check of a whole ISO against its sha512, by result ("ok", "mismatch" or
// "reused").
func (m *Metrics) Verified(result string) {
	if m != nil {
		m.Verifications.WithLabelValues(result).Inc()
	}
}

// GossipSent counts n bytes sent by the gossip layer over transport ("packet" or "stream").
func (m *Metrics) GossipSent(transport string, n int) {
	if m != nil && n > 0 {
		m.GossipSentBytes.WithLabelValues(transport).Add(float64(n))
	}
}

// SetMembers records the number of live members.
func (m *Metrics) SetMembers(n int) {
	if m != nil {
		m.Members.Set(float64(n))
	}
}

// SetDirectoryEntries records the size of the directory.
func (m *Metrics) SetDirectoryEntries(n int) {
	if m != nil {
		m.DirectoryEntries.Set(float64(n))
	}
}
