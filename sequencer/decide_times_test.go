package sequencer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// rejoiningWorker is an observation of worker w-1 whose node Job started at started and ended at
// completed, its agent's last report at heartbeat carrying step (nil: none).
func rejoiningWorker(started, completed, heartbeat time.Time, step *v1beta1.RepoNodeStep) sequencer.Observation {
	return obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
		nodeStates(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgraded, "cp-2": v1beta1.NodeUpgraded, "w-1": v1beta1.NodeRejoining})
		o.NodeJobs["w-1"] = sequencer.JobState{Exists: true, Succeeded: true, Started: started, Completed: completed}
		o.RepoNodes["w-1"].HeartbeatTime = metav1.NewTime(heartbeat)
		o.RepoNodes["w-1"].Step = step
	})
}

func TestRejoinTakesTheStepsLastReport(t *testing.T) {
	t.Parallel()
	started, completed := decideNow.Add(-20*time.Second), decideNow.Add(-2*time.Second)
	reported := completed.Add(-time.Second)
	step := func(plan string, stage v1beta1.StepStage, at time.Time) *v1beta1.RepoNodeStep {
		return &v1beta1.RepoNodeStep{Plan: plan, Stage: stage, Time: metav1.NewTime(at)}
	}
	tests := []struct {
		name string
		o    sequencer.Observation
		want v1beta1.NodeState
	}{
		{name: "no report since the step: waits for the next heartbeat",
			o: rejoiningWorker(started, completed, reported, nil), want: v1beta1.NodeRejoining},
		{name: "written with the step's KubernetesUpgraded: the agent came through",
			o: rejoiningWorker(started, completed, reported, step("up", v1beta1.StageKubernetesUpgraded, reported)), want: v1beta1.NodeUpgraded},
		{name: "KubernetesUpgrading is not the step's last act",
			o: rejoiningWorker(started, completed, reported, step("up", v1beta1.StageKubernetesUpgrading, reported)), want: v1beta1.NodeRejoining},
		{name: "an OS step may reboot after its report",
			o: rejoiningWorker(started, completed, reported, step("up", v1beta1.StageOSUpgraded, reported)), want: v1beta1.NodeRejoining},
		{name: "another plan's report does not count",
			o: rejoiningWorker(started, completed, reported, step("other", v1beta1.StageKubernetesUpgraded, reported)), want: v1beta1.NodeRejoining},
		{name: "a report of an earlier Job does not count",
			o: rejoiningWorker(started, completed, reported, step("up", v1beta1.StageKubernetesUpgraded, started.Add(-time.Minute))), want: v1beta1.NodeRejoining},
		{name: "a heartbeat after the Job's end counts as before",
			o: rejoiningWorker(started, completed, decideNow, nil), want: v1beta1.NodeUpgraded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := sequencer.Decide(decideCfg, tt.o)
			s := d.Status.NodeUpgradeStatuses["w-1"]
			require.Equal(t, tt.want, s.State, s.Message)
			if tt.want == v1beta1.NodeUpgraded {
				require.NotNil(t, s.Times)
				require.Equal(t, decideNow, s.Times.Upgraded.Time)
			}
		})
	}
}

// TestNodeTimesFollowTheTransitions walks one worker through NodeUpgrading, a decision at a
// time, and checks that each transition is stamped once with the observation's time.
func TestNodeTimesFollowTheTransitions(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return decideNow.Add(time.Duration(s)*time.Second + 250*time.Microsecond) }
	o := obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
		nodeStates(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgraded, "cp-2": v1beta1.NodeUpgraded, "w-2": v1beta1.NodeUpgraded})
	})
	step := func(now time.Time, mut func(*sequencer.Observation)) v1beta1.NodeUpgradeStatus {
		t.Helper()
		o.Now = now
		mut(&o)
		d := sequencer.Decide(decideCfg, o)
		o.Plan = o.Plan.DeepCopy()
		o.Plan.Status = d.Status
		return d.Status.NodeUpgradeStatuses["w-1"]
	}
	s := step(at(0), func(*sequencer.Observation) {})
	require.Equal(t, v1beta1.NodeCordoned, s.State)
	s = step(at(1), func(o *sequencer.Observation) {
		o.Nodes[2].Unschedulable = true
		o.PodsToEvict = map[string]int{"w-1": 2}
	})
	require.Equal(t, v1beta1.NodeCordoned, s.State)
	s = step(at(3), func(o *sequencer.Observation) { o.PodsToEvict = map[string]int{"w-1": 1} })
	s = step(at(4), func(o *sequencer.Observation) { o.PodsToEvict = nil })
	require.Equal(t, v1beta1.NodeUpgrading, s.State)
	s = step(at(6), func(o *sequencer.Observation) {
		o.NodeJobs["w-1"] = sequencer.JobState{Exists: true, Started: decideNow.Add(5 * time.Second)}
	})
	s = step(at(9), func(o *sequencer.Observation) {
		o.NodeJobs["w-1"] = sequencer.JobState{Exists: true, Succeeded: true, Started: decideNow.Add(5 * time.Second), Completed: decideNow.Add(8 * time.Second)}
	})
	require.Equal(t, v1beta1.NodeRejoining, s.State)
	s = step(at(10), func(o *sequencer.Observation) {
		o.Nodes[2].Unschedulable = false
		o.RepoNodes["w-1"].HeartbeatTime = metav1.NewTime(decideNow.Add(10 * time.Second))
	})
	require.Equal(t, v1beta1.NodeUpgraded, s.State)
	micro := func(t time.Time) *metav1.MicroTime { m := metav1.NewMicroTime(t); return &m }
	require.Equal(t, &v1beta1.NodeTimes{
		Cordoned: micro(at(0)), DrainStarted: micro(at(1)), JobCreated: micro(at(4)),
		StepStarted: micro(decideNow.Add(5 * time.Second)), StepCompleted: micro(decideNow.Add(8 * time.Second)),
		StepSeen: micro(at(9)), Upgraded: micro(at(10)),
	}, s.Times)
}
