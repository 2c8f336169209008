package sequencer

import (
	"slices"
	"time"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/forecast"
)

// historyPlans is how many of the cluster's latest Succeeded plans an estimate rests on.
const historyPlans = 5

// EstimateTime estimates when plan p ends (forecast.Time): each phase left from the rate it
// runs at (the ISO's download and the preload, once they moved bytes) or from what the
// cluster's latest Succeeded plans among plans took (their phase transition timestamps), and
// NodeUpgrading from the node upgrades this plan finished, else those of the earlier plans
// (their nodes' upgradeStartTime to Upgraded). nodes are the cluster's nodes and repoNodes the
// agents' reports, for the download's bytes. It is pure; nil for a plan that finished.
func EstimateTime(p *v1beta1.UpgradePlan, plans []v1beta1.UpgradePlan, nodes []NodeInfo,
	repoNodes map[string]*v1beta1.RepoNodeStatus, now time.Time) *forecast.TimeEstimate {
	st := &p.Status
	if st.Phase.Finished() {
		return nil
	}
	in := forecast.TimeInput{NodePhase: string(v1beta1.PhaseNodeUpgrading), History: history(p.Name, plans),
		Rated: map[string]forecast.Progress{}, NodeElapsed: map[string]time.Duration{}}
	if o := p.Spec.NodeUpgradeOption; o != nil {
		in.Concurrency = o.Concurrency
	}
	// The steps left: from the one running, or the one after the step just done.
	from, started := 0, time.Time{}
	for i, s := range Steps {
		switch st.Phase {
		case s.Running:
			from, started = i, phaseStart(st, s.Running)
		case s.Done:
			from = i + 1
		}
	}
	for _, s := range Steps[from:] {
		in.Phases = append(in.Phases, string(s.Running))
	}
	if !started.IsZero() {
		in.Elapsed = now.Sub(started)
	}
	switch st.Phase {
	case v1beta1.PhaseISODownloading:
		var pr forecast.Progress
		for _, n := range nodes {
			rn := repoNodes[n.Name]
			if rn == nil || st.Agents == nil || !checksum.Same(rn.ISO.Checksum, st.Agents.ISOChecksum) {
				continue
			}
			pr.DoneBytes += rn.ISO.BytesDone
			pr.TotalBytes += rn.ISO.BytesTotal
		}
		pr.Elapsed = in.Elapsed
		in.Rated[string(st.Phase)] = pr
	case v1beta1.PhaseImagePreloading:
		var pr forecast.Progress
		for _, ns := range st.NodeUpgradeStatuses {
			pr.DoneBytes += ns.BytesDone
			pr.TotalBytes += ns.BytesTotal
		}
		pr.Elapsed = in.Elapsed
		in.Rated[string(st.Phase)] = pr
	}
	in.NodeSteps = nodeSteps(p)
	for _, n := range nodes {
		ns, ok := st.NodeUpgradeStatuses[n.Name]
		if !ok || ns.State == v1beta1.NodeUpgraded || ns.State == v1beta1.NodeSkipped {
			continue
		}
		if ns.UpgradeStartTime != nil {
			in.NodeElapsed[n.Name] = now.Sub(ns.UpgradeStartTime.Time)
		}
		if n.ControlPlane {
			in.ControlPlaneLeft = append(in.ControlPlaneLeft, n.Name)
		} else {
			in.OthersLeft = append(in.OthersLeft, n.Name)
		}
	}
	if len(st.NodeUpgradeStatuses) == 0 {
		// Before Initialized lists the plan's nodes: every node the plan works on.
		in.ControlPlaneLeft, in.OthersLeft = NodeOrder(PlanNodes(p, nodes))
	}
	slices.Sort(in.ControlPlaneLeft)
	slices.Sort(in.OthersLeft)
	est := forecast.Time(in)
	return &est
}

// phaseStart is when the plan last entered phase; zero when it did not.
func phaseStart(st *v1beta1.UpgradePlanStatus, phase v1beta1.Phase) time.Time {
	var at time.Time
	for _, t := range st.PhaseTransitionTimestamps {
		if t.Phase == phase {
			at = t.PhaseTransitionTimestamp.Time
		}
	}
	return at
}

// history is what the latest Succeeded plans other than self took, newest first.
func history(self string, plans []v1beta1.UpgradePlan) []forecast.PastPlan {
	type done struct {
		at   time.Time
		past forecast.PastPlan
	}
	var all []done
	for i := range plans {
		p := &plans[i]
		if p.Name == self || p.Status.Phase != v1beta1.PhaseSucceeded || p.Spec.Rollback != nil {
			continue
		}
		all = append(all, done{at: phaseStart(&p.Status, v1beta1.PhaseSucceeded),
			past: forecast.PastPlan{Phases: phaseDurations(&p.Status), NodeSteps: nodeSteps(p)}})
	}
	slices.SortFunc(all, func(a, b done) int { return b.at.Compare(a.at) })
	var out []forecast.PastPlan
	for _, d := range all[:min(len(all), historyPlans)] {
		out = append(out, d.past)
	}
	return out
}

// phaseDurations are how long each -ing phase of a plan lasted, from its transition to the
// next; a phase entered more than once (a retry) counts its last run.
func phaseDurations(st *v1beta1.UpgradePlanStatus) map[string]time.Duration {
	out := map[string]time.Duration{}
	ts := st.PhaseTransitionTimestamps
	for i := 0; i+1 < len(ts); i++ {
		if d := ts[i+1].PhaseTransitionTimestamp.Sub(ts[i].PhaseTransitionTimestamp.Time); d >= 0 {
			out[string(ts[i].Phase)] = d
		}
	}
	return out
}

// nodeSteps are how long the upgrades of p's upgraded nodes took, cordon to Upgraded.
func nodeSteps(p *v1beta1.UpgradePlan) []time.Duration {
	var out []time.Duration
	for _, ns := range p.Status.NodeUpgradeStatuses {
		if ns.State != v1beta1.NodeUpgraded || ns.UpgradeStartTime == nil || ns.StateTime == nil {
			continue
		}
		if d := ns.StateTime.Sub(ns.UpgradeStartTime.Time); d > 0 {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}
