package fetch

import (
	"context"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
)

// ownerSeen is the progress of a member still downloading, as seen by this node: from the
// directory, whose view lags behind when many members download at once, and from the member's own
// answers to a probe of its chunk list.
type ownerSeen struct {
	gossip  int       // chunks the directory showed last
	held    int       // the most chunks seen held, by the directory or the member's answer
	changed time.Time // when progress was seen last
	probed  time.Time // when the member was probed last
	probing bool
	quiet   bool             // a probe found no progress since changed, or got no answer
	chunks  inventory.Bitmap // the chunks the member's last answer listed
}

// probeResult is a member's answer to a probe of its chunk list.
type probeResult struct {
	member string
	seen   *ownerSeen
	list   peer.ChunkList
	err    error
}

// participants returns the live members taking part in this ISO (advertising it) and self.
func (r *run) participants(holders []inventory.Holding, addrs map[string]string) []string {
	names := []string{r.f.dir.Self()}
	for _, h := range holders {
		if _, ok := addrs[h.Member]; ok {
			names = append(names, h.Member)
		}
	}
	sort.Strings(names)
	return names
}

// owner picks, by rendezvous hashing, the participant that fetches chunk c from the origin.
func owner(c int, names []string) string {
	var best string
	var bestScore uint64
	for _, n := range names {
		if s := mix(fnvString(n) ^ uint64(c)*0x9e3779b97f4a7c15); best == "" || s > bestScore {
			best, bestScore = n, s
		}
	}
	return best
}

// mix is splitmix64's finalizer: similar names (node2, node3) must still own even shares.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func (r *run) schedule(ctx context.Context) {
	now := time.Now()
	addrs := map[string]string{}
	for _, m := range r.f.members.Members() {
		if m.Name != r.f.dir.Self() && m.Addr != "" {
			addrs[m.Name] = m.Addr
		}
	}
	all := r.f.dir.ISOHolders(r.req.SHA512)
	var holders []inventory.Holding
	for _, h := range all {
		if _, live := addrs[h.Member]; !live || h.ISO.Size != r.iso.Size() || h.ISO.ChunkSize != r.iso.ChunkSize() {
			continue
		}
		// Only members still downloading fetch from the origin for the others; a complete holder
		// that cannot give a chunk (avoided) will not fetch it either.
		if h.ISO.Complete {
			delete(r.seen, h.Member)
		} else if s, ok := r.seen[h.Member]; !ok {
			n := h.ISO.Chunks.Count()
			r.seen[h.Member] = &ownerSeen{gossip: n, held: n, changed: now}
		} else {
			if n := h.ISO.Chunks.Count(); n != s.gossip {
				s.gossip, s.held, s.changed, s.quiet = n, max(s.held, n), now, false
			}
			// What the member answered itself is newer than the directory's view: its chunks can
			// be fetched from it as they arrive.
			if len(s.chunks) == len(h.ISO.Chunks) {
				for i, b := range s.chunks {
					h.ISO.Chunks[i] |= b
				}
			}
		}
		holders = append(holders, h)
	}
	parts := r.participants(holders, addrs)
	// Peers and the origin have separate slots, so that fetching from peers never leaves the
	// origin's link idle.
	busy, originBusy := 0, 0
	for _, js := range r.inflight {
		for _, j := range js {
			if j.source == originSource {
				originBusy++
			} else {
				busy++
			}
		}
	}
	// Before asking the origin, give the nodes starting together time to see each other: wait
	// for the settle time, or until every live member takes part and the membership has been
	// stable for a third of it.
	if len(addrs) != r.lastMembers {
		r.lastMembers, r.membersChanged = len(addrs), now
	}
	settled := now.Sub(r.start) >= r.f.o.settle ||
		len(parts) == len(addrs)+1 && now.Sub(r.membersChanged) >= r.f.o.settle/3
	// Start at a different chunk on each node so that peers spread their requests. A node alone
	// starts at the first chunk: the sha512 is computed over the chunks held from the start of the
	// ISO, and a later start leaves everything after it to hash once the last chunk lands (up to
	// 1.5 s a GiB at the 700 MB/s of sha512 on the test machine) instead of while downloading.
	first := 0
	if len(addrs) > 0 {
		first = int(fnvString(r.f.dir.Self()) % uint64(r.n))
	}
	for i := 0; i < r.n && (busy < r.f.o.parallel || originBusy < r.f.o.originPar); i++ {
		c := (first + i) % r.n
		if r.iso.Has(c) || len(r.inflight[c]) > 0 {
			continue
		}
		if p := r.pickPeer(c, holders, ""); p != "" {
			if busy < r.f.o.parallel {
				r.startJob(ctx, c, p, addrs[p])
				busy++
			}
			continue
		}
		if r.req.OriginURL == "" || !settled || originBusy >= r.f.o.originPar || r.originRefused || now.Before(r.originAt) {
			continue
		}
		if r.noRanges {
			// One request reads the whole ISO, in order, whoever owns its chunks.
			if len(r.inflight[-1]) == 0 {
				r.startJob(ctx, -1, originSource, "")
			}
			originBusy = r.f.o.originPar
			continue
		}
		o := owner(c, parts)
		if o == r.f.dir.Self() || r.stalled(ctx, o, addrs[o], now) {
			r.f.log.Debug("fetch chunk from the origin", "chunk", c, "owner", o, "participants", len(parts), "members", len(addrs)+1)
			r.startJob(ctx, c, originSource, "")
			originBusy++
		}
	}
	// Hedge chunks in flight for too long with a second source.
	for c, js := range r.inflight {
		if busy+originBusy >= r.f.o.parallel+r.f.o.originPar+2 {
			break
		}
		if c < 0 || len(js) != 1 || js[0].hedged || now.Sub(js[0].started) < r.f.o.hedgeAfter {
			continue
		}
		js[0].hedged = true
		if p := r.pickPeer(c, holders, js[0].source); p != "" {
			r.startJob(ctx, c, p, addrs[p])
			busy++
		} else if r.req.OriginURL != "" && js[0].source != originSource && !r.noRanges && !r.originRefused && !now.Before(r.originAt) {
			r.startJob(ctx, c, originSource, "")
			originBusy++
		}
	}
}

func fnvString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// stalled reports whether the owner of a chunk is gone or made no progress for stallAfter. The
// directory's view of a member lags behind while many download at once, so its silence alone
// does not make a stalled owner: the owner is then asked for its chunk list (see probe), and
// deemed stalled only when it does not answer, answers with an error, or shows no new chunk.
// Until the first answer comes, the owner is given the benefit of the doubt.
func (r *run) stalled(ctx context.Context, name, addr string, now time.Time) bool {
	s, ok := r.seen[name]
	if !ok || now.Before(r.avoid[name]) {
		return true
	}
	if now.Sub(s.changed) < r.f.o.stallAfter {
		return false
	}
	if !s.probing && now.Sub(s.probed) >= r.probeEvery() {
		r.probe(ctx, name, addr, s)
	}
	return s.quiet
}

// probeEvery is the least time between two probes of one member: a quarter of stallAfter, within
// half a second and five seconds.
func (r *run) probeEvery() time.Duration {
	return min(max(r.f.o.stallAfter/4, 500*time.Millisecond), 5*time.Second)
}

// probe asks a member for its chunk list, in the background; finishProbe takes the answer.
func (r *run) probe(ctx context.Context, name, addr string, s *ownerSeen) {
	s.probing, s.probed = true, time.Now()
	r.probing++
	timeout := min(max(r.f.o.stallAfter, time.Second), 5*time.Second)
	go func() {
		list, err := r.fetchList(ctx, addr, timeout)
		r.probes <- probeResult{member: name, seen: s, list: list, err: err}
	}()
}

// finishProbe records a member's answer to a probe: progress when it lists more chunks than seen
// before, and the chunks it lists, to be fetched from it. No answer, an error, or no new chunk
// while the directory stays quiet too, and the member is stalled.
func (r *run) finishProbe(p probeResult) {
	r.probing--
	p.seen.probing = false
	if r.seen[p.member] != p.seen {
		return // the member completed, or was seen anew, meanwhile
	}
	s, now := p.seen, time.Now()
	if p.err != nil {
		r.f.log.Debug("owner did not answer its chunk list", "peer", p.member, "err", p.err)
		s.quiet = now.Sub(s.changed) >= r.f.o.stallAfter
		return
	}
	held := inventory.NewBitmap(r.n)
	for c, d := range p.list.Digests {
		if p.list.Complete || d != "" {
			held.Set(c)
		}
	}
	s.chunks = held
	if n := held.Count(); n > s.held {
		s.held, s.changed, s.quiet = n, now, false
	} else {
		s.quiet = now.Sub(s.changed) >= r.f.o.stallAfter
	}
	r.keepList(p.member, p.list.Digests)
}

// pickPeer picks the least loaded, not avoided holder of chunk c other than not.
func (r *run) pickPeer(c int, holders []inventory.Holding, not string) string {
	now := time.Now()
	best, bestLoad := "", 0
	for _, h := range holders {
		if h.Member == not || !h.ISO.Has(c) || now.Before(r.avoid[h.Member]) {
			continue
		}
		l := r.load[h.Member]*8 + rand.IntN(8)
		if best == "" || l < bestLoad {
			best, bestLoad = h.Member, l
		}
	}
	return best
}
