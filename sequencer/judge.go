package sequencer

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
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
	// Batches are the other nodes in the batches they are upgraded in, with the plan's
	// concurrency, when each node takes as long (WorkerBatches).
	Batches [][]string
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
	j := Judgement{Input: in, Result: policy.Evaluate(in)}
	j.ControlPlaneNodes, j.OtherNodes = NodeOrder(nodes)
	j.Batches = WorkerBatches(orderedInfos(nodes, j.OtherNodes), nodeConcurrency(p), f.Disruptions)
	return j
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
		PlansInFlight: f.PlansInFlight, Nodes: NodeInfos(f.Nodes), KubernetesVersion: f.KubernetesVersion}
}

// judgeFacts are the facts of the observation that d's plan is judged on, with the release rel.
func (d *decider) judgeFacts(rel *release.Release) JudgeFacts {
	return JudgeFacts{Installed: d.o.Installed, VersionExists: d.o.Version != nil, PlansInFlight: d.o.PlansInFlight,
		Nodes: d.o.Nodes, KubernetesVersion: d.o.KubernetesVersion, Release: rel, Disruptions: d.o.Disruptions}
}
