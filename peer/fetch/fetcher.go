package fetch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/chunks"
	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/cache"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
)

// Fetcher fills ISOs from peers and the origin URL, chunk by chunk, verified. Safe for concurrent
// use; each Fetch runs on its own.
type Fetcher struct {
	log     *slog.Logger
	dir     *inventory.Directory
	members peer.Membership
	store   *cache.Store
	o       fetchOptions
}

// authorize adds the ring's token to a request for a peer.
func (f *Fetcher) authorize(req *http.Request) {
	if f.o.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.o.token)
	}
}

// NewFetcher returns a fetcher that finds holders in dir, their addresses in members, and stores
// what it fetches in store.
func NewFetcher(log *slog.Logger, dir *inventory.Directory, members peer.Membership, store *cache.Store, opts ...Option) (*Fetcher, error) {
	if dir == nil || members == nil || store == nil {
		return nil, errors.New("new fetcher: directory, membership and store are required")
	}
	o := fetchOptions{client: &http.Client{}, chunkSize: cache.DefaultChunkSize, parallel: 4, originPar: 2,
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
// sha512 (peer.ErrVerification, wrapped): then it is removed. An origin that refuses (ErrOriginRefused)
// or keeps failing ends the fetch as WithRetry says.
func (f *Fetcher) Fetch(ctx context.Context, req Request, progress func(Progress)) (*cache.LocalISO, error) {
	if !checksum.IsHex(req.SHA512) {
		return nil, fmt.Errorf("fetch ISO: %q is not a sha512 in lower-case hex: %w", req.SHA512, checksum.ErrSyntax)
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
		if l, err = f.store.OpenPartial(req.Path, req.SHA512, size, chunk); err != nil {
			return nil, err
		}
		ranges = r
		if !ranges {
			f.log.Info("the origin does not serve ranges: reading the ISO from it whole, in order", "url", redact.URL(req.OriginURL))
		}
	}
	r := &run{f: f, req: req, iso: l, n: chunks.Count(l.Size(), l.ChunkSize()), progress: progress,
		inflight: map[int][]*job{}, avoid: map[string]time.Time{}, weak: map[int]string{},
		load: map[string]int{}, lists: map[string]*chunkList{}, seen: map[string]*ownerSeen{},
		results: make(chan result, 64), probes: make(chan probeResult, 16), start: time.Now(), membersChanged: time.Now(),
		noRanges: !ranges, originRetry: f.retryPolicy().Start(), lastLog: time.Now(), lastHeld: l.HeldBytes()}
	err := r.run(ctx)
	if ferr := l.Flush(); ferr != nil {
		f.log.Warn("record the chunks held: a restart will fetch the last ones again", "path", l.Path(), "err", ferr)
	}
	return l, err
}

// openCached publishes the copy at req.Path, or returns nil when it does not verify: it is then
// turned into a partial download that keeps its intact chunks, or removed when no record tells
// which they are (a copy that can be neither is left, and replaced once fetched).
func (f *Fetcher) openCached(req Request) *cache.LocalISO {
	l, reused, err := f.store.OpenCached(req.Path, req.SHA512, f.chunkSizeFor(req.SHA512))
	if err == nil {
		if reused {
			f.o.metrics.Verified(peer.VerifiedReused)
		} else {
			f.o.metrics.Verified(peer.VerifiedOK)
		}
		return l
	}
	f.o.metrics.Verified(peer.VerifiedMismatch)
	kept, serr := f.store.Salvage(req.Path, req.SHA512)
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
	// A loop of its own, not backoff.Retry: a peer that comes to hold the ISO ends the wait as
	// well as the origin's answer, and each failure is counted, logged and shown as it happens.
	retry := f.retryPolicy().Start()
	for attempt := 1; ; attempt++ {
		chunk := f.chunkSizeFor(req.SHA512)
		var originErr error
		if req.OriginURL != "" {
			info, err := f.probeOrigin(ctx, req.OriginURL)
			if err == nil {
				return info.Size, chunk, info.Ranges, nil
			}
			originErr = err
		}
		for _, h := range f.dir.ISOHolders(req.SHA512) {
			return h.ISO.Size, h.ISO.ChunkSize, true, nil
		}
		if originErr == nil {
			return 0, 0, false, fmt.Errorf("learn the ISO size of %.16s: no peer holds it and no origin URL is set: %w", req.SHA512, peer.ErrNotFound)
		}
		if ctx.Err() != nil {
			return 0, 0, false, fmt.Errorf("fetch ISO %.16s: %w", req.SHA512, ctx.Err())
		}
		if errors.Is(originErr, ErrOriginRefused) || f.o.attempts > 0 && attempt >= f.o.attempts {
			return 0, 0, false, fmt.Errorf("learn the ISO size: no peer holds it and the origin failed %d times in a row: %w", attempt, originErr)
		}
		f.o.metrics.Retried()
		f.log.Warn("the origin failed, retrying", "attempt", attempt, "of", f.o.attempts, "in", retry.Next(), "err", originErr)
		if progress != nil {
			progress(Progress{OriginError: originErr.Error()})
		}
		if err := retry.Wait(ctx); err != nil {
			return 0, 0, false, fmt.Errorf("fetch ISO %.16s: %w", req.SHA512, err)
		}
	}
}

// retryPolicy is how a failing origin is waited for, as WithRetry says; the count of attempts is
// the caller's, which says it in its error.
func (f *Fetcher) retryPolicy() backoff.Policy {
	return backoff.Policy{Initial: f.o.initial, Max: f.o.maxWait, Jitter: 0.2}
}
