package sequencer

import (
	"time"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/isorelease"
	"github.com/upgrade-repo/upgrade-repo/policy"
	"github.com/upgrade-repo/upgrade-repo/release"
)

// NodeInfo is what Decide needs to know of a node.
type NodeInfo struct {
	Name          string
	ControlPlane  bool
	Ready         bool
	Unschedulable bool
	// KubeletVersion is the version the node's kubelet reports (status.nodeInfo.kubeletVersion);
	// empty when unknown.
	KubeletVersion string
	// BootID is the node's boot ID (status.nodeInfo.bootID), which changes when it reboots;
	// empty when unknown.
	BootID string
	// NotReadySince is when a node that is not Ready stopped being Ready (its Ready
	// condition's last transition); zero for a Ready node or when unknown.
	NotReadySince time.Time
	// Zone is the node's failure domain (the topology.kubernetes.io/zone label); empty when
	// unset. No two nodes of one zone are upgraded at once.
	Zone string
}

// JobState is what a Job the plan created has come to.
type JobState struct {
	// Exists is false when there is no such Job.
	Exists bool
	// Succeeded and Failed are set once the Job finished.
	Succeeded, Failed bool
	// Message says why the Job failed.
	Message string
	// FailedAt is when the Job was marked failed (its Failed condition's transition); zero when
	// it did not fail or does not say.
	FailedAt time.Time
	// Started and Completed are when the Job started and, once it succeeded, completed; zero
	// when unknown.
	Started, Completed time.Time
	// Orphaned names the Job's pods that a reboot of their node left Pending for good: created
	// but never started, while the node is back. The kubelet never fails them, so the Job
	// would never run the step again.
	Orphaned []string
	// Stuck says why a running Job's pod cannot make progress (an image that cannot be pulled, a
	// container that keeps crashing); empty otherwise.
	Stuck string
}

// SUCProgress is how far system-upgrade-controller's Plans have come.
type SUCProgress struct {
	// Exists is false until the Plans are created.
	Exists bool
	// Upgraded names the nodes the Plans have upgraded.
	Upgraded []string
}

// Observation is what the Reconciler saw for one plan. Decide reads it and never changes it.
type Observation struct {
	// Now is the time of the observation.
	Now time.Time
	// Plan is the plan as read.
	Plan *v1beta1.UpgradePlan
	// Version is the plan's Version; nil when it does not exist.
	Version *v1beta1.Version
	// Installed is the recorded installed version.
	Installed Installed
	// PlansInFlight names the other plans that hold the cluster.
	PlansInFlight []string
	// Nodes are the cluster's nodes.
	Nodes []NodeInfo
	// RepoNodes are the agents' reports by node name, with what each node's upgrade step last
	// reported (Step).
	RepoNodes map[string]*v1beta1.RepoNodeStatus
	// ReadyEndpoints counts the Ready endpoints of the repo Service.
	ReadyEndpoints int
	// Release and ReleaseErr are the release metadata read through the repo Service; only in
	// MetadataPopulating.
	Release    *release.Release
	ReleaseErr error
	// EarlyRelease is the release metadata read from the Version's ISO URL through Range
	// requests, before any download; EarlyReleaseErr says why it is nil. Only in Initializing.
	// Those bytes are not covered by the ISO's sha512 yet: they may refuse a plan, never allow
	// one that the verified metadata would refuse.
	EarlyRelease    *release.Release
	EarlyReleaseErr error
	// EarlyArchives are the image archives of the ISO read with EarlyRelease, for the disk
	// forecast. Only in Initializing.
	EarlyArchives []isorelease.Archive
	// Certificates are the control-plane certificates read before the plan starts, and
	// CertificatesNote what could not be read. Only in Initializing.
	Certificates     []policy.Certificate
	CertificatesNote string
	// UndrainableBudgets say which PodDisruptionBudgets no drain can ever satisfy
	// (Facts.UndrainableBudgets).
	UndrainableBudgets []string
	// Plans are the cluster's UpgradePlans (Facts.Plans), for the time estimate the
	// certificates must outlast.
	Plans []v1beta1.UpgradePlan
	// ClusterJob is the state of the cluster Job.
	ClusterJob JobState
	// NodeJobs are the states of the node Jobs by node name.
	NodeJobs map[string]JobState
	// PodsToEvict counts, for the nodes being drained, the pods a drain must still evict.
	PodsToEvict map[string]int
	// Disruptions are the PodDisruptionBudgets with pods to evict, for the choice of the
	// nodes upgraded together (Joinable). Only in Initializing, MetadataPopulating and
	// NodeUpgrading.
	Disruptions []Disruption
	// SUC is the progress of system-upgrade-controller's Plans, with that executor.
	SUC SUCProgress
	// UpgradeImage is the image the plan's Jobs run: the plan's own or the sequencer's default.
	UpgradeImage string
	// ISOSize is the size of the Version's ISO as its origin announces it; 0 when unknown. Only
	// in Initializing.
	ISOSize int64
	// DrainWarnings name, before anything is downloaded, what will make a drain wait or cost
	// availability (a PodDisruptionBudget allowing no disruption, a workload with one replica).
	// Only in Initializing.
	DrainWarnings []string
	// ControlPlaneNotReady names, for the control-plane nodes and the nodes rejoining after
	// their node step, the control-plane pods on them that are not Ready. Only in NodeUpgrading
	// and NodeUpgraded.
	ControlPlaneNotReady map[string][]string
	// ControlPlaneImages gives, for the control-plane nodes, the image each control-plane
	// component's pod runs, by component (kube-apiserver, kube-controller-manager,
	// kube-scheduler, etcd). Only in NodeUpgrading and NodeUpgraded.
	ControlPlaneImages map[string]map[string]string
	// KubernetesVersion is the control plane's Kubernetes version (Facts.KubernetesVersion);
	// empty when unknown.
	KubernetesVersion string
	// DrainBlocked names, for the nodes being drained, the pods whose eviction a
	// PodDisruptionBudget refused. Only the drain itself can find out: the Reconciler fills it
	// in after applying a decision's drains, and decides again.
	DrainBlocked map[string][]string
	// PreviousVersion is the Version the plan upgraded from (status.previousVersion), nil when
	// it does not exist. Only in CleaningUp, where the soak keeps its ISO.
	PreviousVersion *v1beta1.Version
	// Rollbacks are the plans that roll this one back (their spec.rollback names it). Only in
	// Succeeded, while the soak lasts.
	Rollbacks []RollbackState
	// RollbackOf is, for a rollback, the plan it rolls back; nil when it does not exist. Only
	// in Initializing.
	RollbackOf *v1beta1.UpgradePlan
	// Compat is true when compatibility mode publishes the plan's repo under a name derived
	// from the plan's (CompatName), which must then be a DNS label.
	Compat bool
}
