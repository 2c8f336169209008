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
// runs at (the ISO's download and the preload, once they moved bytes), else from what the
// cluster's latest Succeeded plans among plans took (their phase transition timestamps), else,
// for the download and the preload, from the bytes the plan's disk forecast says they move
// against forecast.DefaultAssumptions; NodeUpgrading from the node upgrades this plan finished,
// else those of the earlier plans (their nodes' upgradeStartTime to Upgraded), else the node
// step assumed. nodes are the cluster's nodes and repoNodes the agents' reports, for the
// download's bytes. It is pure; nil for a plan that finished.
func EstimateTime(p *v1beta1.UpgradePlan, plans []v1beta1.UpgradePlan, nodes []NodeInfo,
	repoNodes map[string]*v1beta1.RepoNodeStatus, now time.Time) *forecast.TimeEstimate {
	st := &p.Status
	if st.Phase.Finished() {
		return nil
	}
	assume := forecast.DefaultAssumptions
	in := forecast.TimeInput{NodePhase: string(v1beta1.PhaseNodeUpgrading), History: history(p.Name, plans),
		Rated: map[string]forecast.Progress{}, NodeElapsed: map[string]time.Duration{}, AssumedNodeStep: assume.NodeStep}
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
	disk := map[string]*v1beta1.NodeDiskForecast{}
	for i := range st.DiskForecast {
		disk[st.DiskForecast[i].Node] = &st.DiskForecast[i]
	}
	dl := isoProgress(st, nodes, repoNodes, disk)
	dl.AssumedBytesPerSecond = assume.DownloadBytesPerSecond
	pre := preloadProgress(p, nodes, disk)
	pre.AssumedBytesPerSecond = assume.PreloadBytesPerSecond
	switch st.Phase {
	case v1beta1.PhaseISODownloading:
		dl.Elapsed = in.Elapsed
	case v1beta1.PhaseImagePreloading:
		pre.Elapsed = in.Elapsed
	}
	in.Rated[string(v1beta1.PhaseISODownloading)] = dl
	in.Rated[string(v1beta1.PhaseImagePreloading)] = pre
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

// isoProgress is the download of the plan's ISO over the nodes: the bytes their agents hold of it
// and its size, from their reports while they download, from the disk forecast before. A node the
// forecast says held the ISO when the plan began moves nothing, and its bytes are left out: they
// would make the rate measured look as if they had come in the phase's first second. All the
// nodes download at once.
func isoProgress(st *v1beta1.UpgradePlanStatus, nodes []NodeInfo, repoNodes map[string]*v1beta1.RepoNodeStatus,
	disk map[string]*v1beta1.NodeDiskForecast) forecast.Progress {
	var pr forecast.Progress
	downloading := st.Phase == v1beta1.PhaseISODownloading
	for _, n := range nodes {
		f := disk[n.Name]
		if f != nil && f.ISOBytes == 0 {
			continue
		}
		var size int64
		if f != nil {
			size = f.ISOBytes
		}
		rn := repoNodes[n.Name]
		if downloading && rn != nil && st.Agents != nil && checksum.Same(rn.ISO.Checksum, st.Agents.ISOChecksum) {
			pr.DoneBytes += rn.ISO.BytesDone
			size = max(size, rn.ISO.BytesTotal)
		}
		if size > 0 {
			pr.TotalBytes += size
			pr.Parallel++
		}
	}
	return pr
}

// preloadProgress is the preload over the nodes: the archive bytes read and to read. An agent
// learns an archive's size only as it opens it, so the total it reports grows archive by archive,
// and a node not begun reports none: a rate against those totals says the preload is nearly done
// when it has hardly begun. Each node's total is therefore the larger of its report and what the
// disk forecast says it reads (the whole of every archive it lacks an image of); without the
// forecast's figure, a node not preloaded yet is taken to read as much as the most any node that
// finished read. Nodes preload ImagePreloadOption.Concurrency at a time, all when unset.
func preloadProgress(p *v1beta1.UpgradePlan, nodes []NodeInfo, disk map[string]*v1beta1.NodeDiskForecast) forecast.Progress {
	st := &p.Status
	var pr forecast.Progress
	preloading := st.Phase == v1beta1.PhaseImagePreloading
	var most int64
	for _, n := range nodes {
		if ns, ok := st.NodeUpgradeStatuses[n.Name]; ok && preloading && ns.State == v1beta1.NodeImagePreloaded {
			most = max(most, ns.BytesTotal)
		}
	}
	left := 0
	for _, n := range nodes {
		ns := st.NodeUpgradeStatuses[n.Name]
		if !preloading {
			ns = v1beta1.NodeUpgradeStatus{}
		}
		total := ns.BytesTotal
		if ns.State != v1beta1.NodeImagePreloaded {
			f := disk[n.Name]
			switch {
			// A record from before imagesArchiveBytes has images to store and no figure for them.
			case f != nil && (f.ImagesArchiveBytes > 0 || f.ImagesStoredBytes == 0):
				total = max(total, f.ImagesArchiveBytes)
			default:
				total = max(total, most)
			}
			if total > ns.BytesDone {
				left++
			}
		}
		pr.DoneBytes += ns.BytesDone
		pr.TotalBytes += total
	}
	pr.Parallel = len(nodes)
	if o := p.Spec.ImagePreloadOption; o != nil && o.Concurrency > 0 {
		pr.Parallel = o.Concurrency
	}
	pr.Parallel = max(min(pr.Parallel, left), 1)
	return pr
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
