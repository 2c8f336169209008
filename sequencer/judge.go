package sequencer

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/forecast"
	"github.com/upgrade-repo/upgrade-repo/isorelease"
	"github.com/upgrade-repo/upgrade-repo/policy"
	"github.com/upgrade-repo/upgrade-repo/release"
)

// What a plan is judged on and in which order its nodes go. The sequencer (Decide, in
// Initializing and again in MetadataPopulating) and the operator's commands (plan, upgrade
// apply --dry-run, upgrade status) all call Judge, PlanNodes and NodeOrder, so that what the
// commands show is what the sequencer does.

// JudgeFacts are the facts of the cluster that a plan is judged on.
type JudgeFacts struct {
	// Installed is the recorded installed version and, when known, its release. A plan that
	// has started is judged against the version it started from (status.previousVersion)
	// instead.
	Installed Installed
	// VersionExists says the plan's Version exists (or is created together with the plan).
	VersionExists bool
	// PlansInFlight names the other plans that hold the cluster.
	PlansInFlight []string
	// Nodes are the cluster's nodes; Judge keeps those the plan works on (PlanNodes).
	Nodes []NodeInfo
	// KubernetesVersion is the control plane's Kubernetes version; when empty, the installed
	// release's.
	KubernetesVersion string
	// Release is the target release; nil when it has not been read yet.
	Release *release.Release

	// The pre-flight's facts; each left out is a check that passes saying it was not made.

	// Now is when the plan is judged, for the certificates' expiry.
	Now time.Time
	// RepoNodes are the agents' reports by node name: each node's file systems, kubelet
	// image GC thresholds and what it holds of the release.
	RepoNodes map[string]*v1beta1.RepoNodeStatus
	// ISOSize is the size of the Version's ISO; 0 when unknown.
	ISOSize int64
	// ISOChecksum is the ISO's SHA-512 (the Version's isoChecksum), to tell whether a node
	// holds it already.
	ISOChecksum string
	// Archives are the target release's image archives as read from its ISO; nil when not
	// read.
	Archives []isorelease.Archive
	// UndrainableBudgets say which PodDisruptionBudgets no drain can ever satisfy.
	UndrainableBudgets []string
	// Certificates are the control-plane certificates read, CertificatesNote what could not be.
	Certificates     []policy.Certificate
	CertificatesNote string
	// Plans are the cluster's UpgradePlans: the Succeeded ones are the history the plan's time
	// estimate rests on, and the certificates must outlast that estimate
	// (policy.CertificateWindow).
	Plans []v1beta1.UpgradePlan
	// Disruptions are the cluster's PodDisruptionBudgets with pods to evict
	// (GatherDisruptions), for the batches of workers upgraded together.
	Disruptions []Disruption
}

// Judgement is how a plan was judged: the policies' input and outcome, and the order its nodes
// are upgraded in.
type Judgement struct {
	// Input is what the policies judged.
	Input policy.Input
	// Result is their outcome.
	Result policy.Result
	// ControlPlaneNodes and OtherNodes are the nodes the plan works on, in upgrade order
	// (NodeOrder of PlanNodes).
	ControlPlaneNodes, OtherNodes []string
	// WorkersFirst says the other nodes go before the control plane (WorkersFirst of the plan).
	WorkersFirst bool
	// Disk is the forecast of each of those nodes' disk, in upgrade order; empty when the
	// ISO's size is not known.
	Disk []forecast.NodeDisk
	// Batches are the other nodes in the batches they are upgraded in, with the plan's
	// concurrency, when each node takes as long (WorkerBatches).
	Batches [][]string
}

// WorkersFirst reports whether plan p takes the nodes that are not control planes first, then
// the control plane one at a time: a rollback does, so that no kubelet is ever newer than the
// API server it talks to; an upgrade takes the control plane first for the same reason.
func WorkersFirst(p *v1beta1.UpgradePlan) bool {
	return p != nil && p.Spec.Rollback != nil
}

// Judge judges plan p on the facts f. It is pure. Only p's spec (version, force,
// allowPrerelease, rollback, nodeUpgradeOption) and, once it started, its status (previousVersion, node
// statuses, release metadata) are read: a command that judges a plan not created yet passes
// the plan it would create.
func Judge(p *v1beta1.UpgradePlan, f JudgeFacts) Judgement {
	nodes := PlanNodes(p, f.Nodes)
	in := policy.Input{
		Current:         f.Installed.Version,
		Target:          p.Spec.Version,
		VersionExists:   f.VersionExists,
		PlansInFlight:   f.PlansInFlight,
		Force:           p.Spec.Force,
		AllowPrerelease: p.Spec.AllowPrerelease,
		ReleaseUnknown:  f.Release == nil,
		// The downgrade of a rollback, checked against the plan it rolls back (JudgeRollback).
		Rollback:          p.Spec.Rollback != nil,
		KubernetesCurrent: f.KubernetesVersion,
		Kubelets:          map[string]string{},
	}
	if p.Status.PreviousVersion != "" {
		// Once started, the plan judges against the version it started from.
		in.Current = p.Status.PreviousVersion
	}
	if in.KubernetesCurrent == "" && f.Installed.Release != nil {
		in.KubernetesCurrent = f.Installed.Release.Kubernetes
	}
	for _, n := range nodes {
		if !n.Ready {
			in.NotReadyNodes = append(in.NotReadyNodes, n.Name)
		}
		in.Kubelets[n.Name] = n.KubeletVersion
	}
	slices.Sort(in.NotReadyNodes)
	if r := f.Release; r != nil {
		in.MinUpgradableVersion = r.MinUpgradableVersion
		in.KubernetesTarget = r.Kubernetes
	}
	j := Judgement{}
	j.ControlPlaneNodes, j.OtherNodes = NodeOrder(nodes)
	j.WorkersFirst = WorkersFirst(p)
	in.Preflight = policy.Preflight{UndrainableBudgets: f.UndrainableBudgets, Certificates: f.Certificates,
		CertificatesNote: f.CertificatesNote, Now: f.Now, CordonedNodes: cordonedByOthers(p, nodes)}
	j.Disk = diskForecast(&in.Preflight, f, cleanupAfter(p), append(slices.Clone(j.ControlPlaneNodes), j.OtherNodes...))
	in.Preflight.Estimate = wholeEstimate(p, f, j.Disk)
	j.Input, j.Result = in, policy.Evaluate(in)
	j.Batches = WorkerBatches(orderedInfos(nodes, j.OtherNodes), nodeConcurrency(p), f.Disruptions)
	return j
}

// wholeEstimate is how long plan p takes from its start (EstimateTime of p not started, with the
// disk forecast disk for the bytes it moves), on the facts f; 0 when nothing is known of it. It
// reads p's spec only, so that a plan judged before it exists (the plan command) and the same
// plan judged as it starts get the same estimate.
func wholeEstimate(p *v1beta1.UpgradePlan, f JudgeFacts, disk []forecast.NodeDisk) time.Duration {
	q := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: p.Name}, Spec: p.Spec}
	q.Status.DiskForecast = diskRecord(disk)
	est := EstimateTime(q, f.Plans, f.Nodes, f.RepoNodes, f.Now)
	if est == nil {
		return 0
	}
	return est.Remaining
}

// cleanupAfter says when the cleanup of the previous release runs after plan p: once its soak
// ended, or at once when it has none.
func cleanupAfter(p *v1beta1.UpgradePlan) string {
	if p != nil && p.Spec.Soak != nil && p.Spec.Soak.Duration <= 0 {
		return forecast.CleanupAfterPlan
	}
	return forecast.CleanupAfterSoak
}

// NodeMeasure returns what node report rn measured of the ISO isoChecksum (status.forecast): the
// blobs it lacks (nil when it checked none) and the cleanup's bytes (ok false when not
// measured). A measure of another ISO is none.
func NodeMeasure(rn *v1beta1.RepoNodeStatus, isoChecksum string) (m *forecast.Measured, cleanupBytes int64, ok bool) {
	if rn == nil || rn.Forecast == nil || isoChecksum == "" || !checksum.Same(rn.Forecast.ISOChecksum, isoChecksum) {
		return nil, 0, false
	}
	f := rn.Forecast
	if f.Blobs > 0 {
		m = &forecast.Measured{StoredBytes: f.MissingStoredBytes, Layers: int(f.MissingLayers), UnpackedBytes: f.MissingUnpackedBytes}
	}
	return m, f.CleanupBytes, f.CleanupMeasured
}

// diskForecast forecasts the disk of the nodes named, in that order, and records in pre what
// does not fit and what was not forecast. A node's own measure of the release (NodeMeasure)
// stands for the blobs where it has one; the cleanup of the previous release runs after.
func diskForecast(pre *policy.Preflight, f JudgeFacts, after string, names []string) []forecast.NodeDisk {
	if f.ISOSize <= 0 {
		pre.DiskNote = "the ISO's size is not known"
		return nil
	}
	rel := forecast.Release{ISOBytes: f.ISOSize}
	for _, a := range f.Archives {
		rel.Archives = append(rel.Archives, forecast.Archive{Name: a.Name(), Images: a.Images, CompressedBytes: a.Size, TarBytes: a.TarBytes,
			Blobs: forecastBlobs(a.Blobs)})
	}
	var unknown, unmeasured []string
	var out []forecast.NodeDisk
	for _, name := range names {
		rn := f.RepoNodes[name]
		if rn == nil || rn.Cache.TotalBytes <= 0 {
			unknown = append(unknown, name)
			continue
		}
		n := forecast.Node{Name: name, Cache: filesystem(&rn.Cache),
			HoldsISO: checksum.Same(rn.ISO.Checksum, f.ISOChecksum) && rn.ISO.State == v1beta1.ISOReady}
		if rn.Containerd != nil {
			n.Containerd = filesystem(rn.Containerd)
		}
		if gc := rn.ImageGC; gc != nil {
			n.ImageGCHighPercent, n.ImageGCLowPercent = int(gc.HighThresholdPercent), int(gc.LowThresholdPercent)
		}
		if n.HoldsISO && rn.Preload.State == v1beta1.PreloadDone {
			// The node preloaded this very ISO: its containerd holds the release's images.
			n.Held = func(string) bool { return true }
		}
		if m, cleanup, ok := NodeMeasure(rn, f.ISOChecksum); m != nil || ok {
			n.Measured = m
			if ok {
				n.CleanupBytes, n.CleanupAfter = cleanup, after
			}
		}
		d := forecast.Disk(rel, n)
		if d.Basis != forecast.BasisMeasured {
			unmeasured = append(unmeasured, name+" ("+basisWords[d.Basis]+")")
		}
		if probs := d.Problems(); len(probs) > 0 {
			if pre.DiskProblems == nil {
				pre.DiskProblems = map[string][]string{}
			}
			pre.DiskProblems[name] = probs
		}
		out = append(out, d)
	}
	pre.DiskChecked = len(out) > 0
	var notes []string
	if len(f.Archives) == 0 {
		notes = append(notes, "the ISO only: its image archives were not read")
	}
	if len(unknown) > 0 {
		notes = append(notes, "no file system reported by node "+strings.Join(unknown, ", "))
	}
	if len(unmeasured) > 0 && len(f.Archives) > 0 {
		notes = append(notes, "images not measured by the node, counted from "+strings.Join(unmeasured, ", "))
	}
	pre.DiskNote = strings.Join(notes, "; ")
	return out
}

// basisWords says what a forecast's images were counted from, for the notes.
var basisWords = map[string]string{
	forecast.BasisBlobs:  "the release's blob index",
	forecast.BasisImages: "the archives' sizes",
}

// forecastBlobs is an archive's blob index as the forecast reads it; nil for nil.
func forecastBlobs(in map[string][]isorelease.Blob) map[string][]forecast.Blob {
	if in == nil {
		return nil
	}
	out := make(map[string][]forecast.Blob, len(in))
	for ref, bs := range in {
		fb := make([]forecast.Blob, 0, len(bs))
		for _, b := range bs {
			fb = append(fb, forecast.Blob{Digest: b.Digest, Size: b.Size, UnpackedSize: b.Unpacked})
		}
		out[ref] = fb
	}
	return out
}

func filesystem(c *v1beta1.RepoNodeCache) forecast.Filesystem {
	return forecast.Filesystem{ID: c.FilesystemID, Path: c.Path, FreeBytes: c.FreeBytes, TotalBytes: c.TotalBytes}
}

// cordonedByOthers names the nodes of nodes that are cordoned while plan p has not cordoned
// them itself (no state of its own that cordons: before it started, or pending).
func cordonedByOthers(p *v1beta1.UpgradePlan, nodes []NodeInfo) []string {
	var out []string
	for _, n := range nodes {
		if !n.Unschedulable {
			continue
		}
		if p != nil {
			if _, ours := nodeRules[p.Status.NodeUpgradeStatuses[n.Name].State]; ours {
				continue
			}
		}
		out = append(out, n.Name)
	}
	slices.Sort(out)
	return out
}

// PlanNodes returns the nodes of nodes that plan p works on: those its
// spec.nodeUpgradeOption.nodes lists (every node when it lists none), less those of
// spec.nodeUpgradeOption.skipNodes that may be skipped (a control-plane node, an upgraded node
// or one whose step runs is never skipped). p nil keeps every node. Applied to its own result
// it returns it unchanged.
func PlanNodes(p *v1beta1.UpgradePlan, nodes []NodeInfo) []NodeInfo {
	if p == nil {
		return nodes
	}
	return scope(Observation{Plan: p, Nodes: nodes}).nodes
}

// NodeOrder returns the order nodes are upgraded in: control-plane nodes first, then the others,
// each group by name.
func NodeOrder(nodes []NodeInfo) (controlPlane, others []string) {
	for _, n := range nodes {
		if n.ControlPlane {
			controlPlane = append(controlPlane, n.Name)
		} else {
			others = append(others, n.Name)
		}
	}
	slices.Sort(controlPlane)
	slices.Sort(others)
	return controlPlane, others
}

// orderedInfos returns the nodes of nodes named by names, in the order of names.
func orderedInfos(nodes []NodeInfo, names []string) []NodeInfo {
	byName := make(map[string]NodeInfo, len(nodes))
	for _, n := range nodes {
		byName[n.Name] = n
	}
	out := make([]NodeInfo, 0, len(names))
	for _, name := range names {
		out = append(out, byName[name])
	}
	return out
}

// orderedNames is NodeOrder's two groups as one list.
func orderedNames(nodes []NodeInfo) []string {
	cp, others := NodeOrder(nodes)
	return append(cp, others...)
}

// NodeInfos turns nodes as the API server lists them into what Decide and Judge read of them.
func NodeInfos(nodes []corev1.Node) []NodeInfo {
	out := make([]NodeInfo, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		out = append(out, NodeInfo{Name: n.Name, ControlPlane: IsControlPlane(n), Ready: IsReady(n),
			Unschedulable: n.Spec.Unschedulable, KubeletVersion: n.Status.NodeInfo.KubeletVersion,
			BootID: n.Status.NodeInfo.BootID, NotReadySince: notReadySince(n), Zone: n.Labels[corev1.LabelTopologyZone]})
	}
	return out
}

// NewObservation is the part of plan's observation at now that the facts f give: its Version,
// the installed version, the plans in flight, the nodes and the control plane's Kubernetes
// version. The Reconciler adds what each phase needs besides.
func NewObservation(now time.Time, plan *v1beta1.UpgradePlan, f Facts) Observation {
	return Observation{Now: now, Plan: plan, Version: f.Version, Installed: f.Installed,
		PlansInFlight: f.PlansInFlight, Nodes: NodeInfos(f.Nodes), KubernetesVersion: f.KubernetesVersion,
		RepoNodes: f.RepoNodes, UndrainableBudgets: f.UndrainableBudgets, Plans: f.Plans}
}

// judgeFacts are the facts of the observation that d's plan is judged on, with the release rel.
func (d *decider) judgeFacts(rel *release.Release) JudgeFacts {
	f := JudgeFacts{Installed: d.o.Installed, VersionExists: d.o.Version != nil, PlansInFlight: d.o.PlansInFlight,
		Nodes: d.o.Nodes, KubernetesVersion: d.o.KubernetesVersion, Release: rel, Disruptions: d.o.Disruptions,
		Now: d.o.Now, RepoNodes: d.o.RepoNodes, ISOSize: d.o.ISOSize, Archives: d.o.EarlyArchives,
		UndrainableBudgets: d.o.UndrainableBudgets, Certificates: d.o.Certificates, CertificatesNote: d.o.CertificatesNote,
		Plans: d.o.Plans}
	if d.o.Version != nil {
		f.ISOChecksum = d.o.Version.Spec.ISOChecksum
	}
	return f
}
