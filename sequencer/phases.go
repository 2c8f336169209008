package sequencer

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// Step is one step of a plan: the phase while it runs, the phase once done, and what it does.
type Step struct {
	Running v1beta1.Phase
	Done    v1beta1.Phase
	// What says what the step does, for humans.
	What string
}

// Steps lists the steps of a plan in the order they run.
var Steps = []Step{
	{v1beta1.PhaseInitializing, v1beta1.PhaseInitialized, "read the release from the ISO's URL (ranges), check the upgrade policies and snapshot the Version"},
	{v1beta1.PhaseISODownloading, v1beta1.PhaseISODownloaded, "every agent acquires the ISO (local copy, then peers, then origin) and verifies it"},
	{v1beta1.PhaseRepoCreating, v1beta1.PhaseRepoCreated, "agents serve the ISO and turn Ready behind the repo Service"},
	{v1beta1.PhaseMetadataPopulating, v1beta1.PhaseMetadataPopulated, "read the release metadata through the Service and check the policies again"},
	{v1beta1.PhaseImagePreloading, v1beta1.PhaseImagePreloaded, "every node preloads the release's images from its own copy of the ISO"},
	{v1beta1.PhaseClusterUpgrading, v1beta1.PhaseClusterUpgraded, "run the upgrade image's cluster Job"},
	{v1beta1.PhaseNodeUpgrading, v1beta1.PhaseNodeUpgraded, "upgrade control-plane nodes one at a time, then the others, each once the cluster is whole: cordon, drain, node Job, uncordon, rejoin; then check the nodes run the release's Kubernetes"},
	{v1beta1.PhaseCleaningUp, v1beta1.PhaseCleanedUp, "remove the Jobs, let agents drop the ISO, record the installed version"},
}

// ControlPlaneLabels are the node labels that mark a control-plane node.
var ControlPlaneLabels = []string{
	"node-role.kubernetes.io/control-plane",
	"node-role.kubernetes.io/master",
	"node-role.kubernetes.io/etcd",
}

// IsControlPlane reports whether n carries one of ControlPlaneLabels.
func IsControlPlane(n *corev1.Node) bool {
	for _, l := range ControlPlaneLabels {
		if _, ok := n.Labels[l]; ok {
			return true
		}
	}
	return false
}

// IsReady reports whether n's Ready condition is True.
func IsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// notReadySince is when node n stopped being Ready, or zero when it is Ready or does not say.
func notReadySince(n *corev1.Node) time.Time {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}
