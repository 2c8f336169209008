package fetch_test

import (
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
)

// digest returns a sha512 in hex, the name of an ISO made up from s.
func digest(s string) string {
	d := sha512.Sum512([]byte(s))
	return hex.EncodeToString(d[:])
}

// Twelve members on loopback, each publishing ISOs of its own and a partial shared ISO, end up
// with the same directory everywhere.
func TestMembersConverge(t *testing.T) {
	t.Parallel()
	const members, isosEach = 12, 20
	_, sha := isoData(t, 1024)
	nodes := make([]*node, members)
	for i := range nodes {
		var seeds []string
		if i > 0 {
			seeds = []string{nodes[0].gossip.Addr()}
		}
		nodes[i] = startNode(t, fmt.Sprintf("node-%02d", i), seeds, nodeConfig{})
	}
	for i, n := range nodes {
		for j := range isosEach {
			require.NoError(t, n.dir.SetISO(inventory.ISO{SHA512: digest(fmt.Sprint(i, "/", j)), Size: 1 << 20, ChunkSize: 1 << 20, Complete: true}))
		}
		bm := inventory.NewBitmap(40)
		bm.Set(i)
		require.NoError(t, n.dir.SetISO(inventory.ISO{SHA512: sha, Size: 40 << 20, ChunkSize: 1 << 20, Chunks: bm}))
	}
	// What every node must agree on: each node's inventory as published by that node.
	want := map[string]inventory.Inventory{}
	for _, n := range nodes {
		want[n.name] = n.dir.Snapshot()[n.name]
		require.Len(t, want[n.name].ISOs, isosEach+1)
	}
	// Deltas spread as an epidemic: in a ring of 12, about one member in fifty misses a given
	// delta altogether, and learns that inventory only at its next push/pull with the owner (every
	// 2 s from each side, with a random member): a minute or more in the tail on a loaded machine.
	for _, n := range nodes {
		waitWithin(t, 3*time.Minute, n.dir, n.name+" to learn every inventory", func() bool {
			return len(n.gossip.Members()) == members && reflect.DeepEqual(n.dir.Snapshot(), want)
		})
		require.Equal(t, members*(isosEach+1), n.dir.Len())
	}
	require.Len(t, nodes[5].dir.ISOHolders(sha), members-1)
	holders := nodes[3].dir.ISOHolders(digest("7/19"))
	require.Len(t, holders, 1)
	require.Equal(t, "node-07", holders[0].Member)
	require.InDelta(t, float64(members), metricValue(t, nodes[0], "upgrade_repo_peer_members", ""), 0)
}

// A node that joins after another verified the ISO gets all of it from that peer, none from the
// origin.
func TestLateJoinerFetchesFromPeers(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, 6<<20+12345)
	o := newOrigin(t, data)
	first := startNode(t, "first", nil, nodeConfig{})
	_, p, err := first.fetch(t.Context(), sha, o.url())
	require.NoError(t, err)
	require.True(t, p.Verified)
	require.EqualValues(t, len(data), p.FromOrigin)
	sentBefore := o.sent.Load()
	require.EqualValues(t, len(data), sentBefore)

	late := startNode(t, "late", []string{first.gossip.Addr()}, nodeConfig{})
	waitFor(t, late.dir, "the directory to show the ISO", func() bool { return len(late.dir.ISOHolders(sha)) == 1 })
	l, p, err := late.fetch(t.Context(), sha, o.url())
	require.NoError(t, err)
	require.True(t, l.Complete())
	late.requireISO(t, data)
	require.EqualValues(t, len(data), p.FromPeers)
	require.Zero(t, p.FromOrigin)
	require.Equal(t, sentBefore, o.sent.Load(), "the origin must not be asked for what a peer has")
	require.InDelta(t, float64(len(data)), metricValue(t, first, "upgrade_repo_peer_served_bytes_total", "iso"), 0)
}

// Nodes that start together split the ISO: the origin sends about one copy, not one a node.
func TestNodesStartingTogetherShareTheOrigin(t *testing.T) {
	t.Parallel()
	const members = 4
	data, sha := isoData(t, 8<<20)
	o := newOrigin(t, data)
	nodes := make([]*node, members)
	for i := range nodes {
		var seeds []string
		if i > 0 {
			seeds = []string{nodes[0].gossip.Addr()}
		}
		nodes[i] = startNode(t, fmt.Sprintf("n%d", i), seeds, nodeConfig{})
	}
	var wg sync.WaitGroup
	errs := make([]error, members)
	for i, n := range nodes {
		wg.Go(func() { _, _, errs[i] = n.fetch(t.Context(), sha, o.url()) })
	}
	wg.Wait()
	for i, n := range nodes {
		require.NoError(t, errs[i])
		n.requireISO(t, data)
	}
	ratio := float64(o.sent.Load()) / float64(len(data))
	t.Logf("origin sent %.2f copies for %d nodes", ratio, members)
	// The goal is 1.2 (make bench-distribute measures it); a loaded test machine may delay the
	// gossip that splits the work, so the test only insists on far less than one copy a node.
	require.LessOrEqual(t, ratio, 1.5)
}

// A holder whose file went bad after it verified it checks its chunks again before sending them:
// it refuses the rotten ones and withdraws them from what it advertises, so the late node
// completes from the others without ever receiving a wrong byte. (A holder that sends bad bytes
// all the same is caught by the receiver: TestJoinerThroughALiarStillVouches.)
func TestBadPeerIsDetectedAndAvoided(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, 4<<20)
	o := newOrigin(t, data)
	good := startNode(t, "good", nil, nodeConfig{})
	_, _, err := good.fetch(t.Context(), sha, o.url())
	require.NoError(t, err)
	liar := startNode(t, "liar", []string{good.gossip.Addr()}, nodeConfig{})
	waitFor(t, liar.dir, "the liar to see the ISO", func() bool { return len(liar.dir.ISOHolders(sha)) == 1 })
	_, _, err = liar.fetch(t.Context(), sha, "")
	require.NoError(t, err)
	// Rot every chunk of the liar's copy after it was verified.
	f, err := os.OpenFile(filepath.Join(liar.cache, "release.iso"), os.O_WRONLY, 0)
	require.NoError(t, err)
	for off := int64(100); off < int64(len(data)); off += testChunk {
		_, err = f.WriteAt([]byte("rotten"), off)
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	third := startNode(t, "third", []string{good.gossip.Addr()}, nodeConfig{})
	waitFor(t, third.dir, "a third holder to see the ISO", func() bool { return len(third.dir.ISOHolders(sha)) == 2 })
	_, _, err = third.fetch(t.Context(), sha, "")
	require.NoError(t, err)

	late := startNode(t, "late", []string{good.gossip.Addr()}, nodeConfig{})
	waitFor(t, late.dir, "three holders", func() bool { return len(late.dir.ISOHolders(sha)) == 3 })
	_, p, err := late.fetch(t.Context(), sha, "")
	require.NoError(t, err)
	late.requireISO(t, data)
	require.EqualValues(t, len(data), p.FromPeers)
	require.Zero(t, metricValue(t, late, "upgrade_repo_peer_verification_failures_total", "chunk"), "no rotten byte was sent")
	require.Zero(t, metricValue(t, late, "upgrade_repo_peer_verification_failures_total", "iso"))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, liar.srv.URL+"/v1/iso/"+sha, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", 2*testChunk, 3*testChunk-1))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	// 503 when this request finds the rot, 416 when the late node's had found it already.
	require.Contains(t, []int{http.StatusServiceUnavailable, http.StatusRequestedRangeNotSatisfiable}, resp.StatusCode,
		"the rotten holder refuses its chunk")
	l, ok := liar.store.ISO(sha)
	require.True(t, ok)
	require.False(t, l.Complete(), "the rotten holder no longer advertises a complete ISO")
	require.NotEmpty(t, l.Verifier().Damaged())
}

// A holder that dies in the middle of a transfer is replaced by another holder.
func TestPeerDyingMidTransferIsReplaced(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, 6<<20)
	o := newOrigin(t, data)
	var served atomic.Int64
	var armed atomic.Bool
	reached, dead := make(chan struct{}), make(chan struct{})
	var once sync.Once
	dying := startNode(t, "dying", nil, nodeConfig{wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !armed.Load() {
				h.ServeHTTP(w, r)
				return
			}
			h.ServeHTTP(&stallWriter{ResponseWriter: w, served: &served, after: 1 << 20, reached: reached, once: &once, dead: dead}, r)
		})
	}})
	_, _, err := dying.fetch(t.Context(), sha, o.url())
	require.NoError(t, err)
	other := startNode(t, "other", []string{dying.gossip.Addr()}, nodeConfig{})
	waitFor(t, other.dir, "the ISO to be advertised", func() bool { return len(other.dir.ISOHolders(sha)) == 1 })
	_, _, err = other.fetch(t.Context(), sha, "")
	require.NoError(t, err)

	armed.Store(true)
	late := startNode(t, "late", []string{other.gossip.Addr()}, nodeConfig{})
	waitFor(t, late.dir, "two holders", func() bool { return len(late.dir.ISOHolders(sha)) == 2 })
	go func() {
		<-reached
		close(dead)
		dying.stop()
	}()
	_, p, err := late.fetch(t.Context(), sha, "")
	require.NoError(t, err)
	late.requireISO(t, data)
	require.GreaterOrEqual(t, served.Load(), int64(1<<20), "the dying peer served part of the ISO first")
	require.EqualValues(t, len(data), p.FromPeers)
}

// stallWriter lets a handler send `after` bytes, then blocks writes until dead is closed.
type stallWriter struct {
	http.ResponseWriter
	served  *atomic.Int64
	after   int64
	reached chan struct{}
	once    *sync.Once
	dead    chan struct{}
}

func (s *stallWriter) Write(p []byte) (int, error) {
	if s.served.Load() >= s.after {
		s.once.Do(func() { close(s.reached) })
		<-s.dead
		return 0, http.ErrHandlerTimeout
	}
	n, err := s.ResponseWriter.Write(p)
	s.served.Add(int64(n))
	return n, err
}
