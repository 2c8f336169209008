package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/isorepo"
	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/cache"
	"github.com/upgrade-repo/upgrade-repo/peer/fetch"
	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/release"
	"github.com/upgrade-repo/upgrade-repo/sequencer/report"
)

// wanted is an ISO the agent is to hold: a local file, or a download of url.
type wanted struct {
	file string
	url  string
	// sha512 is the digest in hex; empty for a local file given without a checksum.
	sha512 string
}

// holdGiven gets and serves the ISO named in the configuration and preloads it (once a plan lets
// this node, when following the cluster). The ISO is never dropped: the operator chose it.
func (a *Agent) holdGiven(ctx context.Context) error {
	w := wanted{file: a.cfg.ISOFile, url: a.cfg.ISOURL}
	if a.cfg.ISOChecksum != "" {
		c, _ := checksum.Parse(a.cfg.ISOChecksum) // checked by Config.Validate
		w.sha512 = c.Hex()
	}
	path, sum, err := a.acquireISO(ctx, w)
	if err != nil {
		a.board.failed(err.Error())
		return err
	}
	closer, err := a.serveISO(path, sum)
	if err != nil {
		a.board.failed(err.Error())
		return err
	}
	defer func() { _ = closer() }()
	go a.readImages(ctx, path, sum.Hex())
	if _, err := a.preloadWhenAllowed(ctx, path, sum.Hex()); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// followISOs holds, one after the other, the ISOs the UpgradePlans ask for: it waits for a plan
// to name one, gets it, serves it, preloads it when allowed, and drops it once no plan holds it.
func (a *Agent) followISOs(ctx context.Context) {
	for {
		in, err := a.plans.wait(ctx, func(in report.Instruction) bool { return in.ISOURL != "" })
		if err != nil {
			return // the agent is stopping
		}
		var msg string
		c, err := checksum.Parse(in.ISOChecksum)
		hex := c.Hex()
		if err != nil {
			msg = fmt.Sprintf("plan %s names ISO %s with an unusable checksum: %v", in.Plan, redact.URL(in.ISOURL), err)
		} else if err = fetch.CheckURL(in.ISOURL); err != nil {
			// An origin that is not http(s) would be retried for ever.
			msg = fmt.Sprintf("plan %s names an unusable ISO origin: %v", in.Plan, err)
		}
		if err != nil {
			a.log.Error("follow upgrade plan", "plan", in.Plan, "url", redact.URL(in.ISOURL), "err", err)
			a.board.plan(in.Plan, in.ISOChecksum)
			a.board.update(func(s *Status) { s.ISO, s.Error = ISOStatus{State: ISOFailed}, msg })
			if _, err := a.plans.wait(ctx, func(x report.Instruction) bool { return x.ISOChecksum != in.ISOChecksum || x.ISOURL != in.ISOURL }); err != nil {
				return // the agent is stopping
			}
			a.board.reset()
			continue
		}
		a.holdPlanned(ctx, in, hex)
		if ctx.Err() != nil {
			return
		}
	}
}

// holdPlanned gets, serves and (when allowed) preloads the ISO of in, and returns once no plan
// holds it any more, or ctx ends; then it drops the ISO from the cache unless ctx ended.
func (a *Agent) holdPlanned(ctx context.Context, in report.Instruction, hex string) {
	hctx, release := context.WithCancel(ctx)
	defer release()
	var seen planSeen
	go func() {
		// Released only on a read of the plans that no longer lists the ISO: an API server that
		// cannot be reached never makes the agent drop what a plan may still need.
		_, err := a.plans.wait(hctx, func(x report.Instruction) bool {
			seen.note(x, hex)
			return !heldBy(x, hex)
		})
		if err == nil {
			release()
		}
	}()
	a.log.Info("holding the ISO of an upgrade plan", "plan", in.Plan, "url", redact.URL(in.ISOURL), "sha512", hex)
	a.board.plan(in.Plan, in.ISOChecksum)
	path, sum, err := a.acquireISO(hctx, wanted{url: in.ISOURL, sha512: hex})
	var rel string
	if err == nil {
		closer, err := a.serveISO(path, sum)
		if err != nil {
			a.log.Error("open the ISO of an upgrade plan", "plan", in.Plan, "err", err)
			a.board.failed(err.Error())
		} else {
			go a.readImages(hctx, path, hex)
			rel, _ = a.preloadWhenAllowed(hctx, path, hex)
			<-hctx.Done()
			a.server.SetHandler(nil)
			_ = closer()
		}
	}
	<-hctx.Done()
	if ctx.Err() != nil {
		return
	}
	a.log.Info("no plan holds the ISO any more, dropping it", "plan", in.Plan, "sha512", hex)
	installed := a.installed(hex) || seen.installed.Load()
	a.unpin(ctx, rel, installed, seen.failed.Load())
	keep := a.kept()
	switch {
	case installed && len(keep) > 0:
		// A soak keeps the previous release for a rollback: its cleanup waits for the soak's
		// end (keepPrevious).
		a.log.Info("the previous release is kept for a rollback: its cleanup waits for the soak's end", "release", rel)
	case installed:
		a.clean(ctx, rel) // after the unpin: the earlier releases' images are unpinned by then
	}
	if keptISO(keep, hex) {
		// A rollback's ISO is the one a soak keeps: it stays in the cache.
		a.board.reset()
		return
	}
	a.forgetDigests(hex)
	if err := a.store.Remove(hex, true); err != nil && !errors.Is(err, peer.ErrNotFound) {
		a.log.Warn("drop the cached ISO", "sha512", hex, "err", err)
	}
	a.board.reset()
}

// heldBy reports whether a plan of in still holds the ISO with the sha512 hex.
func heldBy(in report.Instruction, hex string) bool { return listed(in.Held, hex) }

// listed reports whether checksums names the ISO with the sha512 hex.
func listed(checksums []string, hex string) bool {
	for _, h := range checksums {
		if c, err := checksum.Parse(h); err == nil && c.Hex() == hex {
			return true
		}
	}
	return false
}

// planSeen is what an agent saw of the plans of the ISO it holds: whether one installed its
// release or Failed, at any read while the ISO was held, including the read that released it.
// A plan may be gone by the time the agent drops the ISO; what it saw then tells what to do with
// the release's image pins.
type planSeen struct {
	installed, failed atomic.Bool
}

func (s *planSeen) note(in report.Instruction, hex string) {
	if listed(in.Installed, hex) {
		s.installed.Store(true)
	}
	if listed(in.Failed, hex) {
		s.failed.Store(true)
	}
}

// acquireISO gets the verified ISO: a local file, or a fetch from peers and the origin, retried
// until it succeeds or ctx ends.
func (a *Agent) acquireISO(ctx context.Context, w wanted) (string, checksum.Sum, error) {
	if w.file != "" {
		// Without a checksum, the file is hashed once, as it is published: its sha512 is taken.
		a.board.update(func(s *Status) { s.ISO.SHA512, s.ISO.State = w.sha512, ISOVerifying })
		l, err := a.store.AddComplete(w.file, w.sha512, cache.DefaultChunkSize)
		if err != nil {
			return "", checksum.Sum{}, err
		}
		sum := checksum.MustParse(l.SHA512())
		a.board.update(func(s *Status) {
			s.ISO.SHA512 = sum.Hex()
			s.ISO.State = ISOVerified
			s.ISO.Progress = fetch.Progress{Size: l.Size(), Held: l.Size(), Verified: true}
		})
		return w.file, sum, nil
	}
	sum, _ := checksum.Parse(w.sha512) // parsed from the plan or the configuration
	req := fetch.Request{SHA512: w.sha512, OriginURL: w.url, Path: filepath.Join(a.cfg.CacheDir, w.sha512+".iso")}
	a.board.update(func(s *Status) { s.ISO.SHA512, s.ISO.State = w.sha512, ISOFetching })
	progress := func(p fetch.Progress) {
		a.board.update(func(s *Status) {
			s.ISO.Progress = p
			if p.OriginError != "" {
				s.Error = "the origin fails, retrying: " + p.OriginError
			} else if strings.HasPrefix(s.Error, "the origin fails") {
				s.Error = ""
			}
		})
	}
	// A loop of its own, not backoff.Retry: the wait's bound depends on each failure's kind.
	retry := backoff.Policy{Initial: time.Second, Jitter: 0.2}.Start()
	for {
		l, err := a.fetch.Fetch(ctx, req, progress)
		if err == nil {
			a.board.update(func(s *Status) { s.ISO.State, s.Error = ISOVerified, "" })
			return l.Path(), sum, nil
		}
		if ctx.Err() != nil {
			return "", sum, ctx.Err()
		}
		// Bytes that do not match the checksum, or an origin that refuses, need the operator:
		// asked again soon, the origin would only send the same again.
		retry.Max = time.Minute
		if errors.Is(err, peer.ErrVerification) || errors.Is(err, fetch.ErrOriginRefused) {
			retry.Max = 10 * time.Minute
		}
		a.log.Error("fetch ISO, retrying", "err", err, "in", retry.Next())
		a.board.update(func(s *Status) { s.Error = err.Error() })
		if werr := retry.Wait(ctx); werr != nil {
			return "", sum, werr
		}
	}
}

// serveISO opens the verified ISO at path and makes the repo serve it, every byte checked against
// the chunk digests the store verified; it returns what closes it.
func (a *Agent) serveISO(path string, sum checksum.Sum) (func() error, error) {
	var v = a.verifier(sum.Hex())
	h, closer, err := isorepo.Open(path, sum, a.repoMetrics, a.log, v)
	if err != nil {
		return nil, err
	}
	a.server.SetHandler(h)
	a.board.update(func(s *Status) { s.Ready = true })
	return closer, nil
}

// preloadWhenAllowed preloads the ISO at path, at once without a cluster, else once a plan that
// holds this ISO lists the node, then keeps the release's images in the store until ctx ends
// (see preload). It returns the name the images were pinned for (empty when none) and ctx's error.
func (a *Agent) preloadWhenAllowed(ctx context.Context, path, hex string) (string, error) {
	if a.images == nil {
		return "", nil
	}
	if a.plans != nil {
		allowed := func(in report.Instruction) bool {
			c, err := checksum.Parse(in.ISOChecksum)
			return in.Preload && err == nil && c.Hex() == hex
		}
		if _, err := a.plans.wait(ctx, allowed); err != nil {
			return "", err
		}
	}
	rel := a.preload(ctx, path, hex)
	return rel, ctx.Err()
}

// preload imports the release's images from the local ISO into the image store, pinned for the
// release, then guards them until ctx ends: an image that goes missing is imported again from
// the ISO and the board says so. A failure is logged and left in the status for the sequencer:
// the repo keeps serving. It returns the name the images were pinned for.
func (a *Agent) preload(ctx context.Context, path, hex string) string {
	var rel string
	err := func() error {
		fsys, f, err := iso.OpenFile(path)
		if err != nil {
			return err
		}
		defer f.Close()
		rel = releaseName(fsys, hex)
		a.archiveLists(rel, fs.FS(fsys))
		sources := []preload.Source{preload.NewFSSource("iso", fsys)}
		// The release's digests are those readImages reads beside the preload, once.
		digests := func(ctx context.Context) ([]preload.ImageDigest, error) { return a.digests.wait(ctx, hex) }
		opts := []preload.Option{preload.WithLogger(a.log), preload.WithRetry(a.cfg.PreloadRetry, 0), preload.WithPin(rel),
			preload.WithDigests(digests)}
		p, err := preload.New(a.images, sources, append(opts, preload.WithRegisterer(prometheus.NewRegistry()))...)
		if err != nil {
			return err
		}
		a.board.preloading(p, nil)
		if _, _, err := p.Run(ctx, fs.FS(fsys)); err != nil && ctx.Err() == nil {
			a.log.Error("preload images", "err", err)
		}
		g, err := preload.NewGuard(a.images, sources, preload.GuardConfig{
			Interval: a.cfg.ImageCheckInterval, OnRestore: a.board.restored, OnPinned: a.board.pinned,
			Log: a.log, Registerer: a.guardMetrics(),
		}, opts...)
		if err != nil {
			return err
		}
		return g.Run(ctx, fs.FS(fsys))
	}()
	if err != nil && ctx.Err() == nil {
		a.log.Error("preload images", "err", err)
		a.board.preloading(nil, err)
	}
	return rel
}

// releaseName names the release of the ISO in fsys for the images' pins: its version, else a
// prefix of the ISO's checksum.
func releaseName(fsys fs.FS, hex string) string {
	var name string
	if r, err := release.LoadRelease(fsys); err == nil {
		name = r.Harvester
	}
	return claimName(name, hex)
}

// claimName is the name the release harvester of the ISO hex claims its images by: its own, or
// the ISO's when it cannot be part of a label key.
func claimName(harvester, hex string) string {
	if harvester != "" && !strings.ContainsAny(harvester, " \t\r\n\"=,") {
		return harvester
	}
	if len(hex) > 16 {
		hex = hex[:16]
	}
	return "sha512-" + hex
}

// guardMetrics returns the registerer of the guard's metrics: the agent's, once; a throwaway one
// for the guards of later ISOs (the counters of the first stay exported).
func (a *Agent) guardMetrics() prometheus.Registerer {
	if a.guardReg.CompareAndSwap(false, true) {
		return a.registry
	}
	return prometheus.NewRegistry()
}

// unpin withdraws the claims on the release's images once no plan holds its ISO: when a plan that
// installed it got that far, the release runs now and every other release's claim goes; when the
// plan Failed, its own claim goes. A plan that went away while the agent saw it neither install
// nor fail (deleted in flight, or faster than the agent read it) leaves every claim in place:
// the release may run on this node, and a later installed release withdraws them.
func (a *Agent) unpin(ctx context.Context, rel string, installed, failed bool) {
	pinner, ok := a.images.(preload.Pinner)
	if !ok || rel == "" {
		return
	}
	if !installed && !failed {
		a.log.Warn("the plan of the ISO went away before this agent saw it install its release or fail: the release's image pins stay until a later release is installed", "release", rel)
		return
	}
	drop := func(r string) bool { return r == rel }
	if installed {
		// Every other release's claim goes, but a release a soak keeps for a rollback.
		keep := a.kept()
		drop = func(r string) bool { return r != rel && !keptRelease(keep, r) }
	}
	a.forgetImages(drop)
	n, err := pinner.Unpin(ctx, drop)
	if err != nil {
		a.log.Warn("unpin images", "release", rel, "installed", installed, "err", err)
		return
	}
	a.log.Info("image pins withdrawn", "release", rel, "installed", installed, "images", n)
}
