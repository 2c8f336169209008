package forecast

import (
	"fmt"
	"slices"
	"strings"
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
	// BasisIdle: the phase has nothing to do (every node holds the ISO, every image is
	// present, the cluster runs the target), and no earlier plan recorded such a phase: a few
	// seconds assumed (Assumptions.IdlePhase), never the time of plans that moved bytes.
	BasisIdle Basis = "nothing to do"
	// BasisUnknown: nothing to go on; the phase counts for nothing in the total.
	BasisUnknown Basis = "unknown"
)

// weaker reports whether basis a says less than b, for a phase that rests on several: unknown,
// then assumed, then nothing to do, then history, then this plan.
func weaker(a, b Basis) bool {
	rank := func(x Basis) int {
		switch x {
		case BasisUnknown:
			return 0
		case BasisAssumed:
			return 1
		case BasisIdle:
			return 2
		case BasisHistory:
			return 3
		}
		return 4
	}
	return rank(a) < rank(b)
}

// NodeClass is what a node's upgrade does, which its time depends on more than on anything
// else: on a control plane the step upgrades the API server, the controller manager, the
// scheduler and etcd, each restarted (minutes); on another node the kubelet alone. A node that
// runs the target already (its kubelet and, on a control plane, its control plane) changes
// nothing: it is cordoned, drained, runs a Job that finds it done, and rejoins.
type NodeClass struct {
	// ControlPlane is true for a control-plane node.
	ControlPlane bool `json:"controlPlane,omitempty"`
	// Unchanged is true for a node at the target already. False when not known.
	Unchanged bool `json:"unchanged,omitempty"`
}

// String names the class, as the estimate says it.
func (c NodeClass) String() string { return c.name("") }

// plural names the nodes of class c.
func (c NodeClass) plural() string { return c.name("s") }

// name names the class with the noun's ending end ("" or "s").
func (c NodeClass) name(end string) string {
	s := "other node" + end
	if c.ControlPlane {
		s = "control plane" + end
	}
	if c.Unchanged {
		s += " at the target"
	}
	return s
}

// NodeStep is how long one node's upgrade took, cordon to upgraded.
type NodeStep struct {
	// Class is what the upgrade did.
	Class NodeClass
	// Took is how long it took.
	Took time.Duration
}

// Assumptions are the figures a phase is estimated from when this plan measured no rate for it
// and the cluster recorded no earlier plan: priors, said as such wherever the estimate is shown.
type Assumptions struct {
	// DownloadBytesPerSecond is the rate one node is assumed to download the ISO at.
	DownloadBytesPerSecond float64
	// PreloadBytesPerSecond is the rate one node is assumed to read the release's compressed
	// image archives at.
	PreloadBytesPerSecond float64
	// ControlPlaneStep is how long a control-plane node's upgrade is assumed to take, cordon
	// to upgraded.
	ControlPlaneStep time.Duration
	// NodeStep is how long the upgrade of a node that is not a control plane is assumed to
	// take.
	NodeStep time.Duration
	// UnchangedStep is how long the step of a node at the target already is assumed to take.
	UnchangedStep time.Duration
	// IdlePhase is how long a phase with nothing to do is assumed to take.
	IdlePhase time.Duration
}

// Steps are the node steps a assumes, by class.
func (a Assumptions) Steps() map[NodeClass]time.Duration {
	return map[NodeClass]time.Duration{
		{ControlPlane: true}:                  a.ControlPlaneStep,
		{}:                                    a.NodeStep,
		{ControlPlane: true, Unchanged: true}: a.UnchangedStep,
		{Unchanged: true}:                     a.UnchangedStep,
	}
}

// DefaultAssumptions are the priors of a cluster's first plan. They are round figures, chosen to
// be about right rather than optimistic, and none of them is a measurement of the cluster at
// hand:
//   - a download from an origin across a WAN link (the acquire bench's budget is 100 MB/s, a
//     site's link often a fifth of that);
//   - a preload that unpacks as it imports, on a node that runs workloads (docs/benchmarks.md
//     measured several hundred MB/s on an idle machine without unpacking);
//   - 4 minutes a control plane: kubeadm upgrade apply or node, the API server's, the
//     controller manager's, the scheduler's and etcd's restarts, each waited for (kind
//     clusters took 3m24s to 4m44s);
//   - 1 minute another node: a drain whose pods take their grace period (30 s by default), the
//     kubelet's upgrade and restart, the node Ready again (an idle kind worker took 13 s);
//   - 20 seconds a node at the target already: a drain, a Job that finds nothing to do, the
//     node Ready again (a second plan to the same release took 34 s on kind for its preload,
//     its cluster step and three such nodes; a drained pod's grace period makes it longer);
//   - 10 seconds a phase with nothing to do: a round of the agents' reports.
var DefaultAssumptions = Assumptions{
	DownloadBytesPerSecond: 20 << 20,
	PreloadBytesPerSecond:  50 << 20,
	ControlPlaneStep:       4 * time.Minute,
	NodeStep:               1 * time.Minute,
	UnchangedStep:          20 * time.Second,
	IdlePhase:              10 * time.Second,
}

// PastPlan is what one earlier plan of the cluster took.
type PastPlan struct {
	// Phases are the durations of its -ing phases by name.
	Phases map[string]time.Duration
	// Idle are its phases that had nothing to do (TimeInput.Idle): they estimate only a phase
	// with nothing to do, and the others only a phase with something to do.
	Idle map[string]bool
	// NodeSteps are its nodes' upgrades.
	NodeSteps []NodeStep
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
	// Idle maps the phases known to have nothing to do to why (every node holds the ISO,
	// every image is present, the cluster runs the target).
	Idle map[string]string
	// AssumedIdle is how long a phase with nothing to do is assumed to take when no earlier
	// plan recorded one; 0 leaves such a phase unknown.
	AssumedIdle time.Duration
	// NodePhase names the phase the nodes are upgraded in (NodeUpgrading).
	NodePhase string
	// ControlPlaneLeft and OthersLeft are the nodes still to upgrade, in order: control planes
	// one at a time, the others Concurrency at a time.
	ControlPlaneLeft, OthersLeft []string
	// Unchanged are the nodes left that run the target already (NodeClass.Unchanged).
	Unchanged map[string]bool
	// Concurrency is how many other nodes upgrade at once; below 1 is 1.
	Concurrency int
	// NodeSteps are the node upgrades this plan finished.
	NodeSteps []NodeStep
	// NodeElapsed is, for the nodes upgrading now, how long they have been at it.
	NodeElapsed map[string]time.Duration
	// AssumedNodeSteps are how long a node's upgrade is assumed to take, by class, when
	// neither this plan nor the history has one of its class; a class without one leaves the
	// node phase unknown then.
	AssumedNodeSteps map[NodeClass]time.Duration
}

// PhaseTime is the estimate of one phase.
type PhaseTime struct {
	// Phase is its name.
	Phase string `json:"phase"`
	// Remaining is the time it still takes (its whole duration for a phase not begun).
	Remaining time.Duration `json:"remaining"`
	// Basis is what the estimate rests on; for the node phase, the least of its classes'.
	Basis Basis `json:"basis"`
	// Samples is how many earlier plans or node steps the estimate rests on.
	Samples int `json:"samples,omitempty"`
	// BytesLeft is, for a phase estimated from a rate (measured or assumed), the bytes it
	// still moves.
	BytesLeft int64 `json:"bytesLeft,omitempty"`
	// BytesPerSecond is that rate, summed over the nodes that move bytes at once.
	BytesPerSecond float64 `json:"bytesPerSecond,omitempty"`
	// NodeStep is, for the node phase, how long the upgrade of the next node (the first
	// left) is taken to last; Classes has each class's.
	NodeStep time.Duration `json:"nodeStep,omitempty"`
	// Classes are, for the node phase, the step of each class of the nodes left.
	Classes []ClassTime `json:"classes,omitempty"`
	// Assumption says, for a phase whose Basis is BasisAssumed or BasisIdle, what was
	// assumed.
	Assumption string `json:"assumption,omitempty"`
}

// ClassTime is how long the upgrade of a node of one class is taken to last.
type ClassTime struct {
	NodeClass
	// Nodes is how many of the nodes left are of the class.
	Nodes int `json:"nodes"`
	// Step is one node's upgrade.
	Step time.Duration `json:"step"`
	// Basis is what Step rests on: this plan's steps of the class, the history's, or the
	// step assumed.
	Basis Basis `json:"basis"`
	// Samples is how many node steps Step is the median of.
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
	// Assumed is true when some phase left rests on an assumption (BasisAssumed).
	Assumed bool `json:"assumed,omitempty"`
}

// Time estimates when a plan ends. A phase left is estimated from the rate it runs at (a phase
// moving bytes, once it has moved some); else, for a phase with nothing to do (Idle), from the
// median of the earlier plans' same phase that had nothing to do either, else the idle time
// assumed (BasisIdle): never from plans that moved bytes, which took minutes for what takes
// seconds; else from the median of the earlier plans' same phase that had something to do;
// else, for a phase moving a known number of bytes, from the rate assumed. The phase the nodes
// upgrade in is estimated node by node: each node left from the median step of its class
// (NodeClass: control plane or not, at the target already or not), this plan's finished steps
// of the class first, the earlier plans' otherwise, the step assumed for the class last; control
// planes one after another, the others in rounds of Concurrency, each round as long as its
// longest. The current phase's elapsed time is taken off an estimate from history, never below
// zero. A phase with none of these is unknown and counts for nothing: Partial says Remaining is
// then a lower bound. It is pure.
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
	why, idle := in.Idle[ph]
	var past []time.Duration
	for _, h := range in.History {
		if d, ok := h.Phases[ph]; ok && h.Idle[ph] == idle {
			past = append(past, d)
		}
	}
	elapsed := func(d time.Duration) time.Duration {
		if current {
			return max(d-in.Elapsed, 0)
		}
		return d
	}
	switch {
	case len(past) > 0:
		pt.Remaining, pt.Basis, pt.Samples = elapsed(median(past)), BasisHistory, len(past)
	case idle && in.AssumedIdle > 0:
		pt.Remaining, pt.Basis = elapsed(in.AssumedIdle), BasisIdle
		pt.Assumption = fmt.Sprintf("nothing to do (%s): %s", why, in.AssumedIdle)
	case rated && p.TotalBytes > 0 && p.AssumedBytesPerSecond > 0:
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

// classStep is how long the upgrade of a node of class c is taken to last: the median of this
// plan's steps of the class, else of the history's, else the step assumed; BasisUnknown
// without any.
func classStep(in TimeInput, c NodeClass) ClassTime {
	ct := ClassTime{NodeClass: c, Basis: BasisUnknown}
	of := func(steps []NodeStep) []time.Duration {
		var out []time.Duration
		for _, s := range steps {
			if s.Class == c {
				out = append(out, s.Took)
			}
		}
		return out
	}
	var past []time.Duration
	for _, h := range in.History {
		past = append(past, of(h.NodeSteps)...)
	}
	switch this := of(in.NodeSteps); {
	case len(this) > 0:
		ct.Step, ct.Basis, ct.Samples = median(this), BasisThisPlan, len(this)
	case len(past) > 0:
		ct.Step, ct.Basis, ct.Samples = median(past), BasisHistory, len(past)
	case in.AssumedNodeSteps[c] > 0:
		ct.Step, ct.Basis = in.AssumedNodeSteps[c], BasisAssumed
	}
	return ct
}

// noneLeft is the basis of a node phase with no node left: this plan's steps, else the
// history's, else an assumed step, else none.
func noneLeft(in TimeInput) Basis {
	switch {
	case len(in.NodeSteps) > 0:
		return BasisThisPlan
	case slices.ContainsFunc(in.History, func(h PastPlan) bool { return len(h.NodeSteps) > 0 }):
		return BasisHistory
	}
	for _, d := range in.AssumedNodeSteps {
		if d > 0 {
			return BasisAssumed
		}
	}
	return BasisUnknown
}

// nodePhase estimates the phase the nodes upgrade in and when each node left ends, counted
// from the phase's start (or from now when it runs).
func nodePhase(in TimeInput, current bool) (PhaseTime, []NodeTime) {
	pt := PhaseTime{Phase: in.NodePhase, Basis: BasisThisPlan}
	classOf := func(n string, cp bool) NodeClass { return NodeClass{ControlPlane: cp, Unchanged: in.Unchanged[n]} }
	classes := map[NodeClass]*ClassTime{}
	var order []NodeClass
	count := func(n string, cp bool) {
		c := classOf(n, cp)
		if ct, ok := classes[c]; ok {
			ct.Nodes++
			return
		}
		ct := classStep(in, c)
		ct.Nodes = 1
		classes[c] = &ct
		order = append(order, c)
	}
	for _, n := range in.ControlPlaneLeft {
		count(n, true)
	}
	for _, n := range in.OthersLeft {
		count(n, false)
	}
	var assumed, known []string
	for _, c := range order {
		ct := classes[c]
		pt.Classes = append(pt.Classes, *ct)
		pt.Samples += ct.Samples
		if weaker(ct.Basis, pt.Basis) {
			pt.Basis = ct.Basis
		}
		if ct.Basis == BasisAssumed {
			assumed = append(assumed, fmt.Sprintf("%s for each %s", ct.Step, c))
		} else {
			known = append(known, fmt.Sprintf("%s: %s from %s", c.plural(), ct.Step, ct.Basis))
		}
	}
	if len(order) == 0 {
		// No node left: what the phase would rest on, were there one.
		pt.Basis = noneLeft(in)
	}
	if pt.Basis == BasisUnknown {
		return PhaseTime{Phase: in.NodePhase, Basis: BasisUnknown, Classes: pt.Classes}, nil
	}
	if len(assumed) > 0 {
		pt.Assumption = strings.Join(assumed, ", ")
		if len(known) > 0 {
			pt.Assumption += " (" + strings.Join(known, ", ") + ")"
		}
		pt.Assumption += fmt.Sprintf("; control planes one at a time, the others %d at a time", max(in.Concurrency, 1))
	}
	left := func(n string, cp bool) time.Duration {
		step := classes[classOf(n, cp)].Step
		if current {
			return max(step-in.NodeElapsed[n], 0)
		}
		return step
	}
	var nodes []NodeTime
	var at time.Duration
	for _, n := range in.ControlPlaneLeft {
		at += left(n, true)
		nodes = append(nodes, NodeTime{Node: n, Remaining: at})
	}
	c := max(in.Concurrency, 1)
	for i := 0; i < len(in.OthersLeft); i += c {
		batch := in.OthersLeft[i:min(i+c, len(in.OthersLeft))]
		var longest time.Duration
		for _, n := range batch {
			longest = max(longest, left(n, false))
		}
		at += longest
		for _, n := range batch {
			nodes = append(nodes, NodeTime{Node: n, Remaining: at})
		}
	}
	if len(order) > 0 {
		pt.NodeStep = classes[order[0]].Step
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
