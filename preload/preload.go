package preload

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
)

// ErrIncomplete is returned by Run when, after the imports, some listed images are not present.
var ErrIncomplete = errors.New("listed images missing after preload")

// ArchiveError is the failure of one archive's import: which archive, from which source, and how
// far the import got.
type ArchiveError struct {
	// Archive is the archive's path in the release.
	Archive string
	// Source names the source it was read from, empty when no source could open it.
	Source string
	// Offset is how many compressed bytes were read; Size the archive's size, -1 when unknown.
	Offset, Size int64
	// Decoded is how many uncompressed bytes the store's import consumed.
	Decoded int64
	Err     error
}

func (e *ArchiveError) Error() string {
	if e.Source == "" {
		return fmt.Sprintf("archive %s: %v", e.Archive, e.Err)
	}
	return fmt.Sprintf("archive %s from %s: failed at byte %d of %d (%d bytes decompressed): %v",
		e.Archive, e.Source, e.Offset, e.Size, e.Decoded, e.Err)
}

func (e *ArchiveError) Unwrap() error { return e.Err }

// Preloader imports a release's images into a Store. It is safe to call Status while Run runs;
// Run itself must not be called concurrently on one Preloader.
type Preloader struct {
	store       Store
	sources     []Source
	log         *slog.Logger
	reg         prometheus.Registerer
	concurrency int
	decoders    int
	retry       backoff.Policy
	copyDir     string
	limit       *rate.Limiter
	pin         string
	digests     func(context.Context) ([]ImageDigest, error)
	m           *metrics

	mu     sync.Mutex
	status Status
}

// Option configures a Preloader.
type Option func(*Preloader)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(p *Preloader) { p.log = l } }

// WithRegisterer registers the preload's metrics on reg; without it they are kept but not exported.
func WithRegisterer(reg prometheus.Registerer) Option { return func(p *Preloader) { p.reg = reg } }

// WithConcurrency sets how many archives import at once (default 2, at least 1).
func WithConcurrency(n int) Option { return func(p *Preloader) { p.concurrency = max(n, 1) } }

// WithRetry sets how long transient errors (the store or a source unavailable, as while
// containerd restarts) are retried without progress before the preload gives up (default
// DefaultRetryFor), and the first wait between attempts (default 250ms when base is zero,
// doubling up to 5s). Progress (bytes read, bytes imported) starts the time over.
func WithRetry(total, base time.Duration) Option {
	return func(p *Preloader) {
		p.retry.Total, p.retry.Attempts = max(total, 0), 0
		if total <= 0 {
			p.retry.Attempts = 1 // no retry time: the first failure is the last
		}
		if base > 0 {
			p.retry.Initial = base
		}
	}
}

// DefaultRetryFor is how long transient errors are retried without progress by default: a
// containerd restart takes seconds, an upgrade that restarts the runtime under load a little more.
const DefaultRetryFor = time.Minute

// WithCopyDir also places every archive, compressed as it is, into dir once its images are
// present, for a runtime that imports that directory by itself on restart (RKE2 reads
// /var/lib/rancher/rke2/agent/images). A file already there with the same size is kept.
func WithCopyDir(dir string) Option { return func(p *Preloader) { p.copyDir = dir } }

// WithMaxBytesPerSecond caps how many bytes of uncompressed archive all imports of the
// Preloader together hand to the store per second, which bounds what they write to disk and most
// of their CPU time (decompression, hashing). Zero or less means no cap (the default).
func WithMaxBytesPerSecond(n int64) Option {
	return func(p *Preloader) {
		p.limit = nil
		if n > 0 {
			p.limit = rate.NewLimiter(rate.Limit(n), int(min(n, limitBurst)))
		}
	}
}

// limitBurst is the most bytes a capped import passes at once: one read of the store's.
const limitBurst = 1 << 20

// New returns a Preloader that imports into store, reading archives from the first of sources
// that holds each one.
func New(store Store, sources []Source, opts ...Option) (*Preloader, error) {
	if store == nil {
		return nil, errors.New("preload: no store")
	}
	if len(sources) == 0 {
		return nil, errors.New("preload: no source")
	}
	p := &Preloader{
		store:       store,
		sources:     sources,
		log:         slog.New(slog.DiscardHandler),
		concurrency: 2,
		decoders:    1,
		retry:       backoff.Policy{Total: DefaultRetryFor, Initial: 250 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2},
	}
	for _, o := range opts {
		o(p)
	}
	m, err := newMetrics(p.reg)
	if err != nil {
		return nil, fmt.Errorf("preload: register metrics: %w", err)
	}
	p.m = m
	return p, nil
}

// Status returns a snapshot of the current or last run's progress.
func (p *Preloader) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status.clone()
}

// Plan reads the release's bundle and image lists from meta and decides what Run would do,
// changing nothing. A listed image the store holds by name as another image than the release's
// (see WithDigests) is missing, and in its step's Replace.
func (p *Preloader) Plan(ctx context.Context, meta fs.FS) (*Plan, error) {
	archives, err := LoadArchives(meta)
	if err != nil {
		return nil, err
	}
	return p.plan(ctx, archives, p.releaseDigests(meta))
}

// plan is Plan over the archives read, comparing the images the store holds with digests.
func (p *Preloader) plan(ctx context.Context, archives []ArchiveImages, digests *lazyDigests) (plan *Plan, err error) {
	err = p.retryTransient(ctx, "plan", func() error {
		plan, err = makePlan(ctx, func(ctx context.Context, refs []string) ([]string, []Mismatch, error) {
			return p.check(ctx, refs, digests)
		}, archives)
		return err
	})
	return plan, err
}

// retryTransient runs f under backoff.Retry until it succeeds, fails with an error that is not
// ErrTransient, or fails transiently for longer than the retry time.
func (p *Preloader) retryTransient(ctx context.Context, what string, f func() error) error {
	return backoff.Retry(ctx, p.retry, func(ctx context.Context) error {
		err := f()
		if err == nil || !errors.Is(err, ErrTransient) || ctx.Err() != nil {
			return backoff.Permanent(err)
		}
		p.log.Info("retrying", "step", what, "err", err)
		p.m.retries.Inc()
		return err
	})
}

// Run preloads the release whose bundle and image lists are in meta: it plans, imports the
// archives the plan names (in parallel up to the concurrency limit, retrying transient errors),
// then checks every listed image. It returns the plan and the final status; the error joins
// every archive's *ArchiveError and ErrIncomplete when images are still missing.
func (p *Preloader) Run(ctx context.Context, meta fs.FS) (*Plan, Status, error) {
	p.setStatus(Status{State: StatePreloading, Reason: ReasonPlanned})
	// The release's digests are read at most once for the plan and the check after the imports.
	digests := p.releaseDigests(meta)
	archives, err := LoadArchives(meta)
	var plan *Plan
	if err == nil {
		plan, err = p.plan(ctx, archives, digests)
	}
	if err != nil {
		st := p.finish(StateFailed, ReasonMetadataFailed, err.Error())
		return nil, st, err
	}
	p.initStatus(plan)

	var (
		wg   sync.WaitGroup
		sem  = make(chan struct{}, p.concurrency)
		errs = make([]error, len(plan.Steps))
	)
	for i, s := range plan.Steps {
		if s.Action != ActionImport {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = &ArchiveError{Archive: s.Archive.Archive, Err: context.Cause(ctx)}
				p.archiveFailed(i, errs[i])
				return
			}
			defer func() { <-sem }()
			errs[i] = p.importStep(ctx, i, s)
		}()
	}
	wg.Wait()

	// Every listed image is checked again, imported or not: that is what the node reports.
	var all []string
	for _, s := range plan.Steps {
		all = append(all, s.Images...)
	}
	// The archives imported named their images, so digests are compared only when the plan
	// needed them: an image that was held as another, or a name changed since.
	if !digests.asked() {
		digests = nil
	}
	var missing []string
	if len(all) > 0 {
		err = p.retryTransient(ctx, "check present images", func() (err error) {
			missing, _, err = p.check(ctx, all, digests)
			return err
		})
		if err != nil {
			err = fmt.Errorf("check present images: %w", err)
			st := p.finish(StateFailed, ReasonImportFailed, err.Error())
			return plan, st, errors.Join(append(errs, err)...)
		}
	}
	p.recordMissing(plan, missing)
	// Every listed image present is claimed for the release, imported now or found present.
	if perr := p.pinImages(ctx, without(all, missing)); perr != nil {
		p.log.Warn("pinning the release's images failed: the kubelet may collect them", "err", perr)
	}

	if p.copyDir != "" {
		for i, s := range plan.Steps {
			if errs[i] == nil && len(s.Images) > 0 {
				if err := p.copyArchive(ctx, s); err != nil {
					errs[i] = err
				}
			}
		}
	}

	failed := errors.Join(errs...)
	switch {
	case failed != nil:
		st := p.finish(StateFailed, ReasonImportFailed, failed.Error())
		if len(missing) > 0 {
			failed = errors.Join(failed, fmt.Errorf("%w: %s", ErrIncomplete, summarize(missing, 5)))
		}
		return plan, st, failed
	case len(missing) > 0:
		err := fmt.Errorf("%w: %d of %d: %s", ErrIncomplete, len(missing), len(all), summarize(missing, 5))
		return plan, p.finish(StateFailed, ReasonImagesMissing, err.Error()), err
	}
	msg := fmt.Sprintf("all %d listed images are present", len(all))
	return plan, p.finish(StatePreloaded, ReasonAllPresent, msg), nil
}

// importStep imports one archive, retrying the whole import when the store reports a transient
// error, for as long as the retry time allows without progress. An attempt makes progress when
// the store consumed more of the archive than in any attempt before: a daemon that restarts in
// the middle of an import is waited for, one that fails at the same point again and again is not
// retried for ever. The stream itself resumes inside resumer.
func (p *Preloader) importStep(ctx context.Context, i int, s Step) error {
	log := p.log.With("archive", s.Name())
	// A loop of its own, not backoff.Retry: progress starts the streak over (Backoff.Reset).
	retry := p.retry.Start()
	var furthest int64
	for n := 1; ; n++ {
		consumed, err := p.importOnce(ctx, i, s)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrTransient) || ctx.Err() != nil {
			log.Warn("archive import failed", "err", err)
			p.archiveFailed(i, err)
			return err
		}
		if consumed > furthest {
			furthest = consumed
			retry.Reset()
		}
		log.Info("retrying archive import", "attempt", n+1, "err", err)
		p.m.retries.Inc()
		if werr := retry.Wait(ctx); werr != nil {
			err = &ArchiveError{Archive: s.Archive.Archive, Err: fmt.Errorf("%w: %w", werr, err)}
			log.Warn("archive import failed", "err", err)
			p.archiveFailed(i, err)
			return err
		}
	}
}

// countingReader counts the bytes read through it and, with a limiter, waits so that reads stay
// within its rate.
type countingReader struct {
	ctx   context.Context
	r     io.Reader
	n     int64
	limit *rate.Limiter
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.limit == nil {
		n, err := c.r.Read(p)
		c.n += int64(n)
		return n, err
	}
	// Wait for what was read, after reading it: a read may return much less than asked for, and
	// the store gets at most one read (a burst) ahead of the rate.
	if b := c.limit.Burst(); len(p) > b {
		p = p[:b]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if n > 0 {
		if werr := c.limit.WaitN(c.ctx, n); werr != nil && err == nil {
			err = werr
		}
	}
	return n, err
}

// importOnce makes one attempt at importing the archive of step s; consumed is how many
// uncompressed bytes the store read.
func (p *Preloader) importOnce(ctx context.Context, i int, s Step) (consumed int64, err error) {
	start := time.Now()
	src, rc, size, err := p.open(ctx, s.Archive.Archive)
	if err != nil {
		return 0, &ArchiveError{Archive: s.Archive.Archive, Err: err}
	}
	name := s.Name()
	p.archiveStarted(i, src.Name(), size)
	r := &resumer{
		ctx: ctx, src: src, path: s.Archive.Archive, size: size, rc: rc, retry: p.retry.Start(),
		onRead: func(n int) { p.archiveRead(i, name, n) },
		onRetry: func(err error) {
			p.m.retries.Inc()
			p.log.Info("reopening archive stream", "archive", name, "source", src.Name(), "err", err)
		},
	}
	defer r.Close()
	// One decoder goroutine per archive: it decodes into the frame's window (what the frame
	// header asks for, at most 64 MiB) and nothing more, and parallelism comes from importing
	// archives side by side. A read buffer of one zstd block keeps reads from the ISO or the
	// network large.
	dec, err := zstd.NewReader(bufio.NewReaderSize(r, 128<<10),
		zstd.WithDecoderConcurrency(p.decoders),
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(64<<20))
	if err != nil {
		return 0, &ArchiveError{Archive: s.Archive.Archive, Source: src.Name(), Size: size, Err: err}
	}
	defer dec.Close()
	tar := &countingReader{ctx: ctx, r: dec, limit: p.limit}
	names, err := p.store.Import(ctx, tar)
	if err != nil {
		return tar.n, &ArchiveError{Archive: s.Archive.Archive, Source: src.Name(), Offset: r.off, Size: r.size, Decoded: tar.n, Err: err}
	}
	p.log.Info("archive imported", "archive", name, "source", src.Name(), "images", len(names),
		"bytes", r.off, "seconds", time.Since(start).Seconds())
	p.archiveImported(i, s.Missing, names)
	// Claimed at once: the window in which a fresh image is unused and unprotected stays short.
	if perr := p.pinImages(ctx, names); perr != nil {
		p.log.Warn("pinning imported images failed, trying again after the preload", "archive", name, "err", perr)
	}
	return tar.n, nil
}

// open opens the archive from the first source that holds it.
func (p *Preloader) open(ctx context.Context, path string) (Source, io.ReadCloser, int64, error) {
	var errs []error
	for _, src := range p.sources {
		rc, size, err := src.Open(ctx, path, 0)
		if err == nil {
			return src, rc, size, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", src.Name(), err))
		if !errors.Is(err, ErrNotFound) {
			// A source that holds the archive but failed is reported; the next one may still serve.
			p.log.Warn("archive source failed", "archive", path, "source", src.Name(), "err", err)
		}
	}
	return nil, nil, 0, fmt.Errorf("no source could open it: %w", errors.Join(errs...))
}
