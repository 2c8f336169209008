package forecast

import (
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
	// BasisUnknown: nothing to go on; the phase counts for nothing in the total.
	BasisUnknown Basis = "unknown"
)

// PastPlan is what one earlier plan of the cluster took.
type PastPlan struct {
	// Phases are the durations of its -ing phases by name.
	Phases map[string]time.Duration
	// NodeSteps are the durations of its nodes' upgrades, cordon to upgraded.
	NodeSteps []time.Duration
}

// Progress is how far a phase that moves bytes has come.
type Progress struct {
	// DoneBytes and TotalBytes are the bytes moved and to move, summed over the nodes.
	DoneBytes, TotalBytes int64
	// Elapsed is how long the bytes took so far.
	Elapsed time.Duration
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
}

// Time estimates when a plan ends: each phase left from the rate it runs at (a phase moving
// bytes, once it has moved some), or from the median of what the earlier plans' same phase took;
// the phase the nodes upgrade in from the median node step (this plan's finished steps first,
// the earlier plans' otherwise) times the rounds of nodes left. The current phase's elapsed time
// is taken off its estimate, never below zero. It is pure.
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
		if pt.Basis == BasisUnknown {
			est.Partial = true
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
	if p, ok := in.Rated[ph]; ok && current {
		if r := p.rate(); r > 0 {
			left := max(p.TotalBytes-p.DoneBytes, 0)
			pt.Remaining, pt.Basis = time.Duration(float64(left)/r*float64(time.Second)), BasisRate
			return pt
		}
	}
	var past []time.Duration
	for _, h := range in.History {
		if d, ok := h.Phases[ph]; ok {
			past = append(past, d)
		}
	}
	if len(past) == 0 {
		return pt
	}
	pt.Remaining, pt.Basis, pt.Samples = median(past), BasisHistory, len(past)
	if current {
		pt.Remaining = max(pt.Remaining-in.Elapsed, 0)
	}
	return pt
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
	if len(steps) == 0 {
		return pt, nil
	}
	step := median(steps)
	pt.Basis, pt.Samples = basis, len(steps)
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
