package preload

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
)

// Watcher is an optional capability of a Store, found by type assertion: it tells of images
// removed from the store as they go, so that a Guard puts them back at once rather than at its
// next periodic check.
type Watcher interface {
	// WatchRemovals calls removed with the name of every image removed from the store, and with
	// the empty name each time the watch (re)starts: changes before that call may have been
	// missed, so the caller checks the store then. It blocks until ctx ends (returning ctx's
	// error) or the watch fails; removed is called from one goroutine and must not block long.
	WatchRemovals(ctx context.Context, removed func(name string)) error
}

// Restore is one listed image a Guard found missing from the store and imported again.
type Restore struct {
	// Image is the image's reference.
	Image string `json:"image"`
	// Source names where its archive was read from.
	Source string `json:"source"`
	// Time is when the image was present again.
	Time time.Time `json:"time"`
}

// Guard keeps a release's listed images in a Store: whenever one goes missing (the kubelet's image
// garbage collection, an operator's "crictl rmi"), or at a check its name points to another image
// than the release's, it imports again the archives that hold those images, from the same sources
// as the preload. Create it with NewGuard; Run it once.
type Guard struct {
	store     Store
	sources   []Source
	opts      []Option
	log       *slog.Logger
	interval  time.Duration
	onRestore func([]Restore)
	onPinned  func(int)
	restored  prometheus.Counter
	failed    prometheus.Counter
}

// GuardConfig is what a Guard is told besides its store and sources.
type GuardConfig struct {
	// Interval is how often the store is checked when nothing reported a removal (default 5m):
	// the safety net under a Watcher, the only check without one.
	Interval time.Duration
	// OnRestore, when set, is called after every repair with the images it put back.
	OnRestore func([]Restore)
	// OnPinned, when set and the store is a PinCounter, is called after every check with how
	// many of the listed images are pinned; it is called from Run's goroutine.
	OnPinned func(pinned int)
	// Log receives the guard's log lines; nil discards them.
	Log *slog.Logger
	// Registerer, when set, receives the guard's metrics.
	Registerer prometheus.Registerer
}

// NewGuard returns a Guard over store that repairs from sources; opts configure the Preloader of
// each repair (WithPin, WithRetry, WithConcurrency, ...), whose metrics are not registered.
func NewGuard(store Store, sources []Source, cfg GuardConfig, opts ...Option) (*Guard, error) {
	if store == nil || len(sources) == 0 {
		return nil, errors.New("preload guard: a store and at least one source are required")
	}
	g := &Guard{
		store: store, sources: sources, opts: append(slices.Clone(opts), WithRegisterer(nil)),
		log: cfg.Log, interval: cfg.Interval, onRestore: cfg.OnRestore, onPinned: cfg.OnPinned,
		restored: counter("upgrade_repo_preload_restored_images_total",
			"Listed images found missing from the image store and imported again."),
		failed: counter("upgrade_repo_preload_restore_failures_total",
			"Repairs that left listed images missing from the image store."),
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.interval <= 0 {
		g.interval = 5 * time.Minute
	}
	if err := register(cfg.Registerer, g.restored, g.failed); err != nil {
		return nil, fmt.Errorf("preload guard: register metrics: %w", err)
	}
	return g, nil
}

// Run guards the images listed by the release in meta until ctx ends, and returns ctx's error,
// or at once an error when the release's image lists cannot be read. A repair that fails is
// logged and tried again at the next removal or check.
func (g *Guard) Run(ctx context.Context, meta fs.FS) error {
	archives, err := LoadArchives(meta)
	if err != nil {
		return fmt.Errorf("preload guard: %w", err)
	}
	listed := map[string]bool{}
	var refs []string
	for _, a := range archives {
		for _, r := range a.Images {
			if !listed[r] {
				listed[r] = true
				refs = append(refs, r)
			}
		}
	}
	if len(refs) == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	if w, ok := g.store.(Watcher); ok {
		go g.watch(ctx, w, func(name string) {
			if name == "" || listed[name] {
				poke()
			}
		})
	}
	// One Preloader judges what the store holds, with the release's digests read at most once
	// for the guard's life; every repair's Preloader shares them.
	judge, err := New(g.store, g.sources, g.opts...)
	if err != nil {
		return fmt.Errorf("preload guard: %w", err)
	}
	digests := judge.releaseDigests(meta)
	tick := time.NewTicker(g.interval)
	defer tick.Stop()
	for {
		g.check(ctx, meta, refs, judge, digests)
		g.countPinned(ctx, refs)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-tick.C:
		}
	}
}

// watch runs w's watch until ctx ends, starting it again after a failure.
func (g *Guard) watch(ctx context.Context, w Watcher, removed func(string)) {
	retry := backoff.Policy{Initial: time.Second, Max: max(g.interval, time.Second), Jitter: 0.2}.Start()
	for {
		err := w.WatchRemovals(ctx, removed)
		if ctx.Err() != nil {
			return
		}
		g.log.Info("watching image removals failed, watching again", "err", err, "in", retry.Next())
		if retry.Wait(ctx) != nil {
			return
		}
	}
}

// check imports again the archives of the listed images the store lacks or holds as another image
// than the release's, as judge finds with digests.
func (g *Guard) check(ctx context.Context, meta fs.FS, refs []string, judge *Preloader, digests *lazyDigests) {
	missing, _, err := judge.check(ctx, refs, digests)
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("checking the release's images failed", "err", err)
		}
		return
	}
	if len(missing) == 0 {
		return
	}
	g.log.Warn("release images went missing, importing them again", "images", len(missing), "first", missing[0])
	p, err := New(g.store, g.sources, append(slices.Clone(g.opts), WithDigests(digests.get))...)
	if err != nil {
		g.log.Error("repair release images", "err", err)
		return
	}
	plan, st, runErr := p.Run(ctx, meta)
	if ctx.Err() != nil {
		return
	}
	if runErr != nil {
		g.failed.Inc()
		g.log.Error("repair release images", "err", runErr)
	}
	if plan == nil {
		return
	}
	// The store has the last word on what is back.
	still, _, err := judge.check(ctx, missing, digests)
	if err != nil {
		g.log.Warn("checking the repaired images failed", "err", err)
		return
	}
	now := time.Now()
	var back []Restore
	for _, ref := range without(missing, still) {
		back = append(back, Restore{Image: ref, Source: sourceOf(plan, st, ref), Time: now})
	}
	if len(back) == 0 {
		return
	}
	g.restored.Add(float64(len(back)))
	g.log.Info("release images imported again", "images", len(back), "first", back[0].Image, "source", back[0].Source)
	if g.onRestore != nil {
		g.onRestore(back)
	}
}

// countPinned tells OnPinned how many of refs the store has pinned, after a check (and its
// repair, which pins what it imports). A failure is logged and the count left as it was.
func (g *Guard) countPinned(ctx context.Context, refs []string) {
	pc, ok := g.store.(PinCounter)
	if !ok || g.onPinned == nil {
		return
	}
	n, err := pc.Pinned(ctx, refs)
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("counting the release's pinned images failed", "err", err)
		}
		return
	}
	g.onPinned(n)
}

// sourceOf names the source of the archive the plan imported ref from.
func sourceOf(plan *Plan, st Status, ref string) string {
	for i, s := range plan.Steps {
		if s.Action == ActionImport && slices.Contains(s.Missing, ref) && i < len(st.Archives) {
			return st.Archives[i].Source
		}
	}
	return ""
}
