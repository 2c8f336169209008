package sequencer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// upgradedCP is a plan in NodeUpgrading whose control-plane nodes are upgraded.
func upgradedCP(mut ...func(*sequencer.Observation)) sequencer.Observation {
	return obs(v1beta1.PhaseNodeUpgrading, append([]func(*sequencer.Observation){func(o *sequencer.Observation) {
		withStatuses(o, map[string]v1beta1.NodeUpgradeStatus{
			"cp-1": {State: v1beta1.NodeUpgraded}, "cp-2": {State: v1beta1.NodeUpgraded},
			"w-1": {State: v1beta1.NodeUpgradePending}, "w-2": {State: v1beta1.NodeUpgradePending},
		})
	}}, mut...)...)
}

// down makes node name not Ready for d.
func down(o *sequencer.Observation, name string, d time.Duration) {
	for i := range o.Nodes {
		if o.Nodes[i].Name == name {
			o.Nodes[i].Ready, o.Nodes[i].NotReadySince = false, decideNow.Add(-d)
		}
	}
}

func skip(o *sequencer.Observation, nodes ...string) {
	o.Plan.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{SkipNodes: nodes}
}

func TestDecideLostAndSkippedNodes(t *testing.T) {
	t.Parallel()
	runNodeCases(t, []nodeCase{
		{
			name:  "a worker away for a moment holds the next node",
			o:     upgradedCP(func(o *sequencer.Observation) { down(o, "w-1", 30*time.Second) }),
			phase: v1beta1.PhaseNodeUpgrading, progressing: "WaitingForCluster", message: "node w-1 to be Ready",
			check: func(t *testing.T, d sequencer.Decision) { require.Empty(t, d.Actions) },
		},
		{
			name:  "a worker away for longer than the heartbeat timeout makes the plan Degraded, naming it and the command",
			o:     upgradedCP(func(o *sequencer.Observation) { down(o, "w-1", 3*time.Minute) }),
			phase: v1beta1.PhaseNodeUpgrading, degraded: "NodeNotReady",
			message: "node w-1 not Ready since 2026-03-01T11:57:00Z (3m0s); the other nodes go on; to finish the plan without it: upgrade-repo upgrade skip w-1",
			actions: []sequencer.Action{{Kind: sequencer.ActionCordon, Node: "w-2"}},
			check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, "NodeNotReady", d.Status.NodeUpgradeStatuses["w-1"].Reason, "passed over")
				require.Contains(t, d.Status.NodeUpgradeStatuses["w-1"].Message, "upgrade-repo upgrade skip w-1")
			},
		},
		{
			name: "the lost worker alone is left: the plan waits, Degraded, and says why",
			o: upgradedCP(func(o *sequencer.Observation) {
				down(o, "w-1", 10*time.Minute)
				o.Plan.Status.NodeUpgradeStatuses["w-2"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgraded}
			}),
			phase: v1beta1.PhaseNodeUpgrading, degraded: "NodeNotReady", message: "upgrade-repo upgrade skip w-1",
			check: func(t *testing.T, d sequencer.Decision) { require.Empty(t, d.Actions) },
		},
		{
			name: "a skipped worker lets the plan finish; its row says Skipped at its version",
			o: upgradedCP(func(o *sequencer.Observation) {
				down(o, "w-1", 10*time.Minute)
				kubelets(o, map[string]string{"cp-1": "v1.34.4", "cp-2": "v1.34.4", "w-1": "v1.33.13", "w-2": "v1.34.4"})
				o.Plan.Status.NodeUpgradeStatuses["w-2"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgraded}
				skip(o, "w-1")
			}),
			phase: v1beta1.PhaseNodeUpgraded,
			check: func(t *testing.T, d sequencer.Decision) {
				s := d.Status.NodeUpgradeStatuses["w-1"]
				require.Equal(t, v1beta1.NodeSkipped, s.State)
				require.Equal(t, "v1.33.13", s.KubeletVersion)
				require.Contains(t, s.Message, "upgrade-repo upgrade node w-1")
				require.Empty(t, d.Actions, "a node skipped before its turn is not touched")
			},
		},
		{
			name: "a worker that died in its step is skipped at once: its Job deleted, uncordoned",
			o: upgradedCP(func(o *sequencer.Observation) {
				down(o, "w-1", 5*time.Minute)
				o.Plan.Status.NodeUpgradeStatuses["w-1"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeKubernetesUpgrading}
				o.NodeJobs["w-1"] = sequencer.JobState{Exists: true, Started: stepStarted}
				skip(o, "w-1")
			}),
			phase: v1beta1.PhaseNodeUpgrading, progressing: "NodeUpgrading",
			actions: []sequencer.Action{{Kind: sequencer.ActionCordon, Node: "w-2"},
				{Kind: sequencer.ActionDeleteNodeJob, Node: "w-1"}, {Kind: sequencer.ActionUncordon, Node: "w-1"}},
		},
		{
			name: "a control-plane node is never skipped: the plan says so and waits for it",
			o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				withStatuses(o, map[string]v1beta1.NodeUpgradeStatus{"cp-1": {State: v1beta1.NodeUpgraded}, "cp-2": {State: v1beta1.NodeUpgradePending}, "w-1": {}, "w-2": {}})
				down(o, "cp-2", 5*time.Minute)
				skip(o, "cp-2")
			}),
			phase: v1beta1.PhaseNodeUpgrading, degraded: "NodeNotReady", message: "a control-plane node is never skipped",
			check: func(t *testing.T, d sequencer.Decision) {
				require.Empty(t, d.Actions, "nothing starts while a control plane is away")
				require.NotEqual(t, v1beta1.NodeSkipped, d.Status.NodeUpgradeStatuses["cp-2"].State)
				require.Contains(t, d.Status.NodeUpgradeStatuses["cp-2"].Message, "not skipped: a control-plane node is never skipped")
			},
		},
		{
			name: "a Ready worker in its step finishes it before it may be skipped",
			o: upgradedCP(func(o *sequencer.Observation) {
				o.Plan.Status.NodeUpgradeStatuses["w-1"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgrading}
				o.NodeJobs["w-1"] = sequencer.JobState{Exists: true, Started: stepStarted}
				o.Nodes[2].Unschedulable = true
				skip(o, "w-1")
			}),
			phase: v1beta1.PhaseNodeUpgrading, progressing: "NodeUpgrading",
			check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, v1beta1.NodeUpgrading, d.Status.NodeUpgradeStatuses["w-1"].State)
				require.Contains(t, d.Status.NodeUpgradeStatuses["w-1"].Message, "not skipped: its upgrade is in progress")
			},
		},
		{
			name: "a kubelet more than three minor versions behind the release may not be skipped",
			o: upgradedCP(func(o *sequencer.Observation) {
				down(o, "w-1", 10*time.Minute)
				kubelets(o, map[string]string{"w-1": "v1.30.2"})
				o.Plan.Status.ReleaseMetadata = &v1beta1.ReleaseMetadata{Kubernetes: "v1.34.4"}
				skip(o, "w-1")
			}),
			phase: v1beta1.PhaseNodeUpgrading, degraded: "NodeNotReady",
			check: func(t *testing.T, d sequencer.Decision) {
				require.Contains(t, d.Status.NodeUpgradeStatuses["w-1"].Message, "more than 3 minor versions older")
			},
		},
		{
			name: "a plan limited to one node upgrades that node alone",
			o: upgradedCP(func(o *sequencer.Observation) {
				o.Plan.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{Nodes: []string{"w-2"}}
				o.Plan.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{"w-2": {State: v1beta1.NodeUpgradePending}}
			}),
			phase: v1beta1.PhaseNodeUpgrading, progressing: "NodeUpgrading",
			actions: []sequencer.Action{{Kind: sequencer.ActionCordon, Node: "w-2"}},
			check: func(t *testing.T, d sequencer.Decision) {
				require.Len(t, d.Status.NodeUpgradeStatuses, 1, "no row for the nodes outside the plan")
			},
		},
	})
}

func TestDecideRecordsControlPlaneVersions(t *testing.T) {
	t.Parallel()
	o := upgradedCP(func(o *sequencer.Observation) {
		o.ControlPlaneImages = map[string]map[string]string{"cp-1": {
			"kube-apiserver": "registry.k8s.io/kube-apiserver:v1.34.4", "kube-controller-manager": "registry.k8s.io/kube-controller-manager:v1.34.4",
			"kube-scheduler": "registry.k8s.io/kube-scheduler:v1.34.4", "etcd": "registry.k8s.io/etcd:3.6.5-0",
		}}
	})
	d := sequencer.Decide(decideCfg, o)
	require.Equal(t, &v1beta1.ControlPlaneVersions{APIServer: "v1.34.4", ControllerManager: "v1.34.4", Scheduler: "v1.34.4", Etcd: "3.6.5-0"},
		d.Status.NodeUpgradeStatuses["cp-1"].ControlPlane)
	require.Nil(t, d.Status.NodeUpgradeStatuses["w-1"].ControlPlane)
}
