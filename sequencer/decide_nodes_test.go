package sequencer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/release"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// nodeCase is one case of the node rules' tables: an observation and what Decide must make of it.
type nodeCase struct {
	name string
	o    sequencer.Observation
	// phase is the phase the plan must be in afterwards.
	phase v1beta1.Phase
	// degraded is the reason of a True Degraded condition; "" means not degraded.
	degraded string
	// progressing is the reason of the Progressing condition, when not "".
	progressing string
	// message is a part of the Degraded (when degraded) or Progressing condition's message.
	message string
	// actions, when not nil, are the actions Decide must ask for.
	actions []sequencer.Action
	check   func(*testing.T, sequencer.Decision)
}

func runNodeCases(t *testing.T, tests []nodeCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := tt.o.Plan.DeepCopy()
			d := sequencer.Decide(decideCfg, tt.o)
			require.Equal(t, before, tt.o.Plan, "Decide must not change its input")
			require.Equal(t, d, sequencer.Decide(decideCfg, tt.o), "Decide must be deterministic")
			require.Equal(t, tt.phase, d.Status.Phase, "conditions: %+v", d.Status.Conditions)
			deg := meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionDegraded)
			prog := meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionProgressing)
			if tt.degraded != "" {
				require.NotNil(t, deg)
				require.Equal(t, metav1.ConditionTrue, deg.Status, "degraded: %+v", deg)
				require.Equal(t, tt.degraded, deg.Reason, deg.Message)
				require.Contains(t, deg.Message, tt.message)
			} else if deg != nil {
				require.Equal(t, metav1.ConditionFalse, deg.Status, "degraded: %s", deg.Message)
			}
			if tt.progressing != "" {
				require.NotNil(t, prog)
				require.Equal(t, tt.progressing, prog.Reason, prog.Message)
				if tt.degraded == "" {
					require.Contains(t, prog.Message, tt.message)
				}
			}
			if tt.actions != nil {
				require.Equal(t, tt.actions, d.Actions)
			}
			if tt.check != nil {
				tt.check(t, d)
			}
		})
	}
}

// withStatuses sets the plan's node statuses.
func withStatuses(o *sequencer.Observation, st map[string]v1beta1.NodeUpgradeStatus) {
	o.Plan.Status.NodeUpgradeStatuses = st
}

// kubelets sets the nodes' kubelet versions by name.
func kubelets(o *sequencer.Observation, v map[string]string) {
	for i := range o.Nodes {
		o.Nodes[i].KubeletVersion = v[o.Nodes[i].Name]
	}
}

// stepStarted is when the node Jobs of the stage cases started.
var stepStarted = decideNow.Add(-10 * time.Minute)

// upgradingCP1 is a plan in NodeUpgrading whose node cp-1 runs its Job, started at stepStarted,
// and whose agent on cp-1 carries step (nil: no report).
func upgradingCP1(state v1beta1.NodeState, step *v1beta1.RepoNodeStep, mut ...func(*sequencer.Observation)) sequencer.Observation {
	return obs(v1beta1.PhaseNodeUpgrading, append([]func(*sequencer.Observation){func(o *sequencer.Observation) {
		withStatuses(o, map[string]v1beta1.NodeUpgradeStatus{
			"cp-1": {State: state, Message: "the node Job runs", StateTime: since(10 * time.Minute), LastProgressTime: since(time.Minute)},
		})
		o.Nodes[0].Unschedulable = true
		o.NodeJobs["cp-1"] = sequencer.JobState{Exists: true, Started: stepStarted}
		o.RepoNodes["cp-1"].Step = step
	}}, mut...)...)
}

func TestDecideNodeVersionsAndStages(t *testing.T) {
	t.Parallel()
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(stepStarted.Add(d)) }
	runNodeCases(t, []nodeCase{
		{
			name: "kubelet versions are recorded: before once, now always, the target once known",
			o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				kubelets(o, map[string]string{"cp-1": "v1.34.1", "cp-2": "v1.33.5", "w-1": "v1.33.5"})
				withStatuses(o, map[string]v1beta1.NodeUpgradeStatus{
					"cp-1": {State: v1beta1.NodeUpgraded, KubeletVersionBefore: "v1.33.5", KubeletVersion: "v1.33.5"},
					"cp-2": {}, "w-1": {}, "w-2": {},
				})
				o.Plan.Status.ReleaseMetadata = &v1beta1.ReleaseMetadata{Harvester: "v1.6.0", Kubernetes: "v1.34.1"}
			}),
			phase: v1beta1.PhaseNodeUpgrading,
			check: func(t *testing.T, d sequencer.Decision) {
				s := d.Status.NodeUpgradeStatuses
				require.Equal(t, [3]string{"v1.33.5", "v1.34.1", "v1.34.1"}, [3]string{s["cp-1"].KubeletVersionBefore, s["cp-1"].KubeletVersion, s["cp-1"].TargetKubeletVersion})
				require.Equal(t, [3]string{"v1.33.5", "v1.33.5", "v1.34.1"}, [3]string{s["cp-2"].KubeletVersionBefore, s["cp-2"].KubeletVersion, s["cp-2"].TargetKubeletVersion})
				require.Empty(t, s["w-2"].KubeletVersionBefore, "a kubelet version the node does not report is not made up")
				require.Equal(t, "v1.34.1", s["w-2"].TargetKubeletVersion)
			},
		},
		{
			name: "versions are recorded from the start, before the target is known",
			o: obs(v1beta1.PhaseInitializing, func(o *sequencer.Observation) {
				o.Plan.Status.Agents, o.Plan.Status.PreviousVersion = nil, ""
				kubelets(o, map[string]string{"cp-1": "v1.33.5", "cp-2": "v1.33.5", "w-1": "v1.33.5", "w-2": "v1.33.4"})
			}),
			phase: v1beta1.PhaseInitialized,
			check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, "v1.33.4", d.Status.NodeUpgradeStatuses["w-2"].KubeletVersionBefore)
				require.Empty(t, d.Status.NodeUpgradeStatuses["w-2"].TargetKubeletVersion)
			},
		},
		{
			name:  "a state keeps its time while it lasts",
			o:     upgradingCP1(v1beta1.NodeUpgrading, nil),
			phase: v1beta1.PhaseNodeUpgrading, progressing: "NodeUpgrading",
			check: func(t *testing.T, d sequencer.Decision) {
				s := d.Status.NodeUpgradeStatuses["cp-1"]
				require.Equal(t, v1beta1.NodeUpgrading, s.State)
				require.Equal(t, since(10*time.Minute), s.StateTime)
			},
		},
		{
			name: "the stage the step reports is the node's state, its message the node's",
			o: upgradingCP1(v1beta1.NodeUpgrading, &v1beta1.RepoNodeStep{
				Plan: "up", Stage: v1beta1.StageKubernetesUpgrading, Message: "kubeadm upgrade node", Time: at(time.Minute),
			}),
			phase: v1beta1.PhaseNodeUpgrading, progressing: "NodeUpgrading",
			check: func(t *testing.T, d sequencer.Decision) {
				s := d.Status.NodeUpgradeStatuses["cp-1"]
				require.Equal(t, v1beta1.NodeKubernetesUpgrading, s.State)
				require.Equal(t, "kubeadm upgrade node", s.Message)
				require.Equal(t, &decideNowMeta, s.StateTime)
				require.Equal(t, &decideNowMeta, s.LastProgressTime, "a new stage is progress")
			},
		},
		{
			name: "the next stage replaces the last; a stage without a message is named",
			o: upgradingCP1(v1beta1.NodeKubernetesUpgrading, &v1beta1.RepoNodeStep{
				Plan: "up", Stage: v1beta1.StageKubernetesUpgraded, Time: at(5 * time.Minute),
			}),
			phase: v1beta1.PhaseNodeUpgrading,
			check: func(t *testing.T, d sequencer.Decision) {
				s := d.Status.NodeUpgradeStatuses["cp-1"]
				require.Equal(t, v1beta1.NodeKubernetesUpgraded, s.State)
				require.Equal(t, "the node step reports KubernetesUpgraded", s.Message)
			},
		},
		{
			name: "a report of another plan does not apply",
			o: upgradingCP1(v1beta1.NodeUpgrading, &v1beta1.RepoNodeStep{
				Plan: "other", Stage: v1beta1.StageOSUpgrading, Time: at(time.Minute),
			}),
			phase: v1beta1.PhaseNodeUpgrading,
			check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, v1beta1.NodeUpgrading, d.Status.NodeUpgradeStatuses["cp-1"].State)
			},
		},
		{
			name: "a report from before the Job started (an earlier attempt) does not apply",
			o: upgradingCP1(v1beta1.NodeUpgrading, &v1beta1.RepoNodeStep{
				Plan: "up", Stage: v1beta1.StageOSUpgraded, Time: at(-time.Minute),
			}),
			phase: v1beta1.PhaseNodeUpgrading,
			check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, v1beta1.NodeUpgrading, d.Status.NodeUpgradeStatuses["cp-1"].State)
			},
		},
		{
			name: "a Job not started yet takes no report",
			o: upgradingCP1(v1beta1.NodeUpgrading, &v1beta1.RepoNodeStep{Plan: "up", Stage: v1beta1.StageOSUpgrading, Time: at(time.Minute)},
				func(o *sequencer.Observation) { o.NodeJobs["cp-1"] = sequencer.JobState{Exists: true} }),
			phase: v1beta1.PhaseNodeUpgrading,
			check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, v1beta1.NodeUpgrading, d.Status.NodeUpgradeStatuses["cp-1"].State)
			},
		},
		{
			name: "a stage outlasts the reboot it announced, and the node's absence is named",
			o: upgradingCP1(v1beta1.NodeOSUpgrading, nil, func(o *sequencer.Observation) {
				o.Nodes[0].Ready = false
				o.RepoNodes["cp-1"].Step = &v1beta1.RepoNodeStep{Plan: "up", Stage: v1beta1.StageOSUpgrading, Message: "rebooting into the new OS", Time: at(2 * time.Minute)}
			}),
			phase: v1beta1.PhaseNodeUpgrading,
			check: func(t *testing.T, d sequencer.Decision) {
				s := d.Status.NodeUpgradeStatuses["cp-1"]
				require.Equal(t, v1beta1.NodeOSUpgrading, s.State)
				require.Equal(t, "WaitingForNode", s.Reason)
				require.Equal(t, "rebooting into the new OS; the node is not Ready (rebooting?)", s.Message)
				require.Equal(t, since(10*time.Minute), s.StateTime)
			},
		},
		{
			name:  "a node in a stage holds its slot: the next control-plane node waits",
			o:     upgradingCP1(v1beta1.NodeKubernetesUpgraded, &v1beta1.RepoNodeStep{Plan: "up", Stage: v1beta1.StageKubernetesUpgraded, Time: at(time.Minute)}),
			phase: v1beta1.PhaseNodeUpgrading,
			check: func(t *testing.T, d sequencer.Decision) {
				require.Empty(t, d.Actions)
				require.Equal(t, v1beta1.NodeUpgradePending, d.Status.NodeUpgradeStatuses["cp-2"].State)
			},
		},
		{
			name: "a node in a stage whose Job succeeded rejoins",
			o: upgradingCP1(v1beta1.NodeOSUpgraded, &v1beta1.RepoNodeStep{Plan: "up", Stage: v1beta1.StageOSUpgraded, Time: at(time.Minute)},
				func(o *sequencer.Observation) {
					o.NodeJobs["cp-1"] = sequencer.JobState{Exists: true, Started: stepStarted, Succeeded: true, Completed: decideNow}
				}),
			phase: v1beta1.PhaseNodeUpgrading, actions: []sequencer.Action{{Kind: sequencer.ActionUncordon, Node: "cp-1"}},
			check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, v1beta1.NodeRejoining, d.Status.NodeUpgradeStatuses["cp-1"].State)
			},
		},
		{
			name: "a node in a stage whose Job failed fails the plan",
			o: upgradingCP1(v1beta1.NodeKubernetesUpgrading, nil, func(o *sequencer.Observation) {
				o.NodeJobs["cp-1"] = sequencer.JobState{Exists: true, Started: stepStarted, Failed: true, Message: "BackoffLimitExceeded"}
			}),
			phase: v1beta1.PhaseFailed, degraded: "NodeUpgradeFailed", message: "node cp-1: BackoffLimitExceeded",
			check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, v1beta1.NodeUpgradeFailed, d.Status.NodeUpgradeStatuses["cp-1"].State)
			},
		},
		{
			name: "the release's etcd and CoreDNS tags are kept in the metadata",
			o: obs(v1beta1.PhaseMetadataPopulating, func(o *sequencer.Observation) {
				o.Release = &release.Release{Harvester: "v1.6.0", Kubernetes: "v1.34.1", Extra: map[string]any{"etcd": "3.6.4-0", "coredns": "v1.12.1"}}
			}),
			phase: v1beta1.PhaseMetadataPopulated,
			check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, "3.6.4-0", d.Status.ReleaseMetadata.Etcd)
				require.Equal(t, "v1.12.1", d.Status.ReleaseMetadata.CoreDNS)
			},
		},
	})
}
