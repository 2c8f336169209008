package sequencer

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// NodeTiming is how a node's time in NodeUpgrading divides, read from the plan's node times
// (NodeTimes): what the node's step and its drain took, and the rest, the sequencer's own.
type NodeTiming struct {
	// Node is the node's name.
	Node string
	// Wait is from the moment the node could have started to its cordon: from the last other
	// node's Upgraded before it (which freed its slot), or from the phase's start for the nodes
	// that started first.
	Wait time.Duration
	// Drain is from the first eviction to the node found drained; 0 when it had nothing to evict.
	Drain time.Duration
	// Step is the node Job's run, from its start to its completion as Kubernetes records them
	// (to the second, see stepTime).
	Step time.Duration
	// Total is from the cordon to Upgraded.
	Total time.Duration
	// Sequencer is the sequencer's own time: Wait and Total, less Drain and Step. It holds the
	// transitions (cordon to Job, Job done to uncordon, rejoin to Upgraded, Upgraded to the next
	// cordon) and, for a node that rejoins, the wait for it to be Ready and its agent to serve.
	Sequencer time.Duration
}

// NodeTimings returns the timings of the nodes of st that went through NodeUpgrading with every
// transition stamped, in the order they were cordoned.
func NodeTimings(st *v1beta1.UpgradePlanStatus) []NodeTiming {
	var phaseStart time.Time
	for _, p := range st.PhaseTransitionTimestamps {
		if p.Phase == v1beta1.PhaseNodeUpgrading {
			phaseStart = p.PhaseTransitionTimestamp.Time
		}
	}
	var upgraded []time.Time
	type node struct {
		name string
		t    *v1beta1.NodeTimes
	}
	var nodes []node
	for name, s := range st.NodeUpgradeStatuses {
		t := s.Times
		if t == nil || t.Cordoned == nil || t.JobCreated == nil || t.StepStarted == nil || t.StepCompleted == nil || t.Upgraded == nil {
			continue
		}
		nodes = append(nodes, node{name, t})
		upgraded = append(upgraded, t.Upgraded.Time)
	}
	slices.SortFunc(nodes, func(a, b node) int {
		if c := a.t.Cordoned.Compare(b.t.Cordoned.Time); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	out := make([]NodeTiming, 0, len(nodes))
	for _, n := range nodes {
		t := n.t
		from := phaseStart
		for _, u := range upgraded {
			if !u.After(t.Cordoned.Time) && u.After(from) {
				from = u
			}
		}
		nt := NodeTiming{Node: n.name, Step: stepTime(t), Total: t.Upgraded.Sub(t.Cordoned.Time)}
		if !from.IsZero() {
			nt.Wait = max(0, t.Cordoned.Sub(from))
		}
		if t.DrainStarted != nil {
			nt.Drain = t.JobCreated.Sub(t.DrainStarted.Time)
		}
		nt.Sequencer = nt.Wait + nt.Total - nt.Drain - nt.Step
		out = append(out, nt)
	}
	return out
}

// stepTime is the node Job's run as its times tell it, within what the sequencer saw: the Job
// cannot have started before it was created, nor ended after the sequencer saw it end. The Job's
// times are whole seconds, rounded down: the step so measured may come out short by up to a
// second, and the sequencer's time long by as much, never the other way.
func stepTime(t *v1beta1.NodeTimes) time.Duration {
	start, end := t.StepStarted.Time, t.StepCompleted.Time
	if t.JobCreated.After(start) {
		start = t.JobCreated.Time
	}
	if t.StepSeen != nil && t.StepSeen.Before(&metav1.MicroTime{Time: end}) {
		end = t.StepSeen.Time
	}
	return max(0, end.Sub(start))
}

// Distribution summarises durations: their count, least, median, 90th percentile, greatest and
// mean.
type Distribution struct {
	N                        int
	Min, P50, P90, Max, Mean time.Duration
}

// Distribute returns the distribution of ds.
func Distribute(ds []time.Duration) Distribution {
	if len(ds) == 0 {
		return Distribution{}
	}
	s := slices.Sorted(slices.Values(ds))
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return Distribution{N: len(s), Min: s[0], P50: at(0.5), P90: at(0.9), Max: s[len(s)-1], Mean: sum / time.Duration(len(s))}
}

// String prints the distribution in seconds.
func (d Distribution) String() string {
	sec := func(x time.Duration) string { return fmt.Sprintf("%.2fs", x.Seconds()) }
	return fmt.Sprintf("n=%d min=%s p50=%s p90=%s max=%s mean=%s", d.N, sec(d.Min), sec(d.P50), sec(d.P90), sec(d.Max), sec(d.Mean))
}
