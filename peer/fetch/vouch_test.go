package fetch_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer"
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

// earlierList wraps a node's handler so that its chunk list is as a peer of an earlier version
// sent it: the sha256 of each held chunk of data, under "digests".
func earlierList(data []byte) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasSuffix(r.URL.Path, "/chunks") {
				h.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			var now peer.ChunkList
			if err := json.Unmarshal(rec.Body.Bytes(), &now); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			old := make([]string, len(now.Digests))
			for c, d := range now.Digests {
				if d != "" {
					sum := sha256.Sum256(data[int64(c)*now.ChunkSize : min(int64(len(data)), int64(c+1)*now.ChunkSize)])
					old[c] = hex.EncodeToString(sum[:])
				}
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"size": now.Size, "chunkSize": now.ChunkSize, "complete": now.Complete, "digests": old})
		})
	}
}

// In a ring where a peer of an earlier version (sha256 chunk lists) and a peer of this version
// hold the ISO, a node takes chunks from both: the earlier peer's list is neither believed nor held
// against the other's honest chunks (they are taken as weakly verified), and the sha512 of the
// whole ISO passes without the origin.
func TestAPeerOfAnEarlierVersionNeitherVouchesNorAccuses(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, 4<<20)
	o := newOrigin(t, data)
	earlier := startNode(t, "earlier", nil, nodeConfig{wrap: earlierList(data)})
	_, _, err := earlier.fetch(t.Context(), sha, o.url())
	require.NoError(t, err)
	now := startNode(t, "now", []string{earlier.gossip.Addr()}, nodeConfig{})
	waitFor(t, now.dir, "the ISO to be advertised", func() bool { return len(now.dir.ISOHolders(sha)) == 1 })
	_, _, err = now.fetch(t.Context(), sha, "")
	require.NoError(t, err)
	sent := o.sent.Load()

	late := startNode(t, "late", []string{earlier.gossip.Addr(), now.gossip.Addr()}, nodeConfig{})
	waitFor(t, late.dir, "both holders", func() bool { return len(late.dir.ISOHolders(sha)) == 2 })
	_, p, err := late.fetch(t.Context(), sha, o.url())
	require.NoError(t, err)
	late.requireISO(t, data)
	require.Zero(t, metricValue(t, late, "upgrade_repo_peer_verification_failures_total", "chunk"),
		"no honest chunk was refused for a digest of another hash")
	require.Zero(t, metricValue(t, late, "upgrade_repo_peer_verification_failures_total", "iso"))
	require.Equal(t, sent, o.sent.Load(), "the origin was not needed")
	require.EqualValues(t, len(data), p.FromPeers)
}
