package sequencer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/release"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// kubeadmCluster makes o a kubeadm cluster upgrading to Kubernetes target from before: every
// node's kubelet was before when the plan started and is now as given by now (before when
// absent), and the release names target and etcd.
func kubeadmCluster(o *sequencer.Observation, before, target, etcd string, now map[string]string) {
	o.Plan.Status.ReleaseMetadata = &v1beta1.ReleaseMetadata{Harvester: "v1.6.0", Kubernetes: target, Etcd: etcd}
	if o.Plan.Status.NodeUpgradeStatuses == nil {
		o.Plan.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
	}
	for i := range o.Nodes {
		n := &o.Nodes[i]
		n.KubeletVersion = before
		if v, ok := now[n.Name]; ok {
			n.KubeletVersion = v
		}
		s := o.Plan.Status.NodeUpgradeStatuses[n.Name]
		s.KubeletVersionBefore = before
		o.Plan.Status.NodeUpgradeStatuses[n.Name] = s
	}
}

// states sets the nodes' states, keeping the rest of their statuses.
func states(o *sequencer.Observation, st map[string]v1beta1.NodeState) {
	if o.Plan.Status.NodeUpgradeStatuses == nil {
		o.Plan.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
	}
	for n, v := range st {
		s := o.Plan.Status.NodeUpgradeStatuses[n]
		s.State = v
		o.Plan.Status.NodeUpgradeStatuses[n] = s
	}
}

// allAt is every node of obs at kubelet version v.
func allAt(v string) map[string]string {
	return map[string]string{"cp-1": v, "cp-2": v, "w-1": v, "w-2": v}
}

// kubeadmImages are the control-plane images of a kubeadm node at Kubernetes k and etcd e.
func kubeadmImages(k, e string) map[string]string {
	return map[string]string{
		"kube-apiserver":          "registry.k8s.io/kube-apiserver:" + k,
		"kube-controller-manager": "registry.k8s.io/kube-controller-manager:" + k,
		"kube-scheduler":          "registry.k8s.io/kube-scheduler:" + k,
		"etcd":                    "registry.k8s.io/etcd:" + e + "@sha256:0123",
	}
}

// cp1Upgraded is a plan in NodeUpgrading whose first control-plane node is upgraded.
func cp1Upgraded(mut ...func(*sequencer.Observation)) sequencer.Observation {
	return obs(v1beta1.PhaseNodeUpgrading, append([]func(*sequencer.Observation){func(o *sequencer.Observation) {
		states(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgraded})
	}}, mut...)...)
}

func TestDecideClusterGate(t *testing.T) {
	t.Parallel()
	cordonCP2 := []sequencer.Action{{Kind: sequencer.ActionCordon, Node: "cp-2"}}
	pendingCP2 := func(msg string) func(*testing.T, sequencer.Decision) {
		return func(t *testing.T, d sequencer.Decision) {
			s := d.Status.NodeUpgradeStatuses["cp-2"]
			require.Equal(t, v1beta1.NodeUpgradePending, s.State)
			require.Equal(t, "WaitingForCluster", s.Reason)
			require.Equal(t, msg, s.Message)
			require.Empty(t, d.Actions, "nothing is cordoned")
		}
	}
	runNodeCases(t, []nodeCase{
		{
			name: "a whole cluster lets the next node start", o: cp1Upgraded(func(o *sequencer.Observation) {
				kubeadmCluster(o, "v1.33.5", "v1.34.1", "", map[string]string{"cp-1": "v1.34.1"})
			}),
			phase: v1beta1.PhaseNodeUpgrading, actions: cordonCP2,
		},
		{
			name: "a node not Ready holds the next node", o: cp1Upgraded(func(o *sequencer.Observation) { o.Nodes[3].Ready = false }),
			phase: v1beta1.PhaseNodeUpgrading, progressing: "WaitingForCluster", message: "node cp-2 waits for node w-2 to be Ready",
			check: pendingCP2("waiting for node w-2 to be Ready"),
		},
		{
			name: "a control-plane pod not Ready holds the next node", o: cp1Upgraded(func(o *sequencer.Observation) {
				o.ControlPlaneNotReady = map[string][]string{"cp-1": {"kube-system/etcd-cp-1"}, "cp-2": {"kube-system/kube-scheduler-cp-2"}}
			}),
			phase: v1beta1.PhaseNodeUpgrading, progressing: "WaitingForCluster",
			message: "control-plane pods kube-system/etcd-cp-1 of node cp-1 to be Ready, control-plane pods kube-system/kube-scheduler-cp-2 of node cp-2 to be Ready",
			check:   pendingCP2("waiting for control-plane pods kube-system/etcd-cp-1 of node cp-1 to be Ready, control-plane pods kube-system/kube-scheduler-cp-2 of node cp-2 to be Ready"),
		},
		{
			name: "an upgraded node that no longer reports the release's kubelet holds the next node", o: cp1Upgraded(func(o *sequencer.Observation) {
				kubeadmCluster(o, "v1.33.5", "v1.34.1", "", nil)
			}),
			phase: v1beta1.PhaseNodeUpgrading, progressing: "WaitingForCluster",
			check: pendingCP2("waiting for upgraded node cp-1: kubelet v1.33.5, want v1.34.1"),
		},
		{
			name: "a release of another distribution is not held to the kubelets", o: cp1Upgraded(func(o *sequencer.Observation) {
				kubeadmCluster(o, "v1.34.0", "v1.32.7+rke2r1", "", nil)
			}),
			phase: v1beta1.PhaseNodeUpgrading, actions: cordonCP2,
		},
		{
			name: "the nodes in flight are not waited for: they are the concurrency's", o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				states(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgraded, "cp-2": v1beta1.NodeUpgraded, "w-1": v1beta1.NodeUpgrading})
				o.Nodes[2].Ready, o.Nodes[2].Unschedulable = false, true
				o.NodeJobs["w-1"] = sequencer.JobState{Exists: true}
			}),
			phase: v1beta1.PhaseNodeUpgrading, actions: []sequencer.Action{{Kind: sequencer.ActionCordon, Node: "w-2"}},
		},
		{
			name: "a paused node is held whatever the cluster", o: cp1Upgraded(func(o *sequencer.Observation) {
				o.Nodes[3].Ready = false
				o.Plan.Spec.NodeUpgradeOption.PauseNodes = []string{"cp-2"}
			}),
			phase: v1beta1.PhaseNodeUpgrading, progressing: "NodesHeld",
		},
		{
			name: "waiting for the cluster longer than the stall time is Degraded, naming the node and what it waits for", o: cp1Upgraded(func(o *sequencer.Observation) {
				o.Nodes[3].Ready = false
				s := o.Plan.Status.NodeUpgradeStatuses["cp-2"]
				s.State, s.Reason, s.Message, s.LastProgressTime = v1beta1.NodeUpgradePending, "WaitingForCluster", "waiting for node w-2 to be Ready", since(25*time.Minute)
				o.Plan.Status.NodeUpgradeStatuses["cp-2"] = s
			}),
			phase: v1beta1.PhaseNodeUpgrading, degraded: "WaitingForCluster",
			message: "node cp-2: UpgradePending (WaitingForCluster): waiting for node w-2 to be Ready, no progress since 2026-03-01T11:35:00Z (more than 20m0s)",
		},
	})
}

func TestDecideVersionsBeforeSucceeded(t *testing.T) {
	t.Parallel()
	upgraded := func(mut ...func(*sequencer.Observation)) sequencer.Observation {
		return obs(v1beta1.PhaseNodeUpgraded, append([]func(*sequencer.Observation){func(o *sequencer.Observation) {
			states(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgraded, "cp-2": v1beta1.NodeUpgraded, "w-1": v1beta1.NodeUpgraded, "w-2": v1beta1.NodeUpgraded})
		}}, mut...)...)
	}
	kubeadm := func(now map[string]string, images map[string]map[string]string) func(*sequencer.Observation) {
		return func(o *sequencer.Observation) {
			kubeadmCluster(o, "v1.33.5", "v1.34.1", "3.6.4-0", now)
			o.ControlPlaneImages = images
		}
	}
	good := map[string]map[string]string{"cp-1": kubeadmImages("v1.34.1", "3.6.4-0"), "cp-2": kubeadmImages("v1.34.1", "3.6.4-0")}
	runNodeCases(t, []nodeCase{
		{name: "the release's versions everywhere: on to CleaningUp", o: upgraded(kubeadm(allAt("v1.34.1"), good)), phase: v1beta1.PhaseCleaningUp},
		{
			name: "a kubelet not at the release's version is a mismatch", o: upgraded(kubeadm(map[string]string{"cp-1": "v1.34.1", "cp-2": "v1.34.1", "w-1": "v1.34.1"}, good)),
			phase: v1beta1.PhaseNodeUpgraded, degraded: "VersionMismatch", message: "node w-2: kubelet v1.33.5, want v1.34.1",
		},
		{
			name: "an API server on the old image is a mismatch", o: upgraded(kubeadm(allAt("v1.34.1"), map[string]map[string]string{
				"cp-1": kubeadmImages("v1.34.1", "3.6.4-0"),
				"cp-2": {"kube-apiserver": "registry.k8s.io/kube-apiserver:v1.33.5", "kube-scheduler": "registry.k8s.io/kube-scheduler:v1.34.1"},
			})),
			phase: v1beta1.PhaseNodeUpgraded, degraded: "VersionMismatch",
			message: "node cp-2: kube-apiserver runs registry.k8s.io/kube-apiserver:v1.33.5, want tag v1.34.1",
		},
		{
			name: "an etcd other than the release's is a mismatch", o: upgraded(kubeadm(allAt("v1.34.1"), map[string]map[string]string{
				"cp-1": kubeadmImages("v1.34.1", "3.5.21-0"), "cp-2": kubeadmImages("v1.34.1", "3.6.4-0"),
			})),
			phase: v1beta1.PhaseNodeUpgraded, degraded: "VersionMismatch",
			message: "node cp-1: etcd runs registry.k8s.io/etcd:3.5.21-0@sha256:0123, want tag 3.6.4-0",
		},
		{
			name: "every mismatch is named", o: upgraded(kubeadm(map[string]string{"cp-1": "v1.34.0"}, map[string]map[string]string{
				"cp-1": kubeadmImages("v1.34.0", "3.6.4-0"),
			})),
			phase: v1beta1.PhaseNodeUpgraded, degraded: "VersionMismatch", check: func(t *testing.T, d sequencer.Decision) {
				require.Len(t, d.Events, 1, "one Warning event when the plan turns Degraded")
				require.Equal(t, "VersionMismatch", d.Events[0].Reason)
				for _, want := range []string{
					"node cp-1: kubelet v1.34.0, want v1.34.1", "node cp-1: kube-apiserver runs registry.k8s.io/kube-apiserver:v1.34.0",
					"node cp-1: kube-scheduler", "node cp-1: kube-controller-manager", "node cp-2: kubelet v1.33.5", "node w-1: kubelet", "node w-2: kubelet",
				} {
					require.Contains(t, d.Events[0].Message, want)
				}
			},
		},
		{
			name: "the synthetic release (RKE2's Kubernetes over kind) is not checked", o: upgraded(func(o *sequencer.Observation) {
				kubeadmCluster(o, "v1.34.0", "v1.32.7+rke2r1", "", nil)
				o.ControlPlaneImages = map[string]map[string]string{"cp-1": kubeadmImages("v1.34.0", "3.6.4-0")}
			}),
			phase: v1beta1.PhaseCleaningUp,
		},
		{
			name: "an RKE2 cluster is held to its kubelets, not to image tags", o: upgraded(func(o *sequencer.Observation) {
				kubeadmCluster(o, "v1.32.7+rke2r1", "v1.33.3+rke2r1", "", map[string]string{"cp-1": "v1.33.3+rke2r1", "cp-2": "v1.33.3+rke2r1", "w-1": "v1.33.3+rke2r1"})
				o.ControlPlaneImages = map[string]map[string]string{"cp-1": {"kube-apiserver": "rancher/hardened-kubernetes:v1.33.3-rke2r1-build20250716"}}
			}),
			phase: v1beta1.PhaseNodeUpgraded, degraded: "VersionMismatch", message: "node w-2: kubelet v1.32.7+rke2r1, want v1.33.3+rke2r1",
			check: func(t *testing.T, d sequencer.Decision) {
				require.NotContains(t, d.Events[0].Message, "kube-apiserver")
			},
		},
		{
			name: "a release naming no Kubernetes version is not checked", o: upgraded(func(o *sequencer.Observation) {
				kubeadmCluster(o, "v1.33.5", "", "", nil)
			}),
			phase: v1beta1.PhaseCleaningUp,
		},
		{
			name: "nodes whose kubelet version is unknown are not checked", o: upgraded(func(o *sequencer.Observation) {
				o.Plan.Status.ReleaseMetadata = &v1beta1.ReleaseMetadata{Harvester: "v1.6.0", Kubernetes: "v1.34.1"}
			}),
			phase: v1beta1.PhaseCleaningUp,
		},
	})
}

func TestDecideKubernetesSkew(t *testing.T) {
	t.Parallel()
	populating := func(k8s string, mut ...func(*sequencer.Observation)) sequencer.Observation {
		return obs(v1beta1.PhaseMetadataPopulating, append([]func(*sequencer.Observation){func(o *sequencer.Observation) {
			o.Release = &release.Release{Harvester: "v1.6.0", Kubernetes: k8s}
			o.KubernetesVersion = "v1.34.1"
			kubelets(o, allAt("v1.34.1"))
		}}, mut...)...)
	}
	forceIt := func(o *sequencer.Observation) { o.Plan.Spec.Force = true }
	runNodeCases(t, []nodeCase{
		{name: "a minor Kubernetes upgrade goes on", o: populating("v1.35.0"), phase: v1beta1.PhaseMetadataPopulated},
		{
			name: "a Kubernetes downgrade fails the plan", o: populating("v1.33.5"),
			phase: v1beta1.PhaseFailed, degraded: "PolicyCheckFailed",
			message: "KubernetesNoDowngrade: the release's Kubernetes v1.33.5 is older than the control plane's v1.34.1",
		},
		{
			name: "two minor versions at once fail the plan", o: populating("v1.36.0"),
			phase: v1beta1.PhaseFailed, degraded: "PolicyCheckFailed", message: "KubernetesMinorStep: v1.34.1 to v1.36.0 skips 1 minor versions",
		},
		{
			name: "force turns the skew into a warning", o: populating("v1.36.0", forceIt), phase: v1beta1.PhaseMetadataPopulated,
			check: func(t *testing.T, d sequencer.Decision) {
				require.Contains(t, d.Events, sequencer.Event{Warning: true, Reason: "PolicyForced",
					Message: "KubernetesMinorStep: v1.34.1 to v1.36.0 skips 1 minor versions; upgrade one minor version at a time (forced)"})
			},
		},
		{name: "the synthetic release's RKE2 version over kind is not judged", o: populating("v1.32.7+rke2r1"), phase: v1beta1.PhaseMetadataPopulated},
		{
			name: "a kubelet newer than the control plane fails Initializing", o: initializing(20<<30, 6<<30, func(o *sequencer.Observation) {
				o.KubernetesVersion = "v1.33.5"
				kubelets(o, map[string]string{"cp-1": "v1.33.5", "cp-2": "v1.33.5", "w-1": "v1.33.5", "w-2": "v1.34.0"})
			}),
			phase: v1beta1.PhaseFailed, degraded: "PolicyCheckFailed", message: "node w-2: kubelet v1.34.0 is newer than the control plane's v1.33.5",
		},
		{
			name: "Initializing judges the kubelets, not the release it does not know yet", o: initializing(20<<30, 6<<30, func(o *sequencer.Observation) {
				o.KubernetesVersion = "v1.33.5"
				kubelets(o, allAt("v1.33.5"))
			}),
			phase: v1beta1.PhaseInitialized,
		},
	})
}
