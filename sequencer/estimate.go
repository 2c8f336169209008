package sequencer

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/forecast"
	"github.com/upgrade-repo/upgrade-repo/policy"
)

// historyPlans is how many of the cluster's latest Succeeded plans an estimate rests on.
const historyPlans = 5

// EstimateTime estimates when plan p ends (forecast.Time): each phase left from the rate it
// runs at (the ISO's download and the preload, once they moved bytes), else from what the
// cluster's latest Succeeded plans among plans took (their phase transition timestamps), else,
// for the download and the preload, from the bytes the plan's disk forecast says they move
// against forecast.DefaultAssumptions. A phase with nothing to do (idlePhases: the disk forecast
// says every node holds the ISO, or lacks no image; every node runs the release's Kubernetes
// version, for ClusterUpgrading) is estimated only from the earlier plans' same phase that had
// nothing to do either, else from the few seconds assumed. NodeUpgrading is estimated node by
// node from the upgrades of its class (control plane or not, at the release's version already
// or not: nodeClass), this plan's finished ones first, else the earlier plans' (their nodes'
// upgradeStartTime to Upgraded), else the step assumed for the class. nodes are the cluster's
// nodes and repoNodes the agents' reports, for the download's bytes. It is pure; nil for a plan
// that finished.
func EstimateTime(p *v1beta1.UpgradePlan, plans []v1beta1.UpgradePlan, nodes []NodeInfo,
	repoNodes map[string]*v1beta1.RepoNodeStatus, now time.Time) *forecast.TimeEstimate {
	st := &p.Status
	if st.Phase.Finished() {
		return nil
	}
	assume := forecast.DefaultAssumptions
	cps := map[string]bool{}
	for _, n := range nodes {
		cps[n.Name] = n.ControlPlane
	}
	in := forecast.TimeInput{NodePhase: string(v1beta1.PhaseNodeUpgrading), History: history(p.Name, plans, cps),
		Rated: map[string]forecast.Progress{}, NodeElapsed: map[string]time.Duration{}, Unchanged: map[string]bool{},
		AssumedNodeSteps: assume.Steps(), AssumedIdle: assume.IdlePhase}
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
	in.NodeSteps = nodeSteps(p, cps)
	in.Idle = idlePhases(p, nodes)
	for _, n := range nodes {
		ns, ok := st.NodeUpgradeStatuses[n.Name]
		if !ok || ns.State == v1beta1.NodeUpgraded || ns.State == v1beta1.NodeSkipped {
			continue
		}
		if atTarget(p, ns, n) {
			in.Unchanged[n.Name] = true
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

// history is what the latest Succeeded plans other than self took, newest first. cps says which
// nodes are control planes, for a node a plan recorded no control-plane versions of.
func history(self string, plans []v1beta1.UpgradePlan, cps map[string]bool) []forecast.PastPlan {
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
			past: forecast.PastPlan{Phases: phaseDurations(&p.Status), Idle: pastIdle(p), NodeSteps: nodeSteps(p, cps)}})
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

// nodeSteps are how long the upgrades of p's upgraded nodes took, cordon to Upgraded, each of
// its class: a control plane when the plan recorded its control-plane versions or cps says so,
// unchanged when its kubelet was at the release's version when the plan started
// (stepUnchanged).
func nodeSteps(p *v1beta1.UpgradePlan, cps map[string]bool) []forecast.NodeStep {
	var out []forecast.NodeStep
	for name, ns := range p.Status.NodeUpgradeStatuses {
		if ns.State != v1beta1.NodeUpgraded || ns.UpgradeStartTime == nil || ns.StateTime == nil {
			continue
		}
		if d := ns.StateTime.Sub(ns.UpgradeStartTime.Time); d > 0 {
			c := forecast.NodeClass{ControlPlane: ns.ControlPlane != nil || cps[name], Unchanged: stepUnchanged(ns)}
			out = append(out, forecast.NodeStep{Class: c, Took: d})
		}
	}
	slices.SortFunc(out, func(a, b forecast.NodeStep) int { return cmp.Compare(a.Took, b.Took) })
	return out
}

// stepUnchanged reports whether a node's step changed nothing: its kubelet, when the plan first
// saw it, was the release's Kubernetes version already. What a control plane ran before its
// step is not recorded (ControlPlane is what it runs now); a control plane whose kubelet was at
// the target and whose control plane was not is a step cut short, rare enough to count as
// unchanged. False when either version is unknown.
func stepUnchanged(ns v1beta1.NodeUpgradeStatus) bool {
	target, err := policy.ParseVersion(ns.TargetKubeletVersion)
	return err == nil && sameVersion(ns.KubeletVersionBefore, target)
}

// atTarget reports whether node n, not upgraded yet in plan p, runs the release's Kubernetes
// version already, so that its step changes nothing (nodestep/kubeadm Decide returns Done): its
// kubelet is the version and, on a control plane of an upstream release, so are its
// kube-apiserver's, kube-controller-manager's and kube-scheduler's image tags, where the row
// carries them (from NodeUpgrading on; before, the kubelet alone tells). A release of
// another distribution (RKE2, K3s) upgrades the control plane with the kubelet: the kubelet
// alone tells. False while the release's version is unknown (before MetadataPopulating).
func atTarget(p *v1beta1.UpgradePlan, ns v1beta1.NodeUpgradeStatus, n NodeInfo) bool {
	m := p.Status.ReleaseMetadata
	if m == nil || p.Spec.Rollback != nil {
		return false
	}
	target, err := policy.ParseVersion(m.Kubernetes)
	if err != nil {
		return false
	}
	kubelet := ns.KubeletVersion
	if n.KubeletVersion != "" {
		kubelet = n.KubeletVersion
	}
	if !sameVersion(kubelet, target) {
		return false
	}
	if !n.ControlPlane || target.Build != "" {
		return true
	}
	cp := ns.ControlPlane
	if cp == nil {
		// Not read yet (the rows carry the components from NodeUpgrading on). A kubelet at the
		// target on a control plane was installed by a step that had upgraded the control
		// plane first (nodestep/kubeadm installs the kubelet only once kubeadm succeeded).
		return true
	}
	return sameVersion(cp.APIServer, target) && sameVersion(cp.ControllerManager, target) && sameVersion(cp.Scheduler, target)
}

// Why a phase has nothing to do, as the estimate says it.
const (
	idleISO     = "every node holds the ISO"
	idleImages  = "every node holds the release's images"
	idleCluster = "every node runs the release's version"
)

// idlePhases are the phases of plan p that have nothing to do, with why: ISODownloading when
// the disk forecast says every node of the plan holds the ISO; ImagePreloading when it says
// every node lacks no image of the release; ClusterUpgrading when every node of the plan runs
// the release's version (atTarget). A node without a forecast, or whose version is not known,
// leaves the phase with something to do.
func idlePhases(p *v1beta1.UpgradePlan, nodes []NodeInfo) map[string]string {
	st := &p.Status
	names := slices.Collect(maps.Keys(st.NodeUpgradeStatuses))
	if len(names) == 0 {
		for _, n := range PlanNodes(p, nodes) {
			names = append(names, n.Name)
		}
	}
	out := map[string]string{}
	if len(names) == 0 {
		return out
	}
	iso, images := diskIdle(st, names)
	if iso {
		out[string(v1beta1.PhaseISODownloading)] = idleISO
	}
	if images {
		out[string(v1beta1.PhaseImagePreloading)] = idleImages
	}
	info := map[string]NodeInfo{}
	for _, n := range nodes {
		info[n.Name] = n
	}
	cluster := true
	for _, name := range names {
		n, ok := info[name]
		cluster = cluster && ok && atTarget(p, st.NodeUpgradeStatuses[name], n)
	}
	if cluster {
		out[string(v1beta1.PhaseClusterUpgrading)] = idleCluster
	}
	return out
}

// diskIdle says whether the disk forecast of st has every node of names hold the ISO, and lack
// no image of the release.
func diskIdle(st *v1beta1.UpgradePlanStatus, names []string) (iso, images bool) {
	disk := map[string]*v1beta1.NodeDiskForecast{}
	for i := range st.DiskForecast {
		disk[st.DiskForecast[i].Node] = &st.DiskForecast[i]
	}
	iso, images = len(names) > 0, len(names) > 0
	for _, name := range names {
		f := disk[name]
		iso = iso && f != nil && f.ISOBytes == 0
		images = images && f != nil && f.ImagesStoredBytes == 0 && f.ImagesArchiveBytes == 0 && f.ImagesMissing == 0
	}
	return iso, images
}

// pastIdle are the phases an earlier plan p had nothing to do in: the download and the preload
// by its disk forecast (diskIdle), ClusterUpgrading when every node's kubelet was at the release's
// version when it started (stepUnchanged).
func pastIdle(p *v1beta1.UpgradePlan) map[string]bool {
	st := &p.Status
	names := slices.Collect(maps.Keys(st.NodeUpgradeStatuses))
	iso, images := diskIdle(st, names)
	cluster := len(names) > 0
	for _, ns := range st.NodeUpgradeStatuses {
		cluster = cluster && stepUnchanged(ns)
	}
	return map[string]bool{string(v1beta1.PhaseISODownloading): iso, string(v1beta1.PhaseImagePreloading): images,
		string(v1beta1.PhaseClusterUpgrading): cluster}
}
