package memberlist

import (
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/hashicorp/memberlist"

	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
)

// The directory at cluster scale, without processes or sockets: N members, each a real
// inventory.Directory behind this package's delegate and memberlist's own broadcast queue, exchange
// directory deltas in simulated gossip rounds shaped as memberlist's LAN defaults (every 200 ms
// each member sends one packet of queued broadcasts to each of 3 random members, each broadcast
// sent at most 4*ceil(log10(N+1)) times) and full state in simulated push/pull exchanges (every
// 30 s each member exchanges with one random member). Every member is downloading one 6 GiB ISO
// in 4 MiB chunks (a bitmap of 1,536 chunks).
//
//	go test ./peer/memberlist -run '^$' -bench DirectoryScale -benchtime 1x
//
// Reported per size:
//   - state_B: a member's full state (its inventory: the ISO's chunk bitmap), as sent in each
//     push/pull;
//   - delta_B: the delta of one chunk more, one UDP packet's payload;
//   - rounds_pushpull: push/pull rounds (30 s, which memberlist stretches beyond 32 members)
//     until one member knows every member's state when no delta arrives at all: full state
//     travels only between the two members of an exchange, so this is the slow backstop;
//   - rounds_delta: gossip rounds (200 ms) until every member knows one member's new chunk;
//   - churn_*: every member announcing a new chunk every round (a download of 20 chunks a
//     second or more) for 60 rounds (12 s, longer than the 10 s after which a fetcher deems a
//     chunk owner without news stalled), then quiet: payload bytes each member sent per round
//     (churn_B/member/round), the broadcasts waiting in a member's queue at the end
//     (churn_queue_max), how many rounds the view of 32 sampled members lags behind each other
//     member's bitmap at the end (churn_lag_mean_rounds, churn_lag_max_rounds, and the share of
//     pairs 10 s or more behind, churn_lag_over_10s_%), and the rounds
//     after the churn until those members know every member's last bitmap (churn_settle_rounds);
//   - dir_KiB/member: the memory of one member's directory of all N members' ISO bitmaps.
func BenchmarkDirectoryScale(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			for range b.N {
				directoryScale(b, n)
			}
		})
	}
}

const (
	simChunks     = 1536 // 6 GiB in 4 MiB chunks
	simChunkSize  = 4 << 20
	simGossipTo   = 3
	simPacket     = 1400 - 2 - 29 // memberlist's UDP buffer less the compound header and encryption
	simChurnTurns = 60
	// simStallRounds is the fetcher's 10 s without news of an owner's progress, in gossip rounds.
	simStallRounds = 50
)

type simMember struct {
	node *Node
	iso  inventory.ISO
	next int // the next chunk to take
}

func newSim(n int, rng *rand.Rand) ([]*simMember, string) {
	sum := sha512.Sum512([]byte("release"))
	sha := hex.EncodeToString(sum[:])
	members := make([]*simMember, n)
	numNodes := func() int { return n }
	for i := range members {
		name := fmt.Sprintf("node-%04d", i)
		dir := inventory.NewDirectory(name)
		node := &Node{log: slog.New(slog.DiscardHandler), dir: dir, members: map[string]peer.Member{}}
		node.queue = &memberlist.TransmitLimitedQueue{RetransmitMult: 4, NumNodes: numNodes}
		m := &simMember{node: node, iso: inventory.ISO{SHA512: sha, Size: simChunks * simChunkSize,
			ChunkSize: simChunkSize, Chunks: inventory.NewBitmap(simChunks)}, next: rng.IntN(simChunks)}
		members[i] = m
	}
	return members, sha
}

// take publishes one chunk more and queues the delta, as Node.Run does at the end of a batch; it
// returns the size of each delta.
func (m *simMember) take() ([]int, error) {
	m.iso.Chunks.Set(m.next % simChunks)
	m.next++
	if err := m.node.dir.SetISO(m.iso); err != nil {
		return nil, err
	}
	var sizes []int
	for _, msg := range m.node.dir.TakeDeltas(maxDelta) {
		m.node.queue.QueueBroadcast(newBroadcast(msg))
		sizes = append(sizes, len(msg))
	}
	return sizes, nil
}

// gossipRound runs one gossip interval and returns the payload bytes sent.
func gossipRound(members []*simMember, rng *rand.Rand) int {
	sent := 0
	for i, m := range members {
		if m.node.queue.NumQueued() == 0 {
			continue
		}
		for range simGossipTo {
			j := rng.IntN(len(members) - 1)
			if j >= i {
				j++
			}
			for _, msg := range (*delegate)(m.node).GetBroadcasts(2, simPacket) {
				sent += len(msg)
				(*delegate)(members[j].node).NotifyMsg(msg)
			}
		}
	}
	return sent
}

// pushPullRound has every member exchange full state with one random member.
func pushPullRound(members []*simMember, rng *rand.Rand) {
	for i, m := range members {
		j := rng.IntN(len(members) - 1)
		if j >= i {
			j++
		}
		other := members[j]
		mine, theirs := (*delegate)(m.node).LocalState(false), (*delegate)(other.node).LocalState(false)
		(*delegate)(other.node).MergeRemoteState(mine, false)
		(*delegate)(m.node).MergeRemoteState(theirs, false)
	}
}

// knowsAll reports whether observer's directory has every other member's current bitmap.
func knowsAll(observer *simMember, members []*simMember, sha string) bool {
	held := map[string]inventory.Bitmap{}
	for _, h := range observer.node.dir.ISOHolders(sha) {
		held[h.Member] = h.ISO.Chunks
	}
	for _, m := range members {
		if m == observer {
			continue
		}
		if string(held[m.node.dir.Self()]) != string(m.iso.Chunks) {
			return false
		}
	}
	return true
}

func directoryScale(b *testing.B, n int) {
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	maxRounds := 40 * int(math.Ceil(math.Log2(float64(n))))

	// Full state and one delta.
	members, sha := newSim(n, rng)
	for _, m := range members {
		if _, err := m.take(); err != nil {
			b.Fatal(err)
		}
		m.node.queue.Prune(0) // lost: push/pull alone spreads the first state
	}
	one := inventory.NewDirectory("node-inventory")
	if err := one.SetISO(members[0].iso); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(one.LocalState())), "state_B")

	// Push/pull alone, from nothing known: a member learns another's inventory only in an
	// exchange with that member itself.
	rounds := 0
	for ; rounds < 20*n && !knowsAll(members[0], members, sha); rounds++ {
		pushPullRound(members, rng)
	}
	b.ReportMetric(float64(rounds), "rounds_pushpull")

	// One chunk more at one member, spread by deltas only.
	sizes, err := members[0].take()
	if err != nil || len(sizes) != 1 {
		b.Fatalf("one chunk more made deltas of %v bytes (%v)", sizes, err)
	}
	b.ReportMetric(float64(sizes[0]), "delta_B")
	rounds = 0
	for ; rounds < maxRounds && !everyoneKnows(members, members[0], sha); rounds++ {
		gossipRound(members, rng)
	}
	b.ReportMetric(float64(rounds), "rounds_delta")

	// Churn: every member announces a chunk every round.
	sent := 0
	for range simChurnTurns {
		for _, m := range members {
			if _, err := m.take(); err != nil {
				b.Fatal(err)
			}
		}
		sent += gossipRound(members, rng)
	}
	queued := 0
	for _, m := range members {
		queued = max(queued, m.node.queue.NumQueued())
	}
	// Every member took one chunk a round: the chunks an observer does not know of yet are the
	// rounds its view of that member lags behind.
	lagSum, lagMax, lagN, stale := 0, 0, 0, 0
	for range min(32, n) {
		o := members[rng.IntN(n)]
		known := map[string]int{}
		for _, h := range o.node.dir.ISOHolders(sha) {
			known[h.Member] = h.ISO.Chunks.Count()
		}
		for _, m := range members {
			if m != o {
				lag := m.iso.Chunks.Count() - known[m.node.dir.Self()]
				lagSum, lagMax, lagN = lagSum+lag, max(lagMax, lag), lagN+1
				if lag >= simStallRounds {
					stale++
				}
			}
		}
	}
	b.ReportMetric(float64(lagSum)/float64(lagN), "churn_lag_mean_rounds")
	b.ReportMetric(float64(lagMax), "churn_lag_max_rounds")
	b.ReportMetric(100*float64(stale)/float64(lagN), "churn_lag_over_10s_%")
	b.ReportMetric(float64(sent)/float64(n)/simChurnTurns, "churn_B/member/round")
	b.ReportMetric(float64(queued), "churn_queue_max")
	rounds = 0
	for ; rounds < maxRounds; rounds++ {
		if allKnow(members, sha, rng) {
			break
		}
		gossipRound(members, rng)
	}
	b.ReportMetric(float64(rounds), "churn_settle_rounds")

	// Memory of one member's directory of everyone.
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	dir := inventory.NewDirectory("observer")
	for i := range n {
		if err := dir.MergeState(renamed(b, one, fmt.Sprintf("node-%04d", i))); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/1024/float64(n), "dir_KiB/member")
	runtime.KeepAlive(dir)
}

// everyoneKnows reports whether every member knows src's current bitmap.
func everyoneKnows(members []*simMember, src *simMember, sha string) bool {
	for _, m := range members {
		if m == src {
			continue
		}
		found := false
		for _, h := range m.node.dir.ISOHolders(sha) {
			if h.Member == src.node.dir.Self() {
				found = string(h.ISO.Chunks) == string(src.iso.Chunks)
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// allKnow reports whether 32 sampled members know every member's current bitmap.
func allKnow(members []*simMember, sha string, rng *rand.Rand) bool {
	for range min(32, len(members)) {
		if !knowsAll(members[rng.IntN(len(members))], members, sha) {
			return false
		}
	}
	return true
}

// renamed returns the full state of src's inventory as published by a member named name.
func renamed(b *testing.B, src *inventory.Directory, name string) []byte {
	b.Helper()
	d := inventory.NewDirectory(name)
	inv := src.Snapshot()[src.Self()]
	for _, iso := range inv.ISOs {
		if err := d.SetISO(iso); err != nil {
			b.Fatal(err)
		}
	}
	return d.LocalState()
}
