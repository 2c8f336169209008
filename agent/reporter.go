package agent

import (
	"context"
	"time"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/sequencer/report"
)

// StatusWriter publishes the node's RepoNode status; report.Writer is the one the agent uses.
// Write must be safe for concurrent use and return when ctx ends.
type StatusWriter interface {
	Write(ctx context.Context, st v1beta1.RepoNodeStatus) error
}

// StepReader is an optional capability of a StatusWriter: reading the node step's report that
// the RepoNode carries. A node step may reboot its node, and the agent with it; the reporter reads
// the report once before its first write, so that a restarted agent keeps it rather than writing
// it away. Step returns nil without error when the RepoNode carries none or does not exist.
type StepReader interface {
	Step(ctx context.Context) (*v1beta1.RepoNodeStep, error)
}

var (
	_ StatusWriter = (*report.Writer)(nil)
	_ StepReader   = (*report.Writer)(nil)
)

// reporter writes the board to the node's RepoNode: at once when its state changes, and every
// interval otherwise (progress and heartbeat).
//
// The node step's report (Board's Step) is written as the board holds it, and kept while the
// plans the agent follows name its plan: once they name another plan, or none, it is dropped.
type reporter struct {
	w        StatusWriter
	board    *Board
	plans    *instructions
	url      string // the node's repo base URL
	cacheDir string
	// containerdDir is a directory on the file system of containerd's root; kubeletConfig the
	// kubelet's configuration file. Either may be empty: its figures are not reported.
	containerdDir, kubeletConfig string
	interval                     time.Duration
	// look is how often the board is looked at for a change of state.
	look time.Duration
	warn func(msg string, args ...any)

	last   v1beta1.RepoNodeStatus
	lastAt time.Time
	// restored is true once the RepoNode's step report was read back (see StepReader).
	restored bool
}

// run reports until ctx ends. The first report waits for the first read of the plans, so that
// what the node reports is measured against what the plans ask.
func (r *reporter) run(ctx context.Context) {
	if _, err := r.plans.wait(ctx, func(report.Instruction) bool { return true }); err != nil {
		return
	}
	lastErr := ""
	for {
		// Taken before the report, so that an instruction changed while it is written is seen.
		changed := r.plans.changes()
		if err := r.once(ctx, time.Now()); err != nil {
			if ctx.Err() != nil {
				return
			}
			if err.Error() != lastErr {
				r.warn("write the node report", "err", err)
			}
			lastErr = err.Error()
		} else {
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
			// What the plans ask changes how the state is written (the checksum as the plan
			// writes it): the sequencer hears of it at once.
		case <-r.board.changes():
			// A change of state goes out at once; progress alone waits for the heartbeat.
		case <-time.After(r.look):
		}
	}
}

// once writes the report when its state changed since the last write, or the interval passed.
func (r *reporter) once(ctx context.Context, now time.Time) error {
	if !r.restored {
		if sr, ok := r.w.(StepReader); ok {
			step, err := sr.Step(ctx)
			if err != nil {
				return err
			}
			r.board.restoreStep(step)
		}
		r.restored = true
	}
	in, _ := r.plans.current()
	r.board.keepStepOf(in.Plan)
	st := r.board.RepoNode(r.url)
	st.ISO.Checksum = r.asPlanWrites(st.ISO.Checksum)
	st.Cache = fsUsage(r.cacheDir)
	if r.containerdDir != "" {
		c := fsUsage(r.containerdDir)
		st.Containerd = &c
	}
	st.ImageGC = readImageGC(r.kubeletConfig)
	if sameState(st, r.last) && now.Sub(r.lastAt) < r.interval {
		return nil
	}
	if err := r.w.Write(ctx, st); err != nil {
		return err
	}
	r.last, r.lastAt = st, now
	return nil
}

// asPlanWrites returns the ISO checksum sum written as the plans write it, when one of them holds
// that ISO, so that the RepoNode names the ISO in the plan's words ("sha512:HEX" or HEX). It is
// for the reader only: the sequencer compares checksums with checksum.Same, whatever the spelling.
func (r *reporter) asPlanWrites(sum string) string {
	c, err := checksum.Parse(sum)
	if err != nil {
		return sum
	}
	hex := c.Hex()
	in, _ := r.plans.current()
	for _, h := range append([]string{in.ISOChecksum}, in.Held...) {
		if x, err := checksum.Parse(h); err == nil && x.Hex() == hex {
			return h
		}
	}
	return sum
}

// sameState reports whether two reports differ at most in progress counts.
func sameState(a, b v1beta1.RepoNodeStatus) bool {
	return a.ISO.Checksum == b.ISO.Checksum && a.ISO.State == b.ISO.State && a.ISO.Message == b.ISO.Message &&
		a.Repo == b.Repo && a.Preload.State == b.Preload.State && a.Preload.Reason == b.Preload.Reason &&
		a.Preload.Message == b.Preload.Message && sameStep(a.Step, b.Step) && sameForecast(a.Forecast, b.Forecast)
}

// sameForecast reports whether two forecasts are the same measure.
func sameForecast(a, b *v1beta1.RepoNodeForecast) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ISOChecksum == b.ISOChecksum && a.Time.Equal(&b.Time)
}

// sameStep reports whether two step reports are the same report.
func sameStep(a, b *v1beta1.RepoNodeStep) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Plan == b.Plan && a.Stage == b.Stage && a.Message == b.Message && a.Time.Equal(&b.Time)
}
