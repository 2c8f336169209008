package fetch

import (
	"context"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/upgrade-repo/upgrade-repo/chunks"
	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/cache"
)

// run is the state of one Fetch; only its run goroutine touches the fields below mu-less.
type run struct {
	f        *Fetcher
	req      Request
	iso      *cache.LocalISO
	n        int
	progress func(Progress)
	start    time.Time

	inflight map[int][]*job
	avoid    map[string]time.Time
	weak     map[int]string // chunk → peer it came from, when no other holder vouched for it
	rechecks int            // times the weak chunks were checked again against the holders
	load     map[string]int
	seen     map[string]*ownerSeen
	results  chan result
	probes   chan probeResult
	probing  int // probes in flight

	fromPeers, fromOrigin int64
	lastMembers           int
	membersChanged        time.Time

	noRanges       bool             // the origin answers with the whole ISO: it is read in order
	originRetry    *backoff.Backoff // the waits after the origin's failures
	originAt       time.Time        // no request to the origin starts before
	originFails    int              // failures of the origin in a row
	originFailedAt time.Time        // when the origin failed last
	originErr      error            // its last failure, nil once it answers
	originRefused  bool             // the origin refused for good (ErrOriginRefused)
	lastLog        time.Time        // when progress was logged last
	lastHeld       int64            // the bytes held then
	fatal          error            // a failure of this node that ends the fetch (a chunk that cannot be stored)

	listMu sync.Mutex
	lists  map[string]*chunkList
	bufs   sync.Pool
	// order is the hash of the ISO in order running beside the run goroutine (hashInOrder);
	// nil while none does.
	order *inOrder
}

// inOrder is what the run goroutine shares with the hash of the ISO in order: the chunk the hash
// needs next, and a hand-over of that chunk's bytes as they were stored, so that the hash takes
// them from memory instead of reading them back from the file.
type inOrder struct {
	next atomic.Int64
	hand chan handed
	// fromMemory counts the chunks hashed from a hand-over.
	fromMemory atomic.Int64
}

// handed is a chunk's bytes handed to the hash in order; the hash gives the buffer back.
type handed struct {
	chunk int
	data  []byte
}

type job struct {
	chunk   int
	source  string // member name, or originSource
	addr    string
	started time.Time
	cancel  context.CancelFunc
	hedged  bool
	stream  bool // reads the whole ISO in order from an origin without ranges; chunk -1
	part    bool // a chunk the stream read: not in flight on its own
}

type result struct {
	job  *job
	data []byte
	sum  chunks.Digest
	weak bool
	err  error
	bad  bool // the bytes failed verification
}

func (r *run) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		pending := 0
		for _, js := range r.inflight {
			pending += len(js)
		}
		for pending > 0 {
			if res := <-r.results; res.job.part {
				r.putBuf(res.data)
			} else {
				pending--
			}
		}
		for range r.probing {
			<-r.probes
		}
	}()
	hashed := make(chan error, 1)
	kick := make(chan struct{}, 1)
	r.order = newInOrder()
	go r.hashInOrder(ctx, kick, hashed, r.order)
	tick := time.NewTicker(r.f.o.tick)
	defer tick.Stop()
	for {
		r.schedule(ctx)
		r.report()
		changed := r.f.dir.Changed()
		select {
		case <-ctx.Done():
			return fmt.Errorf("fetch ISO %.16s: %w", r.req.SHA512, ctx.Err())
		case res := <-r.results:
			r.finishJob(ctx, res)
			select {
			case kick <- struct{}{}:
			default:
			}
			if r.fatal != nil {
				return r.fatal
			}
			if err := r.gaveUp(); err != nil {
				return err
			}
		case p := <-r.probes:
			r.finishProbe(p)
		case err := <-hashed:
			if err == nil {
				return r.complete()
			}
			if errors.Is(err, peer.ErrVerification) {
				r.f.o.metrics.Verified(peer.VerifiedMismatch)
			}
			refetch, err := r.repair(ctx, err)
			if err != nil {
				return err
			}
			if !refetch {
				return r.complete()
			}
			// Bad chunks were dropped: they are fetched again, and the file hashed again (with a
			// hand-over of its own: one the last hash did not take may hold a dropped chunk).
			hashed = make(chan error, 1)
			r.order = newInOrder()
			go r.hashInOrder(ctx, kick, hashed, r.order)
		case <-changed:
		case <-tick.C:
			r.logProgress()
		}
	}
}

// logProgress logs how far the download is, every progress interval.
func (r *run) logProgress() {
	now := time.Now()
	if now.Sub(r.lastLog) < r.f.o.every {
		return
	}
	held := r.iso.HeldBytes()
	rate := float64(held-r.lastHeld) / now.Sub(r.lastLog).Seconds()
	r.lastLog, r.lastHeld = now, held
	r.f.log.Info("download progress", "sha512", r.req.SHA512[:16], "held", held, "size", r.iso.Size(),
		"from_peers", r.fromPeers, "from_origin", r.fromOrigin, "bytes_per_second", int64(rate))
}

// gaveUp returns the error that ends the fetch once the origin refused, or failed the number of
// times in a row WithRetry allows, while nothing is in flight and no live peer holds a chunk still
// missing; nil while there is hope.
func (r *run) gaveUp() error {
	if !r.originRefused && (r.f.o.attempts == 0 || r.originFails < r.f.o.attempts) {
		return nil
	}
	if len(r.inflight) > 0 {
		return nil
	}
	live := map[string]bool{}
	for _, m := range r.f.members.Members() {
		live[m.Name] = m.Name != r.f.dir.Self()
	}
	for _, h := range r.f.dir.ISOHolders(r.req.SHA512) {
		if !live[h.Member] || h.ISO.Size != r.iso.Size() || h.ISO.ChunkSize != r.iso.ChunkSize() {
			continue
		}
		for c := range r.n {
			if h.ISO.Has(c) && !r.iso.Has(c) {
				return nil
			}
		}
	}
	held := r.iso.HeldBytes()
	if r.originRefused {
		return fmt.Errorf("fetch ISO %.16s: %d of %d bytes held (kept for the next attempt), no peer holds the rest: %w",
			r.req.SHA512, held, r.iso.Size(), r.originErr)
	}
	return fmt.Errorf("fetch ISO %.16s: %d of %d bytes held (kept for the next attempt), no peer holds the rest, and the origin failed %d times in a row: %w",
		r.req.SHA512, held, r.iso.Size(), r.originFails, r.originErr)
}

// complete moves the verified ISO into place.
func (r *run) complete() error {
	r.f.o.metrics.Verified(peer.VerifiedOK)
	if err := r.iso.Finish(r.req.Path); err != nil {
		return err
	}
	r.report()
	r.f.log.Info("ISO fetched and verified", "sha512", r.req.SHA512[:16], "bytes", r.iso.Size(),
		"from_peers", r.fromPeers, "from_origin", r.fromOrigin, "unvouched_chunks", len(r.weak),
		"chunks_hashed_from_memory", r.order.fromMemory.Load(), "seconds", time.Since(r.start).Seconds())
	return nil
}

func (r *run) report() {
	if r.progress == nil {
		return
	}
	p := Progress{Size: r.iso.Size(), Held: r.iso.HeldBytes(), FromPeers: r.fromPeers,
		FromOrigin: r.fromOrigin, Verified: r.iso.Complete()}
	if r.originErr != nil {
		p.OriginError = r.originErr.Error()
	}
	r.progress(p)
}

func newInOrder() *inOrder { return &inOrder{hand: make(chan handed, 2)} }

// hashInOrder hashes the file chunk by chunk as the contiguous prefix of held chunks grows, so
// that the sha512 is known as soon as the last chunk lands. It sends nil on hashed when the sum
// matches, peer.ErrVerification when it does not, and stops early when ctx ends. With order, the
// chunk it waits for may be handed over as it is stored (see keep): it is hashed from memory.
// Chunks read back from the file are read one ahead of the hash (readAhead).
func (r *run) hashInOrder(ctx context.Context, kick <-chan struct{}, hashed chan<- error, order *inOrder) {
	h := sha512.New()
	ra := newReadAhead(r.iso)
	defer ra.wait()
	var hand chan handed // nil without order: never ready
	if order != nil {
		hand = order.hand
	}
	// fromHand hashes chunk c from a hand-over, when it is c's; a stale one (a chunk hashed
	// already, read back before its hand-over came) is given back.
	fromHand := func(hd handed, c int) bool {
		defer r.putBuf(hd.data)
		if hd.chunk != c {
			return false
		}
		h.Write(hd.data)
		order.fromMemory.Add(1)
		return true
	}
	for c := 0; c < r.n; {
		if order != nil {
			order.next.Store(int64(c))
		}
		if !r.iso.Has(c) {
			select {
			case <-ctx.Done():
				return
			case <-kick:
			case hd := <-hand:
				if fromHand(hd, c) {
					c++
				}
			case <-time.After(r.f.o.tick):
			}
			continue
		}
		select {
		case hd := <-hand:
			if fromHand(hd, c) {
				c++
				continue
			}
		default:
		}
		data, err := ra.read(c)
		if err != nil {
			hashed <- fmt.Errorf("read back: %w", err)
			return
		}
		if c+1 < r.n && r.iso.Has(c+1) {
			ra.start(c + 1)
		}
		h.Write(data)
		c++
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != r.req.SHA512 {
		hashed <- fmt.Errorf("sha512 is %s, want %s: %w", got, r.req.SHA512, peer.ErrVerification)
		return
	}
	hashed <- nil
}

func (r *run) startJob(ctx context.Context, c int, source, addr string) {
	jctx, cancel := context.WithCancel(ctx)
	j := &job{chunk: c, source: source, addr: addr, started: time.Now(), cancel: cancel, stream: c < 0}
	r.inflight[c] = append(r.inflight[c], j)
	r.load[source]++
	go func() {
		var res result
		if j.stream {
			res = r.stream(jctx, j)
		} else {
			res = r.fetchChunk(jctx, j)
		}
		res.job = j
		r.results <- res
	}()
}

// getBuf returns a buffer of n bytes (at most a chunk) from the run's pool: chunks come and go
// by the thousand, and allocating each one would keep the garbage collector busy.
func (r *run) getBuf(n int64) []byte {
	if b, ok := r.bufs.Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, r.iso.ChunkSize())
}

func (r *run) putBuf(b []byte) {
	if int64(cap(b)) == r.iso.ChunkSize() {
		r.bufs.Put(&b)
	}
}

func (r *run) finishJob(ctx context.Context, res result) {
	j := res.job
	handedOver := false
	if res.data != nil {
		defer func() {
			if !handedOver {
				r.putBuf(res.data)
			}
		}()
	}
	if j.part {
		handedOver = r.keep(j, res)
		return
	}
	j.cancel()
	r.load[j.source]--
	js := r.inflight[j.chunk]
	for i, x := range js {
		if x == j {
			js = append(js[:i], js[i+1:]...)
			break
		}
	}
	if len(js) == 0 {
		delete(r.inflight, j.chunk)
	} else {
		r.inflight[j.chunk] = js
	}
	if res.err != nil {
		if ctx.Err() != nil || !j.stream && r.iso.Has(j.chunk) {
			return // cancelled, or a hedge lost the race
		}
		if j.source == originSource {
			r.originFailed(j, res.err)
			return
		}
		if res.bad {
			r.f.o.metrics.Failed(peer.KindChunk)
			r.avoid[j.source] = time.Now().Add(r.f.o.avoidFor)
			r.f.log.Warn("peer sent a bad chunk, avoiding it", "peer", j.source, "chunk", j.chunk, "err", res.err)
			return
		}
		r.avoid[j.source] = time.Now().Add(r.f.o.avoidFor / 10)
		r.f.log.Debug("chunk fetch failed", "source", j.source, "chunk", j.chunk, "err", res.err)
		return
	}
	if !j.stream { // a stream's chunks came on their own
		handedOver = r.keep(j, res)
	}
}

// keep stores the verified bytes of a chunk that a job fetched, unless another job stored it
// first, and cancels the other jobs fetching it. When the hash in order waits for this chunk, the
// bytes are handed to it, and keep returns true: the buffer is the hash's to give back.
func (r *run) keep(j *job, res result) (handedOver bool) {
	if j.source == originSource {
		r.originAnswered()
	}
	if r.iso.Has(j.chunk) {
		return false
	}
	if err := r.iso.WriteChunk(j.chunk, res.data, res.sum); err != nil {
		// The disk refuses (full, read-only): fetching more would only fail the same way.
		r.fatal = fmt.Errorf("fetch ISO %.16s: %w", r.req.SHA512, err)
		return false
	}
	if o := r.order; o != nil && o.next.Load() == int64(j.chunk) {
		select {
		case o.hand <- handed{chunk: j.chunk, data: res.data}:
			handedOver = true
		default:
		}
	}
	for _, x := range r.inflight[j.chunk] {
		x.cancel()
	}
	if res.weak {
		r.weak[j.chunk] = j.source
	}
	if j.source == originSource {
		r.fromOrigin += int64(len(res.data))
		r.f.o.metrics.Fetched(peer.SourceOrigin, int64(len(res.data)))
	} else {
		r.fromPeers += int64(len(res.data))
		r.f.o.metrics.Fetched(peer.SourcePeer, int64(len(res.data)))
	}
	return handedOver
}
