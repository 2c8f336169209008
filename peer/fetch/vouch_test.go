package fetch_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// lyingWriter changes one byte of every write of an ISO range: a holder whose bytes are bad
// although the digests it advertises are right.
type lyingWriter struct{ http.ResponseWriter }

func (l lyingWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		q := append([]byte(nil), p...)
		q[0] ^= 0xff
		p = q
	}
	return l.ResponseWriter.Write(p)
}

// lie wraps a node's handler so that it sends bad ISO bytes once lying is set.
func lie(lying *atomic.Bool) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if lying.Load() && strings.HasPrefix(r.URL.Path, "/v1/iso/") && !strings.HasSuffix(r.URL.Path, "/chunks") {
				w = lyingWriter{w}
			}
			h.ServeHTTP(w, r)
		})
	}
}

// A node that joins through a holder sending bad bytes, before gossip has told it what the other
// holders hold, still has every chunk vouched for by them: it catches the liar at once, takes
// nothing from the origin and never fails the sha512 of the whole ISO.
func TestJoinerThroughALiarStillVouches(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, 8<<20)
	o := newOrigin(t, data)
	good := startNode(t, "good", nil, nodeConfig{})
	_, _, err := good.fetch(t.Context(), sha, o.url())
	require.NoError(t, err)
	var lying atomic.Bool
	liar := startNode(t, "liar", []string{good.gossip.Addr()}, nodeConfig{wrap: lie(&lying)})
	other := startNode(t, "other", []string{good.gossip.Addr()}, nodeConfig{})
	for _, n := range []*node{liar, other} {
		waitFor(t, n.dir, n.name+" to see the ISO", func() bool { return len(n.dir.ISOHolders(sha)) >= 1 })
		_, _, err = n.fetch(t.Context(), sha, "")
		require.NoError(t, err)
	}
	lying.Store(true)
	sent := o.sent.Load()

	late := startNode(t, "late", []string{liar.gossip.Addr()}, nodeConfig{})
	_, p, err := late.fetch(t.Context(), sha, o.url())
	require.NoError(t, err)
	late.requireISO(t, data)
	require.Zero(t, metricValue(t, late, "upgrade_repo_peer_verification_failures_total", "iso"),
		"every chunk from the liar was checked against the other holders")
	require.GreaterOrEqual(t, metricValue(t, late, "upgrade_repo_peer_verification_failures_total", "chunk"), 1.0)
	require.Equal(t, sent, o.sent.Load(), "the origin was not needed")
	require.Zero(t, p.FromOrigin)
	require.EqualValues(t, len(data), p.FromPeers)
}

// When no other holder can vouch for a liar's chunks, the whole ISO fails its sha512 and the
// chunks are fetched again from the origin: the progress then counts what the origin sent, and
// the liar's bytes no longer count as kept from peers.
func TestRepairFromTheOriginIsCounted(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, 2<<20)
	o := newOrigin(t, data)
	var lying atomic.Bool
	liar := startNode(t, "liar", nil, nodeConfig{wrap: lie(&lying)})
	_, _, err := liar.fetch(t.Context(), sha, o.url())
	require.NoError(t, err)
	lying.Store(true)
	sent := o.sent.Load()

	late := startNode(t, "late", []string{liar.gossip.Addr()}, nodeConfig{})
	waitFor(t, late.dir, "the ISO to be advertised", func() bool { return len(late.dir.ISOHolders(sha)) == 1 })
	_, p, err := late.fetch(t.Context(), sha, o.url())
	require.NoError(t, err)
	late.requireISO(t, data)
	require.EqualValues(t, len(data), o.sent.Load()-sent, "the origin sent the whole ISO again")
	require.EqualValues(t, len(data), p.FromOrigin)
	require.Zero(t, p.FromPeers)
	require.InDelta(t, 1.0, metricValue(t, late, "upgrade_repo_peer_verification_failures_total", "iso"), 0)
	require.InDelta(t, float64(len(data)), metricValue(t, late, "upgrade_repo_peer_fetched_bytes_total", "origin"), 0)
}
