package forecast

import (
	"fmt"
	"slices"
	"time"
)

// Basis says what an estimate rests on.
type Basis string

// The bases of an estimate.
const (
	// BasisRate: the bytes left at the rate measured so far in this plan.
	BasisRate Basis = "rate"
	// BasisHistory: the median of what the cluster's earlier plans took.
	BasisHistory Basis = "history"
	// BasisThisPlan: the median of the node steps this plan finished.
	BasisThisPlan Basis = "this plan"
	// BasisAssumed: neither a rate nor a history, but what is known before the first byte
	// moves (the bytes to move, the nodes to upgrade) against a stated assumption
	// (Assumptions).
	BasisAssumed Basis = "assumed"
	// BasisUnknown: nothing to go on; the phase counts for nothing in the total.
	BasisUnknown Basis = "unknown"
)

// Assumptions are the figures a phase is estimated from when this plan measured no rate for it
// and the cluster recorded no earlier plan: priors, said as such wherever the estimate is shown.
type Assumptions struct {
	// DownloadBytesPerSecond is the rate one node is assumed to download the ISO at.
	DownloadBytesPerSecond float64
	// PreloadBytesPerSecond is the rate one node is assumed to read the release's compressed
	// image archives at.
	PreloadBytesPerSecond float64
	// NodeStep is how long one node's upgrade is assumed to take, cordon to upgraded.
	NodeStep time.Duration
}

// DefaultAssumptions are the priors of a cluster's first plan. They are round figures, chosen to
// be about right rather than optimistic: a download from an origin across a WAN link (the
// acquire bench's budget is 100 MB/s, a site's link often a fifth of that); a preload that
// unpacks as it imports, on a node that runs workloads (docs/benchmarks.md measured several
// hundred MB/s on an idle machine without unpacking); a node upgrade that drains, runs its Job
// and may reboot.
var DefaultAssumptions = Assumptions{
	DownloadBytesPerSecond: 20 << 20,
	PreloadBytesPerSecond:  50 << 20,
	NodeStep:               5 * time.Minute,
}

// PastPlan is what one earlier plan of the cluster took.
type PastPlan struct {
	// Phases are the durations of its -ing phases by name.
	Phases map[string]time.Duration
	// NodeSteps are the durations of its nodes' upgrades, cordon to upgraded.
	NodeSteps []time.Duration
}

// Progress is how far a phase that moves bytes has come, or, for a phase not begun, how many
// bytes it will move.
type Progress struct {
	// DoneBytes and TotalBytes are the bytes moved and to move, summed over the nodes.
	DoneBytes, TotalBytes int64
	// Elapsed is how long the bytes took so far.
	Elapsed time.Duration
	// AssumedBytesPerSecond is the rate one node is assumed to move the bytes at, for a phase
	// with neither a measured rate nor a history; 0 leaves such a phase unknown.
	AssumedBytesPerSecond float64
	// Parallel is how many nodes move the bytes at once, for the assumed rate; below 1 is 1.
	Parallel int
}

// rate is p's measured rate in bytes a second; 0 when there is none yet.
func (p Progress) rate() float64 {
	if p.DoneBytes <= 0 || p.Elapsed <= 0 {
		return 0
	}
	return float64(p.DoneBytes) / p.Elapsed.Seconds()
}

// TimeInput is what a time estimate is made of.
type TimeInput struct {
	// Phases are the -ing phases left, in order, the current one first.
	Phases []string
	// Elapsed is the time spent in the current phase so far.
	Elapsed time.Duration
	// History are the cluster's earlier plans that ended (Succeeded), newest first.
	History []PastPlan
	// Rated maps the phases that move bytes (ISODownloading, ImagePreloading) to their
	// progress; a phase with a measured rate is estimated from it while it runs.
	Rated map[string]Progress
	// NodePhase names the phase the nodes are upgraded in (NodeUpgrading).
	NodePhase string
	// ControlPlaneLeft and OthersLeft are the nodes still to upgrade, in order: control planes
	// one at a time, the others Concurrency at a time.
	ControlPlaneLeft, OthersLeft []string
	// Concurrency is how many other nodes upgrade at once; below 1 is 1.
	Concurrency int
	// NodeSteps are the durations of the node upgrades this plan finished.
	NodeSteps []time.Duration
	// NodeElapsed is, for the nodes upgrading now, how long they have been at it.
	NodeElapsed map[string]time.Duration
	// AssumedNodeStep is how long a node's upgrade is assumed to take when neither this plan
	// nor the history has one; 0 leaves the node phase unknown then.
	AssumedNodeStep time.Duration
}

// PhaseTime is the estimate of one phase.
type PhaseTime struct {
	// Phase is its name.
	Phase string `json:"phase"`
	// Remaining is the time it still takes (its whole duration for a phase not begun).
	Remaining time.Duration `json:"remaining"`
	// Basis is what the estimate rests on.
	Basis Basis `json:"basis"`
	// Samples is how many earlier plans or node steps the estimate rests on.
	Samples int `json:"samples,omitempty"`
	// BytesLeft is, for a phase estimated from a rate (measured or assumed), the bytes it
	// still moves.
	BytesLeft int64 `json:"bytesLeft,omitempty"`
	// BytesPerSecond is that rate, summed over the nodes that move bytes at once.
	BytesPerSecond float64 `json:"bytesPerSecond,omitempty"`
	// NodeStep is, for the node phase, how long one node's upgrade is taken to last.
	NodeStep time.Duration `json:"nodeStep,omitempty"`
	// Assumption says, for a phase whose Basis is BasisAssumed, what was assumed.
	Assumption string `json:"assumption,omitempty"`
}

// NodeTime is when one node's upgrade is expected to end.
type NodeTime struct {
	// Node is its name.
	Node string `json:"node"`
	// Remaining is the time until its upgrade ends.
	Remaining time.Duration `json:"remaining"`
}

// TimeEstimate is when a plan is expected to end.
type TimeEstimate struct {
	// Remaining is the time left: the sum of the phases' estimates that rest on something.
	Remaining time.Duration `json:"remaining"`
	// Phases are the phases left, in order.
	Phases []PhaseTime `json:"phases"`
	// Nodes are the nodes left, in order; empty when a node step has nothing to go on.
	Nodes []NodeTime `json:"nodes,omitempty"`
	// First is true when the cluster recorded no earlier plan: the estimate rests on this
	// plan's own rates only, and phases without one count for nothing.
	First bool `json:"first,omitempty"`
	// Partial is true when some phase left has nothing to go on, so Remaining is a lower
	// bound.
	Partial bool `json:"partial,omitempty"`
	// Assumed is true when some phase left rests on an assumption (BasisAssumed).
	Assumed bool `json:"assumed,omitempty"`
}

// Time estimates when a plan ends: each phase left from the rate it runs at (a phase moving
// bytes, once it has moved some), else from the median of what the earlier plans' same phase
// took, else, for a phase moving a known number of bytes, from the rate assumed; the phase the
// nodes upgrade in from the median node step (this plan's finished steps first, the earlier
// plans' otherwise, the assumed step last) times the rounds of nodes left. The current phase's
// elapsed time is taken off an estimate from history, never below zero. A phase with none of
// these is unknown and counts for nothing: Partial says Remaining is then a lower bound. It is
// pure.
func Time(in TimeInput) TimeEstimate {
	est := TimeEstimate{First: len(in.History) == 0}
	var before time.Duration
	for i, ph := range in.Phases {
		current := i == 0
		var pt PhaseTime
		if ph == in.NodePhase && in.NodePhase != "" {
			var nodes []NodeTime
			pt, nodes = nodePhase(in, current)
			for _, n := range nodes {
				n.Remaining += before
				est.Nodes = append(est.Nodes, n)
			}
		} else {
			pt = phase(in, ph, current)
		}
		switch pt.Basis {
		case BasisUnknown:
			est.Partial = true
		case BasisAssumed:
			est.Assumed = true
		}
		before += pt.Remaining
		est.Phases = append(est.Phases, pt)
	}
	est.Remaining = before
	return est
}

// phase estimates the phase ph, the current one when current.
func phase(in TimeInput, ph string, current bool) PhaseTime {
	pt := PhaseTime{Phase: ph, Basis: BasisUnknown}
	p, rated := in.Rated[ph]
	left := max(p.TotalBytes-p.DoneBytes, 0)
	if r := p.rate(); rated && current && r > 0 {
		pt.Remaining, pt.Basis = bytesTime(left, r), BasisRate
		pt.BytesLeft, pt.BytesPerSecond = left, r
		return pt
	}
	var past []time.Duration
	for _, h := range in.History {
		if d, ok := h.Phases[ph]; ok {
			past = append(past, d)
		}
	}
	if len(past) > 0 {
		pt.Remaining, pt.Basis, pt.Samples = median(past), BasisHistory, len(past)
		if current {
			pt.Remaining = max(pt.Remaining-in.Elapsed, 0)
		}
		return pt
	}
	if rated && p.TotalBytes > 0 && p.AssumedBytesPerSecond > 0 {
		// Nothing moved yet and nothing recorded: the bytes known to move at the rate assumed.
		// The elapsed time is not taken off: while no byte moved, no part of them is done.
		par := max(p.Parallel, 1)
		r := p.AssumedBytesPerSecond * float64(par)
		pt.Remaining, pt.Basis = bytesTime(left, r), BasisAssumed
		pt.BytesLeft, pt.BytesPerSecond = left, r
		pt.Assumption = fmt.Sprintf("%s/s a node, %d at a time, for %s", Bytes(int64(p.AssumedBytesPerSecond)), par, Bytes(left))
	}
	return pt
}

// bytesTime is how long n bytes take at r bytes a second.
func bytesTime(n int64, r float64) time.Duration {
	return time.Duration(float64(n) / r * float64(time.Second)).Round(time.Second)
}

// nodePhase estimates the phase the nodes upgrade in and when each node left ends, counted
// from the phase's start (or from now when it runs).
func nodePhase(in TimeInput, current bool) (PhaseTime, []NodeTime) {
	pt := PhaseTime{Phase: in.NodePhase, Basis: BasisUnknown}
	steps, basis := in.NodeSteps, BasisThisPlan
	if len(steps) == 0 {
		basis = BasisHistory
		for _, h := range in.History {
			steps = append(steps, h.NodeSteps...)
		}
	}
	var step time.Duration
	switch {
	case len(steps) > 0:
		step = median(steps)
		pt.Basis, pt.Samples = basis, len(steps)
	case in.AssumedNodeStep > 0:
		step = in.AssumedNodeStep
		pt.Basis = BasisAssumed
		pt.Assumption = fmt.Sprintf("%s a node, control planes one at a time, the others %d at a time", step, max(in.Concurrency, 1))
	default:
		return pt, nil
	}
	pt.NodeStep = step
	left := func(n string) time.Duration {
		if current {
			return max(step-in.NodeElapsed[n], 0)
		}
		return step
	}
	var nodes []NodeTime
	var at time.Duration
	for _, n := range in.ControlPlaneLeft {
		at += left(n)
		nodes = append(nodes, NodeTime{Node: n, Remaining: at})
	}
	c := max(in.Concurrency, 1)
	for i := 0; i < len(in.OthersLeft); i += c {
		batch := in.OthersLeft[i:min(i+c, len(in.OthersLeft))]
		var longest time.Duration
		for _, n := range batch {
			longest = max(longest, left(n))
		}
		at += longest
		for _, n := range batch {
			nodes = append(nodes, NodeTime{Node: n, Remaining: at})
		}
	}
	pt.Remaining = at
	return pt, nodes
}

// median is the middle of ds (the lower of the two middles for an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}
