package peer_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer"
)

// Every label value the code counts under exists from the start at 0, and moves when counted: an
// alert on increase() sees the first chunk found corrupt, a rate the first byte from the origin.
func TestMetricsStartAtZeroAndMove(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		vec    func(m *peer.Metrics) *prometheus.CounterVec
		label  string
		record func(m *peer.Metrics)
	}{
		{name: "chunk corrupt", vec: func(m *peer.Metrics) *prometheus.CounterVec { return m.VerificationFailures }, label: peer.KindChunk, record: func(m *peer.Metrics) { m.Failed(peer.KindChunk) }},
		{name: "ISO mismatch", vec: func(m *peer.Metrics) *prometheus.CounterVec { return m.VerificationFailures }, label: peer.KindISO, record: func(m *peer.Metrics) { m.Failed(peer.KindISO) }},
		{name: "bytes from the origin", vec: func(m *peer.Metrics) *prometheus.CounterVec { return m.FetchedBytes }, label: peer.SourceOrigin, record: func(m *peer.Metrics) { m.Fetched(peer.SourceOrigin, 1) }},
		{name: "bytes from peers", vec: func(m *peer.Metrics) *prometheus.CounterVec { return m.FetchedBytes }, label: peer.SourcePeer, record: func(m *peer.Metrics) { m.Fetched(peer.SourcePeer, 1) }},
		{name: "bytes served", vec: func(m *peer.Metrics) *prometheus.CounterVec { return m.ServedBytes }, label: peer.KindISO, record: func(m *peer.Metrics) { m.Served(peer.KindISO, 1) }},
		{name: "verified", vec: func(m *peer.Metrics) *prometheus.CounterVec { return m.Verifications }, label: peer.VerifiedOK, record: func(m *peer.Metrics) { m.Verified(peer.VerifiedOK) }},
		{name: "mismatch", vec: func(m *peer.Metrics) *prometheus.CounterVec { return m.Verifications }, label: peer.VerifiedMismatch, record: func(m *peer.Metrics) { m.Verified(peer.VerifiedMismatch) }},
		{name: "reused", vec: func(m *peer.Metrics) *prometheus.CounterVec { return m.Verifications }, label: peer.VerifiedReused, record: func(m *peer.Metrics) { m.Verified(peer.VerifiedReused) }},
		{name: "gossip packet", vec: func(m *peer.Metrics) *prometheus.CounterVec { return m.GossipSentBytes }, label: peer.TransportPacket, record: func(m *peer.Metrics) { m.GossipSent(peer.TransportPacket, 1) }},
		{name: "gossip stream", vec: func(m *peer.Metrics) *prometheus.CounterVec { return m.GossipSentBytes }, label: peer.TransportStream, record: func(m *peer.Metrics) { m.GossipSent(peer.TransportStream, 1) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := peer.NewMetrics(prometheus.NewPedanticRegistry())
			require.NoError(t, err)
			vec := tc.vec(m)
			before := testutil.CollectAndCount(vec)
			require.Equal(t, 0.0, testutil.ToFloat64(vec.WithLabelValues(tc.label)))
			require.Equal(t, before, testutil.CollectAndCount(vec), "the series did not exist before it was read")
			tc.record(m)
			require.Equal(t, 1.0, testutil.ToFloat64(vec.WithLabelValues(tc.label)))
		})
	}
}
