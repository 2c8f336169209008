package v1beta1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Mode says whether an UpgradePlan runs straight through or waits for approval.
// +kubebuilder:validation:Enum=automatic;interactive
type Mode string

const (
	// ModeAutomatic runs every phase without waiting.
	ModeAutomatic Mode = "automatic"
	// ModeInteractive waits before ClusterUpgrading and before each node until ApproveAnnotation
	// names it.
	ModeInteractive Mode = "interactive"
)

// ApproveAnnotation is set by the user on an UpgradePlan in interactive mode. It lists what may
// go on, separated by commas: "cluster" lets ClusterUpgrading start, a node's name lets that
// node be upgraded. The sequencer only reads it.
const ApproveAnnotation = "management.harvesterhci.io/approve"

// RetryAnnotation is set by the user on a Failed UpgradePlan to resume it from where it failed:
// each new value (a timestamp, a counter) asks for one more attempt. The sequencer records the
// value it acted on in status.observedRetry.
const RetryAnnotation = "management.harvesterhci.io/retry"

// FinalizeAnnotation is set by the operator on a Succeeded UpgradePlan to end its soak before
// spec.soak has passed: the previous release can no longer be rolled back to, and its cleanup
// runs. Any non-empty value asks for it; the sequencer records the end in status.soak.
const FinalizeAnnotation = "management.harvesterhci.io/finalize"

// DefaultSoak is the soak of a plan whose spec.soak is unset.
const DefaultSoak = 24 * time.Hour

// ApproveCluster is the ApproveAnnotation item that lets ClusterUpgrading start.
const ApproveCluster = "cluster"

// Executor names how NodeUpgrading upgrades the nodes.
// +kubebuilder:validation:Enum=Job;SystemUpgradeController
type Executor string

const (
	// ExecutorJob makes the sequencer upgrade each node itself: cordon, drain through the
	// Eviction API, a Job pinned to the node, uncordon.
	ExecutorJob Executor = "Job"
	// ExecutorSystemUpgradeController creates upgrade.cattle.io/v1 Plans for a
	// system-upgrade-controller already running in the cluster and follows them.
	ExecutorSystemUpgradeController Executor = "SystemUpgradeController"
)

// ImagePreloadOption tunes ImagePreloading.
type ImagePreloadOption struct {
	// Concurrency is how many nodes preload at the same time; 0 means all of them.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Concurrency int `json:"concurrency,omitempty"`
}

// NodeUpgradeOption tunes NodeUpgrading.
type NodeUpgradeOption struct {
	// PauseNodes lists nodes that must not be upgraded for now; the plan waits for them to be
	// removed from the list.
	// +optional
	PauseNodes []string `json:"pauseNodes,omitempty"`
	// Concurrency is how many nodes that are not control-plane nodes are upgraded at the same
	// time; 0 means one. Control-plane nodes are always upgraded one at a time.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Concurrency int `json:"concurrency,omitempty"`
	// Executor picks how nodes are upgraded; Job when empty.
	// +optional
	Executor Executor `json:"executor,omitempty"`
	// SkipNodes lists nodes the plan gives up on (a node that died and does not come back):
	// the plan finishes without them, each shown Skipped at the version it had, where the
	// version-skew rules let its kubelet stay there. A control-plane node is never skipped.
	// A node listed while its step runs is skipped once the step ends.
	// +optional
	SkipNodes []string `json:"skipNodes,omitempty"`
	// Nodes, when set, limits the plan to these nodes: the other nodes are left as they are
	// (a node skipped by an earlier plan, upgraded alone once it is back).
	// +optional
	Nodes []string `json:"nodes,omitempty"`
}

// UpgradePlanSpec is the user's request.
type UpgradePlanSpec struct {
	// Version is the name of the Version to upgrade to.
	// +kubebuilder:validation:MinLength=1
	Version string `json:"version"`
	// Upgrade is the container image that runs the release's upgrade steps; the sequencer's
	// default image when empty.
	// +optional
	Upgrade *string `json:"upgrade,omitempty"`
	// Force turns the failures of skippable upgrade policies into warnings.
	// +optional
	Force bool `json:"force,omitempty"`
	// AllowPrerelease allows a pre-release target (v1.6.0-rc1) without Force.
	// +optional
	AllowPrerelease bool `json:"allowPrerelease,omitempty"`
	// Mode is automatic (the default) or interactive.
	// +kubebuilder:default=automatic
	// +optional
	Mode Mode `json:"mode,omitempty"`
	// ImagePreloadOption tunes ImagePreloading.
	// +optional
	ImagePreloadOption *ImagePreloadOption `json:"imagePreloadOption,omitempty"`
	// NodeUpgradeOption tunes NodeUpgrading.
	// +optional
	NodeUpgradeOption *NodeUpgradeOption `json:"nodeUpgradeOption,omitempty"`
	// Soak is how long, once the plan has Succeeded, the previous release stays ready for a
	// rollback: its ISO kept in the nodes' caches and its images pinned. Its cleanup runs when
	// the soak ends or the plan is finalized (FinalizeAnnotation). DefaultSoak when unset; 0
	// cleans the previous release up as soon as the plan succeeds.
	// +optional
	Soak *metav1.Duration `json:"soak,omitempty"`
	// Rollback makes the plan the rollback of a Succeeded plan's upgrade, to the release that
	// plan upgraded from, with the ISO and images its soak kept. Only a patch downgrade within
	// one minor version, during that plan's soak; the rule against a downgrade is lifted for
	// this plan alone.
	// +optional
	Rollback *RollbackSpec `json:"rollback,omitempty"`
}

// RollbackSpec names the upgrade a plan rolls back.
type RollbackSpec struct {
	// Plan is the Succeeded UpgradePlan whose upgrade is rolled back: its version must be the
	// installed one, its soak still on, and its previous version this plan's version.
	// +kubebuilder:validation:MinLength=1
	Plan string `json:"plan"`
}

// Reasons a soak ends, in SoakStatus.EndReason.
const (
	// SoakExpired: spec.soak passed.
	SoakExpired = "Expired"
	// SoakFinalized: the operator finalized the plan (FinalizeAnnotation).
	SoakFinalized = "Finalized"
	// SoakRolledBack: a rollback plan took the cluster back to the previous release.
	SoakRolledBack = "RolledBack"
	// SoakNothingKept: nothing could be kept for a rollback (the previous release or its ISO is
	// not known).
	SoakNothingKept = "NothingKept"
)

// SoakStatus is the record of a plan's soak: the previous release kept for a rollback, and
// until when.
type SoakStatus struct {
	// PreviousVersion is the release kept, the one the plan upgraded from.
	// +optional
	PreviousVersion string `json:"previousVersion,omitempty"`
	// ISOURL and ISOChecksum name the previous release's ISO, which the agents keep in their
	// caches while the soak lasts.
	// +optional
	ISOURL string `json:"isoURL,omitempty"`
	// ISOChecksum is the SHA-512 of the previous release's ISO.
	// +optional
	ISOChecksum string `json:"isoChecksum,omitempty"`
	// Started is when the soak began (the plan's CleaningUp).
	Started metav1.Time `json:"started"`
	// Until is when the soak ends unless the plan is finalized before: the last moment a
	// rollback may start.
	Until metav1.Time `json:"until"`
	// Ended is when the soak ended; unset while it lasts. From then on the previous release is
	// cleaned up (unless it was rolled back to).
	// +optional
	Ended *metav1.Time `json:"ended,omitempty"`
	// EndReason is Expired, Finalized, RolledBack or NothingKept once the soak ended.
	// +optional
	EndReason string `json:"endReason,omitempty"`
	// Message says what was kept, or why nothing was.
	// +optional
	Message string `json:"message,omitempty"`
}

// Phase is where an UpgradePlan stands. Each step is an -ing phase while it runs and an -ed
// phase once done; Succeeded and Failed are final.
type Phase string

// ReasonAwaitingNodeMeasures is the Progressing condition's reason while the sequencer's
// pre-flight waits for the agents to measure the plan's release against their containerd (the
// RepoNodes' status.forecast): the agents measure while a plan says so, and never for a plan its
// other policies refuse.
const ReasonAwaitingNodeMeasures = "AwaitingNodeMeasures"

// ReasonFirstNodeFailed is the reason of the failed node's row when the release failed on the
// plan's first control-plane node with no other node touched: kubeadm restored that node's
// manifests, so it runs the previous version, and aborting the plan uncordons it.
const ReasonFirstNodeFailed = "FirstNodeFailed"

// The phases in the order they run.
const (
	PhaseInitializing       Phase = "Initializing"
	PhaseInitialized        Phase = "Initialized"
	PhaseISODownloading     Phase = "ISODownloading"
	PhaseISODownloaded      Phase = "ISODownloaded"
	PhaseRepoCreating       Phase = "RepoCreating"
	PhaseRepoCreated        Phase = "RepoCreated"
	PhaseMetadataPopulating Phase = "MetadataPopulating"
	PhaseMetadataPopulated  Phase = "MetadataPopulated"
	PhaseImagePreloading    Phase = "ImagePreloading"
	PhaseImagePreloaded     Phase = "ImagePreloaded"
	PhaseClusterUpgrading   Phase = "ClusterUpgrading"
	PhaseClusterUpgraded    Phase = "ClusterUpgraded"
	PhaseNodeUpgrading      Phase = "NodeUpgrading"
	PhaseNodeUpgraded       Phase = "NodeUpgraded"
	PhaseCleaningUp         Phase = "CleaningUp"
	PhaseCleanedUp          Phase = "CleanedUp"
	PhaseSucceeded          Phase = "Succeeded"
	PhaseFailed             Phase = "Failed"
)

// Condition types of an UpgradePlan.
const (
	// ConditionAvailable is True once the plan has succeeded, False while it runs or after it
	// failed.
	ConditionAvailable = "Available"
	// ConditionProgressing is True while the plan runs.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True while the plan cannot proceed, with the reason, and after it
	// failed.
	ConditionDegraded = "Degraded"
	// ConditionReleaseJudged is True when the release was read from the ISO's URL and judged
	// before any download, False when it is judged only after the download (the origin does
	// not serve ranges, or could not be read).
	ConditionReleaseJudged = "ReleaseJudged"
)

// PhaseTransitionTimestamp records when the plan entered a phase.
type PhaseTransitionTimestamp struct {
	// Phase is the phase entered.
	Phase Phase `json:"phase"`
	// PhaseTransitionTimestamp is when it was entered.
	PhaseTransitionTimestamp metav1.Time `json:"phaseTransitionTimestamp"`
}

// NodeState is a node's state within a plan.
type NodeState string

// Node states, in the order a node goes through them.
const (
	NodeImagePreloadPending NodeState = "ImagePreloadPending"
	NodeImagePreloading     NodeState = "ImagePreloading"
	NodeImagePreloaded      NodeState = "ImagePreloaded"
	NodeImagePreloadFailed  NodeState = "ImagePreloadFailed"
	NodeUpgradePending      NodeState = "UpgradePending"
	NodeUpgradePaused       NodeState = "UpgradePaused"
	NodeCordoned            NodeState = "Cordoned"
	NodeUpgrading           NodeState = "Upgrading"
	// NodeKubernetesUpgrading, NodeKubernetesUpgraded, NodeOSUpgrading and NodeOSUpgraded are
	// the stages the node's upgrade step reported (RepoNodeStep) while it runs.
	NodeKubernetesUpgrading NodeState = "KubernetesUpgrading"
	NodeKubernetesUpgraded  NodeState = "KubernetesUpgraded"
	NodeOSUpgrading         NodeState = "OSUpgrading"
	NodeOSUpgraded          NodeState = "OSUpgraded"
	// NodeRejoining: the node step succeeded and the node was uncordoned; the next node waits
	// until this one is Ready, its agent reports again and its control-plane pods are Ready.
	NodeRejoining     NodeState = "Rejoining"
	NodeUpgraded      NodeState = "Upgraded"
	NodeUpgradeFailed NodeState = "UpgradeFailed"
	// NodeSkipped: the operator gave up on the node (nodeUpgradeOption.skipNodes); the plan
	// finished without it and it stays at the version it had.
	NodeSkipped NodeState = "Skipped"
)

// ControlPlaneVersions are the versions of a control-plane node's static pods, as the tags of
// their images.
type ControlPlaneVersions struct {
	// APIServer is kube-apiserver's.
	// +optional
	APIServer string `json:"apiServer,omitempty"`
	// ControllerManager is kube-controller-manager's.
	// +optional
	ControllerManager string `json:"controllerManager,omitempty"`
	// Scheduler is kube-scheduler's.
	// +optional
	Scheduler string `json:"scheduler,omitempty"`
	// Etcd is etcd's.
	// +optional
	Etcd string `json:"etcd,omitempty"`
}

// NodeUpgradeStatus is one node's state within a plan, aggregated by the sequencer from the node's
// RepoNode and from what it did to the node.
type NodeUpgradeStatus struct {
	// State is where the node stands.
	// +optional
	State NodeState `json:"state,omitempty"`
	// Reason is a CamelCase word for the state, set when something went wrong or is waited for.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says what happened, for humans.
	// +optional
	Message string `json:"message,omitempty"`
	// ImagesDone and ImagesTotal count the images preloaded.
	// +optional
	ImagesDone int64 `json:"imagesDone,omitempty"`
	// ImagesTotal is the number of images to preload.
	// +optional
	ImagesTotal int64 `json:"imagesTotal,omitempty"`
	// BytesDone is how many archive bytes were preloaded.
	// +optional
	BytesDone int64 `json:"bytesDone,omitempty"`
	// BytesTotal is how many archive bytes there are to preload.
	// +optional
	BytesTotal int64 `json:"bytesTotal,omitempty"`
	// StateTime is when the node entered State.
	// +optional
	StateTime *metav1.Time `json:"stateTime,omitempty"`
	// UpgradeStartTime is when the plan cordoned the node to upgrade it; with StateTime once
	// the node is Upgraded, it is how long the node's upgrade took, which later plans' time
	// estimates rest on.
	// +optional
	UpgradeStartTime *metav1.Time `json:"upgradeStartTime,omitempty"`
	// KubeletVersionBefore is the kubelet version the node reported when the plan started.
	// +optional
	KubeletVersionBefore string `json:"kubeletVersionBefore,omitempty"`
	// KubeletVersion is the kubelet version the node reports now.
	// +optional
	KubeletVersion string `json:"kubeletVersion,omitempty"`
	// TargetKubeletVersion is the kubelet version the release brings (its Kubernetes version).
	// +optional
	TargetKubeletVersion string `json:"targetKubeletVersion,omitempty"`
	// ControlPlane is, on a control-plane node, the versions its static pods run now.
	// +optional
	ControlPlane *ControlPlaneVersions `json:"controlPlane,omitempty"`
	// BootID is the node's boot ID as the plan last saw it: when the node reports another one,
	// it rebooted, and the plan records an event NodeRebooted.
	// +optional
	BootID string `json:"bootID,omitempty"`
	// LastProgressTime is when the node last moved: a new state or reason, or more bytes or
	// images done. A node that has not moved for the sequencer's node stall time makes the
	// plan Degraded.
	// +optional
	LastProgressTime *metav1.Time `json:"lastProgressTime,omitempty"`
	// Times are when the node went through each transition of NodeUpgrading, to the
	// microsecond: what the plan's timings are read from.
	// +optional
	Times *NodeTimes `json:"times,omitempty"`
}

// NodeTimes are when a node went through the transitions of NodeUpgrading. Cordoned, Drained,
// JobCreated and Upgraded are the sequencer's own acts; StepStarted and StepCompleted are the
// node Job's, as Kubernetes records them (to the second). Each is set once per attempt.
type NodeTimes struct {
	// Cordoned is when the node's turn began: the sequencer cordoned it.
	// +optional
	Cordoned *metav1.MicroTime `json:"cordoned,omitempty"`
	// DrainStarted is when the sequencer first evicted pods from the node; unset when the
	// node had none to evict.
	// +optional
	DrainStarted *metav1.MicroTime `json:"drainStarted,omitempty"`
	// JobCreated is when the node was found drained and its node Job was asked for.
	// +optional
	JobCreated *metav1.MicroTime `json:"jobCreated,omitempty"`
	// StepStarted is the node Job's start time.
	// +optional
	StepStarted *metav1.MicroTime `json:"stepStarted,omitempty"`
	// StepCompleted is the node Job's completion time.
	// +optional
	StepCompleted *metav1.MicroTime `json:"stepCompleted,omitempty"`
	// StepSeen is when the sequencer saw the node Job succeeded and uncordoned the node.
	// +optional
	StepSeen *metav1.MicroTime `json:"stepSeen,omitempty"`
	// Upgraded is when the sequencer found the node whole again and marked it Upgraded.
	// +optional
	Upgraded *metav1.MicroTime `json:"upgraded,omitempty"`
}

// ReleaseMetadata is the release metadata of the target, read through the repo Service.
type ReleaseMetadata struct {
	// Harvester is the release's version.
	Harvester string `json:"harvester,omitempty"`
	// HarvesterChart is the version of the Harvester chart.
	HarvesterChart string `json:"harvesterChart,omitempty"`
	// OS is the operating system's release name.
	OS string `json:"os,omitempty"`
	// Kubernetes is the Kubernetes version.
	Kubernetes string `json:"kubernetes,omitempty"`
	// Rancher is the Rancher version.
	Rancher string `json:"rancher,omitempty"`
	// MonitoringChart is the version of the monitoring chart.
	MonitoringChart string `json:"monitoringChart,omitempty"`
	// LoggingChart is the version of the logging chart.
	LoggingChart string `json:"loggingChart,omitempty"`
	// Kubevirt is the KubeVirt version.
	Kubevirt string `json:"kubevirt,omitempty"`
	// MinUpgradableVersion is the oldest version that may upgrade to this release.
	MinUpgradableVersion string `json:"minUpgradableVersion,omitempty"`
	// Etcd is the etcd image tag the release's control plane runs (kubeadm releases).
	Etcd string `json:"etcd,omitempty"`
	// CoreDNS is the CoreDNS image tag the release's cluster runs (kubeadm releases).
	CoreDNS string `json:"coredns,omitempty"`
}

// AgentInstructions is what the sequencer asks of the node agents. Agents read it; only the
// sequencer writes it.
type AgentInstructions struct {
	// ISOURL and ISOChecksum name the ISO every agent must acquire, verify and serve while Hold
	// is true.
	// +optional
	ISOURL string `json:"isoURL,omitempty"`
	// ISOChecksum is the SHA-512 the ISO must have.
	// +optional
	ISOChecksum string `json:"isoChecksum,omitempty"`
	// Hold is true while agents must keep the ISO; once false they may drop it.
	// +optional
	Hold bool `json:"hold,omitempty"`
	// PreloadNodes lists the nodes that may preload the release's images now.
	// +optional
	PreloadNodes []string `json:"preloadNodes,omitempty"`
}

// UpgradePlanStatus is the sequencer's record of a plan. A restarted sequencer resumes from it.
type UpgradePlanStatus struct {
	// Conditions are Available, Progressing and Degraded.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Phase is the current phase.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// FailedPhase is the phase that failed, once Phase is Failed.
	// +optional
	FailedPhase Phase `json:"failedPhase,omitempty"`
	// PhaseTransitionTimestamps records when each phase was entered, in order.
	// +optional
	PhaseTransitionTimestamps []PhaseTransitionTimestamp `json:"phaseTransitionTimestamps,omitempty"`
	// NodeUpgradeStatuses holds each node's state, keyed by node name. The sequencer alone
	// writes it: the map is one field for the API server's field management (atomic), so that
	// the plan's managedFields do not list every node's every field (a third of the plan, at
	// 1,000 nodes, that each write made the API server recompute and each watch event carried).
	// +optional
	// +mapType=atomic
	NodeUpgradeStatuses map[string]NodeUpgradeStatus `json:"nodeUpgradeStatuses,omitempty"`
	// PreviousVersion is the version installed when the plan started.
	// +optional
	PreviousVersion string `json:"previousVersion,omitempty"`
	// ReleaseMetadata is the target release's metadata.
	// +optional
	ReleaseMetadata *ReleaseMetadata `json:"releaseMetadata,omitempty"`
	// Version is a snapshot of the Version's spec taken when the plan started.
	// +optional
	Version *VersionSpec `json:"version,omitempty"`
	// ISOImageID identifies the ISO in use: its SHA-512 when the Version gives one, its URL
	// otherwise.
	// +optional
	ISOImageID string `json:"isoImageID,omitempty"`
	// Agents is what the node agents are asked to do.
	// +optional
	Agents *AgentInstructions `json:"agents,omitempty"`
	// Warnings are the findings of the pre-flight checks that do not stop the plan (a drain
	// that will wait on a PodDisruptionBudget, a workload with one replica, little free space)
	// and the skippable checks that Force let through.
	// +optional
	Warnings []string `json:"warnings,omitempty"`
	// ObservedRetry is the value of RetryAnnotation the sequencer last acted on.
	// +optional
	ObservedRetry string `json:"observedRetry,omitempty"`
	// Retries counts the times the plan was resumed after it failed.
	// +optional
	Retries int `json:"retries,omitempty"`
	// ObservedGeneration is the generation of the spec the status was last computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Soak is the record of the soak after the plan Succeeded; unset when there is none.
	// +optional
	Soak *SoakStatus `json:"soak,omitempty"`
	// DiskForecast is, for every node of the plan, what the pre-flight predicted the plan adds
	// to its disk, against the free space the node reported; unset when the plan started
	// without the figures (an ISO whose archives could not be read before the download).
	// +optional
	// +listType=atomic
	DiskForecast []NodeDiskForecast `json:"diskForecast,omitempty"`
}

// NodeDiskForecast is what the pre-flight predicted the plan adds to one node's disk.
type NodeDiskForecast struct {
	// Node is the node's name.
	Node string `json:"node"`
	// ISOBytes is what the ISO adds to the node cache (0 when the node held it).
	// +optional
	ISOBytes int64 `json:"isoBytes,omitempty"`
	// ImagesStoredBytes is what the release's images the node lacked add to containerd's
	// content store.
	// +optional
	ImagesStoredBytes int64 `json:"imagesStoredBytes,omitempty"`
	// ImagesUnpackedBytes is what their unpacked snapshots add besides.
	// +optional
	ImagesUnpackedBytes int64 `json:"imagesUnpackedBytes,omitempty"`
	// ImagesArchiveBytes is how many compressed archive bytes the node's preload reads: the
	// whole of every archive of which the node lacked an image. The time estimate's total for
	// the preload, before the agent learns each archive's size as it opens it.
	// +optional
	ImagesArchiveBytes int64 `json:"imagesArchiveBytes,omitempty"`
	// ImagesMissing is how many of the release's images the node lacked.
	// +optional
	ImagesMissing int32 `json:"imagesMissing,omitempty"`
	// Estimated is true when an archive did not say its unpacked size and it was assumed.
	// +optional
	Estimated bool `json:"estimated,omitempty"`
	// ImagesBasis says how the images' bytes were counted: Measured (the node's agent checked
	// the release's blobs against its containerd, status.forecast of its RepoNode), Blobs (the
	// release's blob index, each blob counted unless the node held the release) or Images (the
	// archives' sizes, by image).
	// +optional
	// +kubebuilder:validation:Enum=Measured;Blobs;Images
	ImagesBasis string `json:"imagesBasis,omitempty"`
	// CleanupBytes is what the cleanup of the previous release frees on the node once it runs
	// (CleanupAfter), as its agent measured it: never room for this plan, whose bytes land
	// before it. Unset when unknown.
	// +optional
	CleanupBytes int64 `json:"cleanupBytes,omitempty"`
	// CleanupAfter says when that cleanup runs: "after the plan" or "after the soak".
	// +optional
	CleanupAfter string `json:"cleanupAfter,omitempty"`
	// Filesystems are the file systems the bytes land on, as the node reported them.
	// +optional
	// +listType=atomic
	Filesystems []FilesystemForecast `json:"filesystems,omitempty"`
}

// FilesystemForecast is one file system of a node before and after the plan's bytes.
type FilesystemForecast struct {
	// Path is where the node measured it.
	// +optional
	Path string `json:"path,omitempty"`
	// What names what lands on it: ISO, images, or ISO and images.
	What string `json:"what"`
	// FreeBytes and TotalBytes are its free space and size when the plan started.
	// +optional
	FreeBytes int64 `json:"freeBytes,omitempty"`
	// TotalBytes is its size.
	// +optional
	TotalBytes int64 `json:"totalBytes,omitempty"`
	// AddedBytes is what the plan adds to it.
	// +optional
	AddedBytes int64 `json:"addedBytes,omitempty"`
	// UsedPercentAfter is its predicted use once the bytes landed, in whole percent.
	// +optional
	UsedPercentAfter int32 `json:"usedPercentAfter,omitempty"`
	// ImageGCHighPercent is the kubelet's image GC threshold that applies to it; 0 when it
	// holds no images.
	// +optional
	ImageGCHighPercent int32 `json:"imageGCHighPercent,omitempty"`
}

// UpgradePlan asks for the cluster to be upgraded to a Version; its status records the
// progress.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName={up,ups}
// +kubebuilder:printcolumn:name="VERSION",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="PHASE",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="AVAILABLE",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
// +kubebuilder:printcolumn:name="PROGRESSING",type=string,JSONPath=`.status.conditions[?(@.type=="Progressing")].status`
// +kubebuilder:printcolumn:name="DEGRADED",type=string,JSONPath=`.status.conditions[?(@.type=="Degraded")].status`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type UpgradePlan struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the request.
	Spec UpgradePlanSpec `json:"spec"`
	// Status is the sequencer's record of the plan.
	// +optional
	Status UpgradePlanStatus `json:"status,omitempty"`
}

// UpgradePlanList is a list of UpgradePlans.
//
// +kubebuilder:object:root=true
type UpgradePlanList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the UpgradePlans.
	Items []UpgradePlan `json:"items"`
}
