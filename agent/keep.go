package agent

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"time"

	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/fetch"
	"github.com/upgrade-repo/upgrade-repo/sequencer/report"
)

// Keeping the previous release for a rollback.
//
// While a plan soaks (report.Instruction.Keep), the agent keeps the previous release's ISO in its
// cache, where peers find it as any ISO (a node that lacks it gets it, peers first), and keeps
// that release's images pinned: the drop of the new release's ISO withdraws no kept release's
// pins and cleans nothing up. Once the soak ended by expiry or by the operator
// (report.Instruction.CleanFor), the cleanup that the drop left runs: the pins of every release
// but the running one are withdrawn, the earlier releases' images removed, and the kept ISOs no
// plan holds any more leave the cache. A rollback is served from the kept ISO like any plan's.

// keepRetry is how soon a kept ISO that could not be had is tried again.
const keepRetry = time.Minute

// kept returns what the plans ask the agent to keep now.
func (a *Agent) kept() []report.Kept {
	if a.plans == nil {
		return nil
	}
	in, _ := a.plans.current()
	return in.Keep
}

// keptRelease reports whether a soaking plan keeps release rel.
func keptRelease(keep []report.Kept, rel string) bool {
	return slices.ContainsFunc(keep, func(k report.Kept) bool { return k.Release == rel })
}

// keptISO reports whether a soaking plan keeps the ISO with the sha512 hex.
func keptISO(keep []report.Kept, hex string) bool {
	return slices.ContainsFunc(keep, func(k report.Kept) bool { return listed([]string{k.ISOChecksum}, hex) })
}

// keepPrevious follows what the soaking plans keep until ctx ends: it gets the kept ISOs the
// cache lacks, runs the cleanup a soak deferred once it ended, and drops the ISOs it kept once
// no plan keeps or holds them.
func (a *Agent) keepPrevious(ctx context.Context) {
	var cleaned string
	was := map[string]bool{} // the checksums kept at some point, in hex
	for {
		in, _ := a.plans.current()
		retry := false
		for _, k := range in.Keep {
			c, err := checksum.Parse(k.ISOChecksum)
			if err != nil || fetch.CheckURL(k.ISOURL) != nil {
				continue
			}
			was[c.Hex()] = true
			if _, ok := a.store.ISO(c.Hex()); ok {
				continue
			}
			req := fetch.Request{SHA512: c.Hex(), OriginURL: k.ISOURL, Path: filepath.Join(a.cfg.CacheDir, c.Hex()+".iso")}
			if _, err := a.fetch.Fetch(ctx, req, func(fetch.Progress) {}); err != nil {
				if ctx.Err() != nil {
					return
				}
				a.log.Warn("keep the previous release's ISO for a rollback", "release", k.Release, "url", redact.URL(k.ISOURL), "err", err)
				retry = true
				continue
			}
			a.log.Info("the previous release's ISO is kept for a rollback", "release", k.Release, "sha512", c.Hex())
		}
		if in.CleanFor != "" && in.CleanFor != cleaned && len(in.Keep) == 0 {
			a.log.Info("the soak ended: cleaning up the releases before the running one", "release", in.CleanFor)
			a.unpin(ctx, in.CleanFor, true, false)
			a.clean(ctx, in.CleanFor)
			cleaned = in.CleanFor
		}
		for hex := range was {
			if keptISO(in.Keep, hex) || heldBy(in, hex) {
				continue
			}
			delete(was, hex)
			if err := a.store.Remove(hex, true); err != nil && !errors.Is(err, peer.ErrNotFound) {
				a.log.Warn("drop the kept ISO", "sha512", hex, "err", err)
			}
		}
		var again <-chan time.Time
		if retry {
			again = time.After(keepRetry)
		}
		select {
		case <-ctx.Done():
			return
		case <-a.plans.changes():
		case <-again:
		}
	}
}
