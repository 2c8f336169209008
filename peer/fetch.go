package peer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/upgrade-repo/upgrade-repo/redact"
)

// originSource names the origin URL among the sources of a chunk.
const originSource = ""

// Fetcher fills ISOs from peers and the origin URL, chunk by chunk, verified. Safe for concurrent
// use; each Fetch runs on its own.
type Fetcher struct {
	log     *slog.Logger
	dir     *Directory
	members Membership
	store   *Store
	o       fetchOptions
}

type fetchOptions struct {
	client     *http.Client
	token      string
	metrics    *Metrics
	chunkSize  int64
	parallel   int
	originPar  int
	hedgeAfter time.Duration
	stallAfter time.Duration
	avoidFor   time.Duration
	settle     time.Duration
	idle       time.Duration
	tick       time.Duration
	attempts   int
	initial    time.Duration
	maxWait    time.Duration
	every      time.Duration
}

// FetchOption configures a Fetcher.
type FetchOption func(*fetchOptions)

// WithHTTPClient sets the client for peers and the origin (default: a client with no overall
// timeout; stalls are caught by the hedging and stall timers).
func WithHTTPClient(c *http.Client) FetchOption { return func(o *fetchOptions) { o.client = c } }

// WithToken sets the bearer token sent to peers (never to the origin) to prove membership of the
// ring; see Token.
func WithToken(token string) FetchOption { return func(o *fetchOptions) { o.token = token } }

// authorize adds the ring's token to a request for a peer.
func (f *Fetcher) authorize(req *http.Request) {
	if f.o.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.o.token)
	}
}

// WithMetrics records bytes fetched and verification failures.
func WithMetrics(m *Metrics) FetchOption { return func(o *fetchOptions) { o.metrics = m } }

// WithChunkSize sets the chunk size used when no peer advertises one (default DefaultChunkSize).
func WithChunkSize(n int64) FetchOption { return func(o *fetchOptions) { o.chunkSize = n } }

// WithParallel sets how many chunks are fetched from peers at once (default 4).
func WithParallel(n int) FetchOption { return func(o *fetchOptions) { o.parallel = max(1, n) } }

// WithOriginParallel sets how many chunks are fetched from the origin at once (default 2).
func WithOriginParallel(n int) FetchOption {
	return func(o *fetchOptions) { o.originPar = max(1, n) }
}

// WithHedgeAfter sets after how long a chunk still in flight is asked from a second source too
// (default 5s).
func WithHedgeAfter(d time.Duration) FetchOption { return func(o *fetchOptions) { o.hedgeAfter = d } }

// WithStallAfter sets how long a node waits for the owner of a chunk to fetch it from the origin
// before fetching it itself (default 10s). The owner is deemed stalled only when neither the
// directory nor the owner's own list of chunks, asked directly once the directory has been quiet
// that long, shows a new chunk within it.
func WithStallAfter(d time.Duration) FetchOption { return func(o *fetchOptions) { o.stallAfter = d } }

// WithAvoidFor sets how long a peer that sent bad bytes or failed is avoided (default 1m; a peer
// that failed without sending bad bytes is avoided a tenth of that).
func WithAvoidFor(d time.Duration) FetchOption { return func(o *fetchOptions) { o.avoidFor = d } }

// WithSettle sets how long a fetch waits at most, before it asks the origin for anything, for the
// nodes starting at the same time to learn of each other (default 3s). The wait ends after a
// third of it when every live member advertises the ISO and the membership did not change.
func WithSettle(d time.Duration) FetchOption { return func(o *fetchOptions) { o.settle = d } }

// WithIdleTimeout sets how long a chunk's response may go without a byte before it is abandoned
// and the chunk asked again (default 30s): an origin that stalls without closing the connection
// would otherwise hold its chunk for ever, as no peer hedges for it.
func WithIdleTimeout(d time.Duration) FetchOption {
	return func(o *fetchOptions) {
		if d <= 0 {
			d = time.Duration(math.MaxInt64) // no limit
		}
		o.idle = d
	}
}

// WithRetry sets how a failing origin is retried: after a failed request no other is made for a
// wait that starts at initial (default 1s) and doubles up to max (default 30s); a chunk that comes
// starts it over. Once attempts failures in a row (default 10; 0 means no limit) brought nothing,
// or once the origin refuses outright (ErrOriginRefused), Fetch gives up, unless peers still hold
// chunks it lacks. With the defaults, a dead origin is given up after about two and a half
// minutes; an origin that cuts every connection is followed to the end, as every request brings
// bytes.
func WithRetry(attempts int, initial, max time.Duration) FetchOption {
	return func(o *fetchOptions) {
		o.attempts, o.initial, o.maxWait = max0(attempts), initial, max
	}
}

func max0(n int) int { return max(n, 0) }

// WithProgressInterval sets how often the progress of a download is logged (default 5s).
func WithProgressInterval(d time.Duration) FetchOption { return func(o *fetchOptions) { o.every = d } }

// errIdle is the cause of a chunk request abandoned for want of bytes.
var errIdle = errors.New("no byte received")

// idleTimer cancels a request once it has gone d without a byte; idleBody restarts it.
type idleTimer struct {
	t *time.Timer
	d time.Duration
}

func newIdleTimer(d time.Duration, cancel context.CancelCauseFunc) idleTimer {
	return idleTimer{t: time.AfterFunc(d, func() { cancel(errIdle) }), d: d}
}

// Stop stops the timer.
func (i idleTimer) Stop() { i.t.Stop() }

// idleCause names the idle timeout as the cause of err when it cancelled ctx.
func idleCause(ctx context.Context, d time.Duration, err error) error {
	if errors.Is(context.Cause(ctx), errIdle) {
		return fmt.Errorf("%w for %s", errIdle, d)
	}
	return err
}

// idleBody restarts its request's idle timer at every read that brings bytes.
type idleBody struct {
	io.Reader
	t *time.Timer
	d time.Duration
}

func (b idleBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if n > 0 {
		b.t.Reset(b.d)
	}
	return n, err
}

// NewFetcher returns a fetcher that finds holders in dir, their addresses in members, and stores
// what it fetches in store.
func NewFetcher(log *slog.Logger, dir *Directory, members Membership, store *Store, opts ...FetchOption) (*Fetcher, error) {
	if dir == nil || members == nil || store == nil {
		return nil, errors.New("new fetcher: directory, membership and store are required")
	}
	o := fetchOptions{client: &http.Client{}, chunkSize: DefaultChunkSize, parallel: 4, originPar: 2,
		hedgeAfter: 5 * time.Second, stallAfter: 10 * time.Second, avoidFor: time.Minute,
		settle: 3 * time.Second, idle: 30 * time.Second, tick: 200 * time.Millisecond,
		attempts: 10, initial: time.Second, maxWait: 30 * time.Second, every: 5 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	o.initial = max(o.initial, time.Millisecond)
	o.maxWait = max(o.maxWait, o.initial)
	if o.every <= 0 {
		o.every = 5 * time.Second
	}
	return &Fetcher{log: log, dir: dir, members: members, store: store, o: o}, nil
}

// Request names an ISO to fetch.
type Request struct {
	// SHA512 is the hex sha512 of the ISO: the anchor of trust.
	SHA512 string
	// OriginURL is where the ISO comes from when no peer has it; empty means peers only.
	OriginURL string
	// Path is the final path of the verified ISO; the partial download lives beside it.
	Path string
}

// Progress is how far a fetch went.
type Progress struct {
	// Size is the ISO size in bytes (0 until known).
	Size int64 `json:"size"`
	// Held is how many bytes are held and chunk-verified.
	Held int64 `json:"held"`
	// FromPeers and FromOrigin count the bytes kept, by source, in this process.
	FromPeers  int64 `json:"fromPeers"`
	FromOrigin int64 `json:"fromOrigin"`
	// Verified is true once the sha512 of the whole ISO matched.
	Verified bool `json:"verified"`
	// OriginError is the origin's last failure while it is being retried, "" once it answers.
	OriginError string `json:"originError,omitempty"`
}

// Fetch fills the ISO into req.Path and returns it once its sha512 is verified. A verified copy
// already at req.Path is reused, without hashing it when the record kept beside it says it is
// unchanged; a copy that no longer verifies keeps the chunks that still match what was verified
// and fetches the others. A partial download left by an earlier call is resumed. On error the
// partial download stays for the next call, unless the bytes could not be made to match the
// sha512 (ErrVerification, wrapped): then it is removed. An origin that refuses (ErrOriginRefused)
// or keeps failing ends the fetch as WithRetry says.
func (f *Fetcher) Fetch(ctx context.Context, req Request, progress func(Progress)) (*LocalISO, error) {
	if _, err := ParseChecksum(req.SHA512); err != nil {
		return nil, fmt.Errorf("fetch ISO: %w", err)
	}
	if req.OriginURL != "" {
		if err := CheckURL(req.OriginURL); err != nil {
			return nil, fmt.Errorf("fetch ISO: %w", err)
		}
	}
	if l, ok := f.store.ISO(req.SHA512); ok && l.Complete() {
		return l, nil
	}
	if st, err := os.Stat(req.Path); err == nil && st.Mode().IsRegular() {
		if l := f.openCached(req); l != nil {
			return l, nil
		}
	}
	l, ok := f.store.ISO(req.SHA512)
	ranges := true
	if !ok {
		size, chunk, r, err := f.discover(ctx, req, progress)
		if err != nil {
			return nil, err
		}
		if l, err = f.store.openPartial(req.Path, req.SHA512, size, chunk); err != nil {
			return nil, err
		}
		ranges = r
		if !ranges {
			f.log.Info("the origin does not serve ranges: reading the ISO from it whole, in order", "url", redact.URL(req.OriginURL))
		}
	}
	r := &run{f: f, req: req, iso: l, n: numChunks(l.size, l.chunkSize), progress: progress,
		inflight: map[int][]*job{}, avoid: map[string]time.Time{}, weak: map[int]string{},
		load: map[string]int{}, lists: map[string]*chunkList{}, seen: map[string]*ownerSeen{},
		results: make(chan result, 64), probes: make(chan probeResult, 16), start: time.Now(), membersChanged: time.Now(),
		noRanges: !ranges, originWait: f.o.initial, lastLog: time.Now(), lastHeld: l.HeldBytes()}
	return l, r.run(ctx)
}

// openCached publishes the copy at req.Path, or returns nil when it does not verify: it is then
// turned into a partial download that keeps its intact chunks, or removed when no record tells
// which they are (a copy that can be neither is left, and replaced once fetched).
func (f *Fetcher) openCached(req Request) *LocalISO {
	l, reused, err := f.store.openCached(req.Path, req.SHA512, f.chunkSizeFor(req.SHA512))
	if err == nil {
		if reused {
			f.o.metrics.verified("reused")
		} else {
			f.o.metrics.verified("ok")
		}
		return l
	}
	f.o.metrics.verified("mismatch")
	kept, serr := f.store.salvage(req.Path, req.SHA512)
	switch {
	case serr != nil:
		f.log.Warn("cached ISO does not verify, fetching it again", "path", req.Path, "err", err, "salvage_err", serr)
	case kept:
		f.log.Warn("cached ISO does not verify, fetching again the chunks that changed since it was verified", "path", req.Path, "err", err)
	default:
		f.log.Warn("cached ISO does not verify, fetching it again", "path", req.Path, "err", err)
		if rerr := os.Remove(req.Path); rerr != nil {
			f.log.Warn("remove unverified ISO", "path", req.Path, "err", rerr)
		}
		_ = os.Remove(req.Path + ".json")
	}
	return nil
}

func (f *Fetcher) chunkSizeFor(sha string) int64 {
	for _, h := range f.dir.ISOHolders(sha) {
		return h.ISO.ChunkSize
	}
	return f.o.chunkSize
}

// discover learns the ISO's size, and whether the origin serves ranges: from the origin when it
// answers, else from what peers advertise (a wrong size from a peer only fails the final sha512).
// A failing origin is retried as WithRetry says, as long as no peer holds the ISO.
func (f *Fetcher) discover(ctx context.Context, req Request, progress func(Progress)) (size, chunk int64, ranges bool, err error) {
	wait := f.o.initial
	for attempt := 1; ; attempt++ {
		chunk := f.chunkSizeFor(req.SHA512)
		var originErr error
		if req.OriginURL != "" {
			info, err := f.probeOrigin(ctx, req.OriginURL)
			if err == nil {
				return info.size, chunk, info.ranges, nil
			}
			originErr = err
		}
		for _, h := range f.dir.ISOHolders(req.SHA512) {
			return h.ISO.Size, h.ISO.ChunkSize, true, nil
		}
		if originErr == nil {
			return 0, 0, false, fmt.Errorf("learn the ISO size of %.16s: no peer holds it and no origin URL is set: %w", req.SHA512, ErrNotFound)
		}
		if ctx.Err() != nil {
			return 0, 0, false, fmt.Errorf("fetch ISO %.16s: %w", req.SHA512, ctx.Err())
		}
		if errors.Is(originErr, ErrOriginRefused) || f.o.attempts > 0 && attempt >= f.o.attempts {
			return 0, 0, false, fmt.Errorf("learn the ISO size: no peer holds it and the origin failed %d times in a row: %w", attempt, originErr)
		}
		f.o.metrics.retried()
		f.log.Warn("the origin failed, retrying", "attempt", attempt, "of", f.o.attempts, "in", wait, "err", originErr)
		if progress != nil {
			progress(Progress{OriginError: originErr.Error()})
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, 0, false, fmt.Errorf("fetch ISO %.16s: %w", req.SHA512, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, f.o.maxWait)
	}
}

// run is the state of one Fetch; only its run goroutine touches the fields below mu-less.
type run struct {
	f        *Fetcher
	req      Request
	iso      *LocalISO
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

	noRanges       bool          // the origin answers with the whole ISO: it is read in order
	originWait     time.Duration // the wait after the origin's next failure
	originAt       time.Time     // no request to the origin starts before
	originFails    int           // failures of the origin in a row
	originFailedAt time.Time     // when the origin failed last
	originErr      error         // its last failure, nil once it answers
	originRefused  bool          // the origin refused for good (ErrOriginRefused)
	lastLog        time.Time     // when progress was logged last
	lastHeld       int64         // the bytes held then
	fatal          error         // a failure of this node that ends the fetch (a chunk that cannot be stored)

	listMu sync.Mutex
	lists  map[string]*chunkList
	bufs   sync.Pool
}

// ownerSeen is the progress of a member still downloading, as seen by this node: from the
// directory, whose view lags behind when many members download at once, and from the member's own
// answers to a probe of its chunk list.
type ownerSeen struct {
	gossip  int       // chunks the directory showed last
	held    int       // the most chunks seen held, by the directory or the member's answer
	changed time.Time // when progress was seen last
	probed  time.Time // when the member was probed last
	probing bool
	quiet   bool   // a probe found no progress since changed, or got no answer
	chunks  Bitmap // the chunks the member's last answer listed
}

// probeResult is a member's answer to a probe of its chunk list.
type probeResult struct {
	member string
	seen   *ownerSeen
	list   ChunkList
	err    error
}

type chunkList struct {
	mu      sync.Mutex
	fetched time.Time
	digests []string
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
	sum  [sha256.Size]byte
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
	go r.hashInOrder(ctx, kick, hashed)
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
			if errors.Is(err, ErrVerification) {
				r.f.o.metrics.verified("mismatch")
			}
			refetch, err := r.repair(ctx, err)
			if err != nil {
				return err
			}
			if !refetch {
				return r.complete()
			}
			// Bad chunks were dropped: they are fetched again, and the file hashed again.
			hashed = make(chan error, 1)
			go r.hashInOrder(ctx, kick, hashed)
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
	r.f.log.Info("download progress", "sha512", r.req.SHA512[:16], "held", held, "size", r.iso.size,
		"from_peers", r.fromPeers, "from_origin", r.fromOrigin, "bytes_per_second", int64(rate))
}

// originFailed records a failed request to the origin: it is not asked again before a wait that
// doubles with each failure in a row, and not at all once it refused for good. Requests that
// started before the last failure fail for the same reason and do not count again.
func (r *run) originFailed(j *job, err error) {
	if errors.Is(err, errNoRanges) {
		if !r.noRanges {
			r.noRanges = true
			r.f.log.Info("the origin does not serve ranges: reading the ISO from it whole, in order", "url", redact.URL(r.req.OriginURL))
		}
		return
	}
	now := time.Now()
	if j.started.Before(r.originFailedAt) {
		return
	}
	r.originFailedAt, r.originErr = now, err
	r.originFails++
	if errors.Is(err, ErrOriginRefused) {
		r.originRefused = true
		r.f.log.Error("the origin refused the download", "err", err)
		return
	}
	r.f.o.metrics.retried()
	r.f.log.Warn("fetch from the origin failed, retrying", "attempt", r.originFails, "of", r.f.o.attempts, "in", r.originWait, "err", err)
	r.originAt = now.Add(r.originWait)
	r.originWait = min(2*r.originWait, r.f.o.maxWait)
}

// originAnswered starts the count of failures and the wait over.
func (r *run) originAnswered() {
	r.originFails, r.originErr, r.originWait = 0, nil, r.f.o.initial
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
		if !live[h.Member] || h.ISO.Size != r.iso.size || h.ISO.ChunkSize != r.iso.chunkSize {
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
			r.req.SHA512, held, r.iso.size, r.originErr)
	}
	return fmt.Errorf("fetch ISO %.16s: %d of %d bytes held (kept for the next attempt), no peer holds the rest, and the origin failed %d times in a row: %w",
		r.req.SHA512, held, r.iso.size, r.originFails, r.originErr)
}

// complete moves the verified ISO into place.
func (r *run) complete() error {
	r.f.o.metrics.verified("ok")
	if err := r.iso.finish(r.req.Path); err != nil {
		return err
	}
	r.report()
	r.f.log.Info("ISO fetched and verified", "sha512", r.req.SHA512[:16], "bytes", r.iso.size,
		"from_peers", r.fromPeers, "from_origin", r.fromOrigin, "unvouched_chunks", len(r.weak),
		"seconds", time.Since(r.start).Seconds())
	return nil
}

func (r *run) report() {
	if r.progress == nil {
		return
	}
	p := Progress{Size: r.iso.size, Held: r.iso.HeldBytes(), FromPeers: r.fromPeers,
		FromOrigin: r.fromOrigin, Verified: r.iso.Complete()}
	if r.originErr != nil {
		p.OriginError = r.originErr.Error()
	}
	r.progress(p)
}

// hashInOrder hashes the file chunk by chunk as the contiguous prefix of held chunks grows, so
// that the sha512 is known as soon as the last chunk lands. It sends nil on hashed when the sum
// matches, ErrVerification when it does not, and stops early when ctx ends.
func (r *run) hashInOrder(ctx context.Context, kick <-chan struct{}, hashed chan<- error) {
	h := sha512.New()
	buf := make([]byte, r.iso.chunkSize)
	for c := 0; c < r.n; {
		if !r.iso.Has(c) {
			select {
			case <-ctx.Done():
				return
			case <-kick:
			case <-time.After(r.f.o.tick):
			}
			continue
		}
		m := r.iso.chunkLen(c)
		if _, err := r.iso.f.ReadAt(buf[:m], int64(c)*r.iso.chunkSize); err != nil {
			hashed <- fmt.Errorf("read back chunk %d: %w", c, err)
			return
		}
		h.Write(buf[:m])
		c++
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != r.req.SHA512 {
		hashed <- fmt.Errorf("sha512 is %s, want %s: %w", got, r.req.SHA512, ErrVerification)
		return
	}
	hashed <- nil
}

// participants returns the live members taking part in this ISO (advertising it) and self.
func (r *run) participants(holders []Holding, addrs map[string]string) []string {
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
	var holders []Holding
	for _, h := range all {
		if _, live := addrs[h.Member]; !live || h.ISO.Size != r.iso.size || h.ISO.ChunkSize != r.iso.chunkSize {
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
	chunks := NewBitmap(r.n)
	for c, d := range p.list.Digests {
		if p.list.Complete || d != "" {
			chunks.Set(c)
		}
	}
	s.chunks = chunks
	if n := chunks.Count(); n > s.held {
		s.held, s.changed, s.quiet = n, now, false
	} else {
		s.quiet = now.Sub(s.changed) >= r.f.o.stallAfter
	}
	r.keepList(p.member, p.list.Digests)
}

// pickPeer picks the least loaded, not avoided holder of chunk c other than not.
func (r *run) pickPeer(c int, holders []Holding, not string) string {
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

// fetchChunk fetches one chunk and verifies what it can: the length always, and for a peer's
// bytes the sha256 that the other holders advertise.
func (r *run) fetchChunk(ctx context.Context, j *job) result {
	off := int64(j.chunk) * r.iso.chunkSize
	n := r.iso.chunkLen(j.chunk)
	if j.source == originSource {
		data := r.getBuf(n)
		if err := r.fetchOriginChunk(ctx, j.chunk, off, data); err != nil {
			r.putBuf(data)
			return result{err: err}
		}
		return result{data: data, sum: sha256.Sum256(data)}
	}
	url := "http://" + j.addr + "/v1/iso/" + r.req.SHA512
	w, err := r.watchedGet(ctx, url, off, n, true)
	if err != nil {
		return result{err: err}
	}
	defer w.close()
	if w.resp.StatusCode != http.StatusPartialContent {
		return result{err: fmt.Errorf("GET %s chunk %d: status %s", redact.URL(url), j.chunk, w.resp.Status)}
	}
	data := r.getBuf(n)
	if _, err := io.ReadFull(w.body, data); err != nil {
		r.putBuf(data)
		return result{err: fmt.Errorf("GET %s chunk %d: %w", redact.URL(url), j.chunk, w.cause(err))}
	}
	sum := sha256.Sum256(data)
	want, vouched := r.vouch(ctx, j.chunk, j.source)
	if !vouched {
		return result{data: data, sum: sum, weak: true}
	}
	if !bytes.Equal(want, sum[:]) {
		r.putBuf(data)
		return result{bad: true, err: fmt.Errorf("chunk %d from %s: sha256 %x, other holders agree on %x: %w", j.chunk, j.source, sum, want, ErrVerification)}
	}
	return result{data: data, sum: sum}
}

// maxUnknownVoters bounds how many members whose inventory is not known yet are asked to vouch.
const maxUnknownVoters = 8

// vouch returns the sha256 of chunk c that a strict majority of the holders other than source
// advertise, refreshing their lists when they do not cover c yet. The holders are those the
// directory knows of, and the live members whose inventory it has not received yet: a node that
// just joined through one seed knows only the seed's inventory until gossip brings the others',
// and their chunk lists answer at once.
func (r *run) vouch(ctx context.Context, c int, source string) ([]byte, bool) {
	addrs := map[string]string{}
	for _, m := range r.f.members.Members() {
		if m.Name != r.f.dir.Self() && m.Name != source && m.Addr != "" {
			addrs[m.Name] = m.Addr
		}
	}
	ask := map[string]bool{}
	for _, h := range r.f.dir.ISOHolders(r.req.SHA512) {
		if _, live := addrs[h.Member]; live && h.ISO.Has(c) {
			ask[h.Member] = true
		}
	}
	unknown := 0
	for _, name := range slices.Sorted(maps.Keys(addrs)) {
		// A few suffice, and a member that has died unnoticed costs a timeout each.
		if !r.f.dir.Knows(name) && !ask[name] && unknown < maxUnknownVoters {
			ask[name] = true
			unknown++
		}
	}
	votes := map[string]int{}
	voters := 0
	for name := range ask {
		if d := r.listDigest(ctx, name, addrs[name], c); d != "" {
			votes[d]++
			voters++
		}
	}
	for d, v := range votes {
		if 2*v > voters {
			raw, err := hex.DecodeString(d)
			return raw, err == nil
		}
	}
	return nil, false
}

// listDigest returns the digest a holder advertises for chunk c. The holder's list is fetched
// again when it does not cover c yet, at most once a second; concurrent callers wait for the
// fetch in progress.
func (r *run) listDigest(ctx context.Context, member, addr string, c int) string {
	l := r.list(member)

	l.mu.Lock()
	defer l.mu.Unlock()
	if c < len(l.digests) && l.digests[c] != "" {
		return l.digests[c]
	}
	if time.Since(l.fetched) < time.Second {
		return ""
	}
	l.fetched = time.Now()
	cl, err := r.fetchList(ctx, addr, 5*time.Second)
	if err != nil {
		return ""
	}
	l.digests = cl.Digests
	return cl.Digests[c]
}

// list returns the chunk list kept for member, empty at first.
func (r *run) list(member string) *chunkList {
	r.listMu.Lock()
	defer r.listMu.Unlock()
	l := r.lists[member]
	if l == nil {
		l = &chunkList{}
		r.lists[member] = l
	}
	return l
}

// keepList keeps a member's chunk list, received in a probe, for vouching, unless a fetch of it
// is in progress.
func (r *run) keepList(member string, digests []string) {
	l := r.list(member)
	if l.mu.TryLock() {
		l.digests, l.fetched = digests, time.Now()
		l.mu.Unlock()
	}
}

// fetchList asks the member at addr for its chunk list of the ISO, within timeout.
func (r *run) fetchList(ctx context.Context, addr string, timeout time.Duration) (ChunkList, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := "http://" + addr + "/v1/iso/" + r.req.SHA512 + "/chunks"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return ChunkList{}, redact.Error(err)
	}
	r.f.authorize(req)
	resp, err := r.f.o.client.Do(req)
	if err != nil {
		return ChunkList{}, redact.Error(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ChunkList{}, fmt.Errorf("GET %s: status %s", url, resp.Status)
	}
	var cl ChunkList
	if err := json.NewDecoder(io.LimitReader(resp.Body, int64(r.n)*80+1024)).Decode(&cl); err != nil {
		return ChunkList{}, fmt.Errorf("GET %s: %w", url, err)
	}
	if len(cl.Digests) != r.n || cl.Size != r.iso.size || cl.ChunkSize != r.iso.chunkSize {
		return ChunkList{}, fmt.Errorf("GET %s: a list of %d chunks of %d bytes for %d bytes, not %d of %d for %d",
			url, len(cl.Digests), cl.ChunkSize, cl.Size, r.n, r.iso.chunkSize, r.iso.size)
	}
	return cl, nil
}

// getBuf returns a buffer of n bytes (at most a chunk) from the run's pool: chunks come and go
// by the thousand, and allocating each one would keep the garbage collector busy.
func (r *run) getBuf(n int64) []byte {
	if b, ok := r.bufs.Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, r.iso.chunkSize)
}

func (r *run) putBuf(b []byte) {
	if int64(cap(b)) == r.iso.chunkSize {
		r.bufs.Put(&b)
	}
}

func (r *run) finishJob(ctx context.Context, res result) {
	j := res.job
	if res.data != nil {
		defer r.putBuf(res.data)
	}
	if j.part {
		r.keep(j, res)
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
			r.f.o.metrics.failed("chunk")
			r.avoid[j.source] = time.Now().Add(r.f.o.avoidFor)
			r.f.log.Warn("peer sent a bad chunk, avoiding it", "peer", j.source, "chunk", j.chunk, "err", res.err)
			return
		}
		r.avoid[j.source] = time.Now().Add(r.f.o.avoidFor / 10)
		r.f.log.Debug("chunk fetch failed", "source", j.source, "chunk", j.chunk, "err", res.err)
		return
	}
	if !j.stream { // a stream's chunks came on their own
		r.keep(j, res)
	}
}

// keep stores the verified bytes of a chunk that a job fetched, unless another job stored it
// first, and cancels the other jobs fetching it.
func (r *run) keep(j *job, res result) {
	if j.source == originSource {
		r.originAnswered()
	}
	if r.iso.Has(j.chunk) {
		return
	}
	if err := r.iso.writeChunk(j.chunk, res.data, res.sum); err != nil {
		// The disk refuses (full, read-only): fetching more would only fail the same way.
		r.fatal = fmt.Errorf("fetch ISO %.16s: %w", r.req.SHA512, err)
		return
	}
	for _, x := range r.inflight[j.chunk] {
		x.cancel()
	}
	if res.weak {
		r.weak[j.chunk] = j.source
	}
	if j.source == originSource {
		r.fromOrigin += int64(len(res.data))
		r.f.o.metrics.fetched("origin", int64(len(res.data)))
	} else {
		r.fromPeers += int64(len(res.data))
		r.f.o.metrics.fetched("peer", int64(len(res.data)))
	}
}

// maxRechecks bounds how many times the unvouched chunks are checked again against the holders
// before the origin is asked for them.
const maxRechecks = 3

// repair runs when the whole ISO fails its sha512. The chunks taken from a peer without another
// holder vouching for them are first checked again against the holders known now (the directory
// may have learnt of more since): the ones found bad are dropped, their sources avoided, and
// repair returns refetch true so that they are fetched again from other sources. When that finds
// nothing, the unvouched chunks are fetched from the origin and compared; the peers whose chunks
// differ are avoided. It returns nil when the ISO then verifies.
func (r *run) repair(ctx context.Context, mismatch error) (refetch bool, err error) {
	if !errors.Is(mismatch, ErrVerification) {
		return false, fmt.Errorf("fetch ISO %.16s: %w", r.req.SHA512, mismatch)
	}
	r.f.o.metrics.failed("iso")
	if len(r.weak) > 0 && r.rechecks < maxRechecks {
		r.rechecks++
		confirmed, bad, bySource := r.recheck(ctx)
		r.f.log.Warn("ISO does not match its sha512: checked the chunks no other holder had vouched for against the holders known now",
			"unvouched", len(r.weak)+bad, "confirmed", confirmed, "bad", bad, "unconfirmed", len(r.weak)-confirmed,
			"bad_by_peer", bySource)
		if bad > 0 {
			return true, nil
		}
	}
	if len(r.weak) == 0 {
		r.resetAll()
		return false, fmt.Errorf("ISO %.16s: the bytes fetched (%d from the origin, %d from peers that other holders vouched for) do not match the checksum; the download is removed: %w",
			r.req.SHA512, r.fromOrigin, r.fromPeers, mismatch)
	}
	if r.req.OriginURL == "" {
		r.resetAll()
		return false, fmt.Errorf("ISO %.16s: %d chunks no other holder vouched for, and no origin to compare them with; the download is removed: %w",
			r.req.SHA512, len(r.weak), mismatch)
	}
	r.f.log.Warn("ISO does not match its sha512: fetching the chunks no other holder vouched for from the origin, to compare", "chunks", len(r.weak))
	var differed, matched int
	var originBytes int64
	bySource := map[string]int{}
	for c, src := range r.weak {
		res := r.fetchChunk(ctx, &job{chunk: c, source: originSource})
		if res.err != nil {
			r.f.log.Warn("repair from the origin failed", "compared", differed+matched, "of", len(r.weak)+differed+matched,
				"origin_bytes", originBytes, "chunk", c, "err", res.err)
			return false, fmt.Errorf("repair chunk %d from the origin: %w", c, res.err)
		}
		n := int64(len(res.data))
		originBytes += n
		r.f.o.metrics.fetched("origin", n)
		r.iso.mu.RLock()
		prev := r.iso.digests[c]
		r.iso.mu.RUnlock()
		if prev != res.sum {
			differed++
			bySource[src]++
			r.f.o.metrics.failed("chunk")
			r.avoid[src] = time.Now().Add(r.f.o.avoidFor)
			if err := r.iso.writeChunk(c, res.data, res.sum); err != nil {
				return false, err
			}
			// The origin's bytes are kept in place of the peer's.
			r.fromPeers -= n
			r.fromOrigin += n
		} else {
			matched++
		}
		r.putBuf(res.data)
		delete(r.weak, c)
	}
	r.f.log.Warn("compared the unvouched chunks with the origin's", "differed", differed, "matched", matched,
		"origin_bytes", originBytes, "bad_by_peer", bySource)
	r.report()
	hashed := make(chan error, 1)
	r.hashInOrder(ctx, nil, hashed)
	if err := <-hashed; err != nil {
		if errors.Is(err, ErrVerification) {
			r.f.o.metrics.verified("mismatch")
		}
		r.resetAll()
		return false, fmt.Errorf("ISO %.16s still does not match its sha512 after repair from the origin: %w", r.req.SHA512, err)
	}
	return false, nil
}

// recheck checks every unvouched chunk against what the other holders advertise now. A chunk a
// majority confirms stays unvouched (the origin is the last word if the sha512 still fails); one
// whose majority digest differs is dropped, to be fetched again, and its source avoided.
func (r *run) recheck(ctx context.Context) (confirmed, bad int, bySource map[string]int) {
	bySource = map[string]int{}
	for c, src := range r.weak {
		want, ok := r.vouch(ctx, c, src)
		if !ok {
			continue
		}
		r.iso.mu.RLock()
		have := r.iso.digests[c]
		r.iso.mu.RUnlock()
		if bytes.Equal(want, have[:]) {
			confirmed++
			continue
		}
		bad++
		bySource[src]++
		r.f.o.metrics.failed("chunk")
		r.avoid[src] = time.Now().Add(r.f.o.avoidFor)
		r.fromPeers -= r.iso.chunkLen(c)
		r.iso.dropChunk(c)
		delete(r.weak, c)
	}
	if bad > 0 {
		_ = r.iso.saveSidecar() // a restart must not take the dropped chunks for held
	}
	return confirmed, bad, bySource
}

// resetAll removes the partial download, whose bytes cannot be made to match the sha512 it is
// named by, so that the next Fetch starts over.
func (r *run) resetAll() {
	if err := r.f.store.Remove(r.req.SHA512, true); err != nil {
		r.f.log.Warn("remove the download that does not match its sha512", "err", err)
	}
}
