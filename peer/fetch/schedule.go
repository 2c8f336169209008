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

// pass is what one call of schedule saw, and the request slots taken so far.
type pass struct {
	now time.Time
	// addrs are the live members other than this node, by name: their HTTP addresses.
	addrs map[string]string
	// holders are the live members advertising this ISO (same size, same chunks), with the
	// chunks their own answers listed added to the directory's view.
	holders []inventory.Holding
	// parts are the members taking part (holders and this node), sorted: the owners of chunks.
	parts []string
	// settled is whether the origin may be asked yet (see settled).
	settled bool
	// busy and originBusy count the jobs in flight from peers and from the origin.
	busy, originBusy int
}

// schedule starts the jobs this moment allows: chunks from the peers that hold them, chunks this
// node owns (or whose owner stalled) from the origin once the nodes starting together have
// settled, and a second source for chunks in flight for too long.
func (r *run) schedule(ctx context.Context) {
	p := &pass{now: time.Now(), addrs: r.liveAddrs()}
	p.holders = r.holders(p.addrs, p.now)
	p.parts = r.participants(p.holders, p.addrs)
	p.busy, p.originBusy = r.slotsInUse()
	p.settled = r.settled(p)
	r.startChunks(ctx, p)
	r.hedge(ctx, p)
}

// liveAddrs returns the live members other than this node that have an address, by name.
func (r *run) liveAddrs() map[string]string {
	addrs := map[string]string{}
	for _, m := range r.f.members.Members() {
		if m.Name != r.f.dir.Self() && m.Addr != "" {
			addrs[m.Name] = m.Addr
		}
	}
	return addrs
}

// holders returns the live members of addrs that advertise this ISO with its size and chunk
// size, and records the progress of those still downloading (r.seen).
func (r *run) holders(addrs map[string]string, now time.Time) []inventory.Holding {
	var holders []inventory.Holding
	for _, h := range r.f.dir.ISOHolders(r.req.SHA512) {
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
	return holders
}

// slotsInUse counts the jobs in flight from peers and from the origin. Peers and the origin have
// separate slots, so that fetching from peers never leaves the origin's link idle.
func (r *run) slotsInUse() (busy, originBusy int) {
	for _, js := range r.inflight {
		for _, j := range js {
			if j.source == originSource {
				originBusy++
			} else {
				busy++
			}
		}
	}
	return busy, originBusy
}

// settled reports whether the origin may be asked: before that, the nodes starting together get
// time to see each other, for the settle time, or until every live member takes part and the
// membership has been stable for a third of it.
func (r *run) settled(p *pass) bool {
	if len(p.addrs) != r.lastMembers {
		r.lastMembers, r.membersChanged = len(p.addrs), p.now
	}
	return p.now.Sub(r.start) >= r.f.o.settle ||
		len(p.parts) == len(p.addrs)+1 && p.now.Sub(r.membersChanged) >= r.f.o.settle/3
}

// firstChunk is where this node starts looking for chunks to fetch: a different chunk on each
// node, so that peers spread their requests. A node alone starts at the first chunk: the sha512
// is computed over the chunks held from the start of the ISO, and a later start leaves everything
// after it to hash once the last chunk lands (up to 1.5 s a GiB at the 700 MB/s of sha512 on the
// test machine) instead of while downloading.
func (r *run) firstChunk(addrs map[string]string) int {
	if len(addrs) == 0 {
		return 0
	}
	return int(fnvString(r.f.dir.Self()) % uint64(r.n))
}

// startChunks starts a job for each chunk neither held nor in flight, while slots are free: from
// the least loaded peer that holds it, else from the origin when this node owns the chunk or its
// owner stalled.
func (r *run) startChunks(ctx context.Context, p *pass) {
	first := r.firstChunk(p.addrs)
	for i := 0; i < r.n && (p.busy < r.f.o.parallel || p.originBusy < r.f.o.originPar); i++ {
		c := (first + i) % r.n
		if r.iso.Has(c) || len(r.inflight[c]) > 0 {
			continue
		}
		if holder := r.pickPeer(c, p.holders, ""); holder != "" {
			if p.busy < r.f.o.parallel {
				r.startJob(ctx, c, holder, p.addrs[holder])
				p.busy++
			}
			continue
		}
		if !r.mayAskOrigin(p) {
			continue
		}
		if r.noRanges {
			// One request reads the whole ISO, in order, whoever owns its chunks.
			if len(r.inflight[-1]) == 0 {
				r.startJob(ctx, -1, originSource, "")
			}
			p.originBusy = r.f.o.originPar
			continue
		}
		o := owner(c, p.parts)
		if o == r.f.dir.Self() || r.stalled(ctx, o, p.addrs[o], p.now) {
			r.f.log.Debug("fetch chunk from the origin", "chunk", c, "owner", o, "participants", len(p.parts), "members", len(p.addrs)+1)
			r.startJob(ctx, c, originSource, "")
			p.originBusy++
		}
	}
}

// mayAskOrigin reports whether a chunk may be asked of the origin now: there is one, the nodes
// have settled, a slot is free, and it has not refused nor asked to be left alone for a while.
func (r *run) mayAskOrigin(p *pass) bool {
	return r.req.OriginURL != "" && p.settled && p.originBusy < r.f.o.originPar && !r.originRefused && !p.now.Before(r.originAt)
}

// hedge asks a second source for each chunk in flight for longer than hedgeAfter from one
// source: another peer, else the origin; two slots beyond the usual are allowed for it.
func (r *run) hedge(ctx context.Context, p *pass) {
	for c, js := range r.inflight {
		if p.busy+p.originBusy >= r.f.o.parallel+r.f.o.originPar+2 {
			break
		}
		if c < 0 || len(js) != 1 || js[0].hedged || p.now.Sub(js[0].started) < r.f.o.hedgeAfter {
			continue
		}
		js[0].hedged = true
		if holder := r.pickPeer(c, p.holders, js[0].source); holder != "" {
			r.startJob(ctx, c, holder, p.addrs[holder])
			p.busy++
		} else if r.req.OriginURL != "" && js[0].source != originSource && !r.noRanges && !r.originRefused && !p.now.Before(r.originAt) {
			r.startJob(ctx, c, originSource, "")
			p.originBusy++
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
