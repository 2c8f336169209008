package sequencer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// upgradePlan is plan "up" that upgraded v1.34.3 to v1.34.4 and soaks for another hour.
func upgradePlan() *v1beta1.UpgradePlan {
	return &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: "up"},
		Spec:       v1beta1.UpgradePlanSpec{Version: "v1.34.4"},
		Status: v1beta1.UpgradePlanStatus{Phase: v1beta1.PhaseSucceeded, PreviousVersion: "v1.34.3",
			ReleaseMetadata: &v1beta1.ReleaseMetadata{Harvester: "v1.34.4", Kubernetes: "v1.34.4", Etcd: "3.6.5-0"},
			Soak: &v1beta1.SoakStatus{PreviousVersion: "v1.34.3", ISOURL: "http://o/v1.34.3.iso", ISOChecksum: prevChecksum,
				Started: metav1.NewTime(decideNow.Add(-time.Hour)), Until: metav1.NewTime(decideNow.Add(time.Hour))}},
	}
}

// rollbackPlan is plan "back", the rollback of "up" to v1.34.3.
func rollbackPlan() *v1beta1.UpgradePlan {
	return &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "back"},
		Spec: v1beta1.UpgradePlanSpec{Version: "v1.34.3", Rollback: &v1beta1.RollbackSpec{Plan: "up"}, Soak: &metav1.Duration{}}}
}

func TestJudgeRollback(t *testing.T) {
	t.Parallel()
	kept := &v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: "v1.34.3"}, Spec: v1beta1.VersionSpec{ISOURL: "http://o/v1.34.3.iso", ISOChecksum: prevChecksum}}
	tests := []struct {
		name      string
		p         func(*v1beta1.UpgradePlan)
		of        func(*v1beta1.UpgradePlan)
		noOf      bool
		target    *v1beta1.Version
		installed string
		at        time.Duration
		// want is a part of the refusal; "" when allowed.
		want string
	}{
		{name: "a patch rollback during the soak", target: kept, installed: "v1.34.4"},
		{name: "the installed version unknown is left to the policies", target: kept},
		{name: "no such plan", noOf: true, target: kept, want: "there is no upgradeplan up"},
		{name: "no previous plan record: it predates soaks", of: func(p *v1beta1.UpgradePlan) { p.Status.Soak = nil }, target: kept,
			want: "kept nothing for a rollback"},
		{name: "soak 0", of: func(p *v1beta1.UpgradePlan) {
			p.Status.Soak = &v1beta1.SoakStatus{Ended: since(0), EndReason: v1beta1.SoakNothingKept, Message: "nothing kept for a rollback: no Version named v1.34.3"}
		}, target: kept, want: "no Version named v1.34.3"},
		{name: "after the soak", at: 2 * time.Hour, target: kept, want: "the soak of upgradeplan up ended"},
		{name: "finalized", of: func(p *v1beta1.UpgradePlan) {
			p.Status.Soak.Ended, p.Status.Soak.EndReason = since(time.Minute), v1beta1.SoakFinalized
		}, target: kept, want: "(Finalized): release v1.34.3 was cleaned up"},
		{name: "the plan failed", of: func(p *v1beta1.UpgradePlan) { p.Status.Phase = v1beta1.PhaseFailed }, target: kept,
			want: "upgradeplan up is Failed: only a Succeeded upgrade is rolled back"},
		{name: "a rollback of a rollback", of: func(p *v1beta1.UpgradePlan) { p.Spec.Rollback = &v1beta1.RollbackSpec{Plan: "older"} }, target: kept,
			want: "is a rollback itself"},
		{name: "another release installed since", installed: "v1.34.5", target: kept, want: "the cluster runs v1.34.5, not v1.34.4"},
		{name: "not the release the plan upgraded from", p: func(p *v1beta1.UpgradePlan) { p.Spec.Version = "v1.34.2" }, target: kept,
			want: "a rollback goes back to v1.34.3, not to v1.34.2"},
		{name: "across a minor version", of: func(p *v1beta1.UpgradePlan) {
			p.Spec.Version, p.Status.PreviousVersion = "v1.35.0", "v1.34.3"
		}, target: kept, want: "v1.35.0 to v1.34.3 is not a rollback within one minor version"},
		{name: "no Version to roll back to", want: "there is no Version v1.34.3"},
		{name: "a Version with another ISO would download", target: &v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: "v1.34.3"},
			Spec: v1beta1.VersionSpec{ISOURL: "http://o/other.iso", ISOChecksum: testChecksum}}, want: "names another ISO"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, of := rollbackPlan(), upgradePlan()
			if tt.p != nil {
				tt.p(p)
			}
			if tt.of != nil {
				tt.of(of)
			}
			if tt.noOf {
				of = nil
			}
			got := sequencer.JudgeRollback(p, of, tt.target, tt.installed, decideNow.Add(tt.at))
			if tt.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, tt.want)
		})
	}
	require.Empty(t, sequencer.JudgeRollback(upgradePlan(), nil, nil, "", decideNow), "not a rollback: nothing to judge")
}

// rollingBack is the rollback plan "back" in phase, on the 2+2 cluster at v1.34.4.
func rollingBack(phase v1beta1.Phase, mut ...func(*sequencer.Observation)) sequencer.Observation {
	return obs(phase, append([]func(*sequencer.Observation){func(o *sequencer.Observation) {
		p := rollbackPlan()
		p.Status = o.Plan.Status
		if p.Status.Agents != nil {
			p.Status.Agents.ISOChecksum = prevChecksum
			p.Status.PreviousVersion = "v1.34.4"
		}
		o.Plan, o.RollbackOf = p, upgradePlan()
		o.Version = &v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: "v1.34.3"}, Spec: v1beta1.VersionSpec{ISOURL: "http://o/v1.34.3.iso", ISOChecksum: prevChecksum}}
		o.Installed = sequencer.Installed{Version: "v1.34.4"}
		o.KubernetesVersion = "v1.34.4"
		o.UpgradeImage = "upgrade:v1.34.3"
		for i := range o.Nodes {
			o.Nodes[i].KubeletVersion = "v1.34.4"
		}
		for _, rn := range o.RepoNodes {
			rn.ISO.Checksum = prevChecksum
		}
	}}, mut...)...)
}

func TestDecideRollback(t *testing.T) {
	t.Parallel()
	initializing := func(mut ...func(*sequencer.Observation)) sequencer.Observation {
		return rollingBack(v1beta1.PhaseInitializing, append([]func(*sequencer.Observation){func(o *sequencer.Observation) {
			o.Plan.Status.Agents, o.Plan.Status.PreviousVersion = nil, ""
		}}, mut...)...)
	}
	t.Run("allowed: the downgrade lifted, etcd said plainly", func(t *testing.T) {
		t.Parallel()
		d := sequencer.Decide(decideCfg, initializing())
		require.Equal(t, v1beta1.PhaseInitialized, d.Status.Phase, "%v", d.Status.Conditions)
		require.Equal(t, "v1.34.4", d.Status.PreviousVersion)
		require.Equal(t, prevChecksum, d.Status.Agents.ISOChecksum, "the kept ISO")
		found := false
		for _, w := range d.Status.Warnings {
			if strings.Contains(w, "kubeadm does not downgrade etcd, etcd 3.6.5-0 stays") {
				found = true
			}
		}
		require.True(t, found, "%q", d.Status.Warnings)
	})
	refused := []struct {
		name string
		mut  func(*sequencer.Observation)
		want string
	}{
		{name: "after the soak", mut: func(o *sequencer.Observation) { o.RollbackOf.Status.Soak.Until = *since(time.Minute) }, want: "ended"},
		{name: "no previous plan", mut: func(o *sequencer.Observation) { o.RollbackOf = nil }, want: "there is no upgradeplan up"},
		{name: "across a minor", mut: func(o *sequencer.Observation) {
			o.RollbackOf.Spec.Version, o.Installed.Version = "v1.35.1", "v1.35.1"
		}, want: "not a rollback within one minor version"},
	}
	for _, tt := range refused {
		t.Run("refused "+tt.name, func(t *testing.T) {
			t.Parallel()
			d := sequencer.Decide(decideCfg, initializing(tt.mut))
			require.Equal(t, v1beta1.PhaseFailed, d.Status.Phase)
			c := meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionDegraded)
			require.Equal(t, "RollbackRefused", c.Reason)
			require.Contains(t, c.Message, tt.want)
			require.Contains(t, c.Message, "nothing was changed")
			require.Nil(t, d.Status.Agents, "no ISO asked for")
			require.Empty(t, d.Actions)
		})
	}
	t.Run("without spec.rollback the same downgrade is refused by the policy", func(t *testing.T) {
		t.Parallel()
		d := sequencer.Decide(decideCfg, initializing(func(o *sequencer.Observation) { o.Plan.Spec.Rollback = nil }))
		require.Equal(t, v1beta1.PhaseFailed, d.Status.Phase)
		require.Contains(t, meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionDegraded).Message, "NoDowngrade")
	})
}

// TestDecideRollbackOrder: a rollback takes the workers first (with the plan's concurrency),
// then the control plane one at a time; an upgrade the reverse.
func TestDecideRollbackOrder(t *testing.T) {
	t.Parallel()
	started := func(d sequencer.Decision) []string {
		var out []string
		for _, a := range d.Actions {
			if a.Kind == sequencer.ActionCordon {
				out = append(out, a.Node)
			}
		}
		return out
	}
	pending := map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgradePending, "cp-2": v1beta1.NodeUpgradePending, "w-1": v1beta1.NodeUpgradePending, "w-2": v1beta1.NodeUpgradePending}
	tests := []struct {
		name     string
		rollback bool
		states   map[string]v1beta1.NodeState
		want     []string
		waiting  string
	}{
		{name: "upgrade: the first control plane", states: pending, want: []string{"cp-1"}},
		{name: "rollback: the workers first", rollback: true, states: pending, want: []string{"w-1", "w-2"}, waiting: "WaitingForWorkers"},
		{name: "rollback: the control plane once the workers are done", rollback: true,
			states: map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgradePending, "cp-2": v1beta1.NodeUpgradePending, "w-1": v1beta1.NodeUpgraded, "w-2": v1beta1.NodeUpgraded},
			want:   []string{"cp-1"}},
		{name: "rollback: one control plane at a time", rollback: true,
			states: map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgraded, "cp-2": v1beta1.NodeUpgradePending, "w-1": v1beta1.NodeUpgraded, "w-2": v1beta1.NodeUpgraded},
			want:   []string{"cp-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				o.Plan.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{Concurrency: 2}
				if tt.rollback {
					o.Plan.Spec.Rollback = &v1beta1.RollbackSpec{Plan: "up"}
				}
				nodeStates(o, tt.states)
			})
			d := sequencer.Decide(decideCfg, o)
			require.Equal(t, tt.want, started(d))
			// What plan and status show of the order is what was started.
			j := sequencer.Judge(o.Plan, sequencer.JudgeFacts{Nodes: o.Nodes})
			require.Equal(t, tt.rollback, j.WorkersFirst)
			firstGroup := j.ControlPlaneNodes
			if j.WorkersFirst {
				firstGroup = j.OtherNodes
			}
			if tt.waiting != "" {
				require.Subset(t, firstGroup, tt.want, "started from the group the judgement puts first")
			}
			if tt.waiting != "" {
				require.Equal(t, tt.waiting, d.Status.NodeUpgradeStatuses["cp-1"].Reason)
			}
		})
	}
}

// TestDecideRollbackKeepsEtcd: at NodeUpgraded, the etcd a rollback leaves at the newer version
// is no mismatch; the other components are checked against the older release as for any plan.
func TestDecideRollbackKeepsEtcd(t *testing.T) {
	t.Parallel()
	o := rollingBack(v1beta1.PhaseNodeUpgraded, func(o *sequencer.Observation) {
		states(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgraded, "cp-2": v1beta1.NodeUpgraded, "w-1": v1beta1.NodeUpgraded, "w-2": v1beta1.NodeUpgraded})
		kubeadmCluster(o, "v1.34.4", "v1.34.3", "3.6.4-0", allAt("v1.34.3"))
		o.Plan.Status.ReleaseMetadata.Harvester = "v1.34.3"
		o.ControlPlaneImages = map[string]map[string]string{"cp-1": kubeadmImages("v1.34.3", "3.6.5-0"), "cp-2": kubeadmImages("v1.34.3", "3.6.5-0")}
	})
	d := sequencer.Decide(decideCfg, o)
	require.Equal(t, v1beta1.PhaseCleaningUp, d.Status.Phase, "%v", d.Status.Conditions)

	o.ControlPlaneImages["cp-2"] = kubeadmImages("v1.34.4", "3.6.5-0")
	d = sequencer.Decide(decideCfg, o)
	require.Equal(t, v1beta1.PhaseNodeUpgraded, d.Status.Phase)
	require.Contains(t, meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionDegraded).Message, "node cp-2: kube-apiserver")
}

// TestDecideFirstNodeFailure: a release whose step fails on the first control plane stops the
// plan there, names the node, and says the way back.
func TestDecideFirstNodeFailure(t *testing.T) {
	t.Parallel()
	o := obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
		nodeStates(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgrading, "cp-2": v1beta1.NodeUpgradePending, "w-1": v1beta1.NodeUpgradePending, "w-2": v1beta1.NodeUpgradePending})
		o.NodeJobs["cp-1"] = sequencer.JobState{Exists: true, Failed: true, Message: "kubeadm upgrade apply: kube-apiserver did not come up; manifests restored"}
	})
	d := sequencer.Decide(decideCfg, o)
	require.Equal(t, v1beta1.PhaseFailed, d.Status.Phase)
	msg := meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionDegraded).Message
	require.Contains(t, msg, "kube-apiserver did not come up")
	require.Contains(t, msg, "first control-plane node cp-1 and no other node was touched")
	require.Contains(t, msg, "the cluster runs v1.5.2")
	require.Contains(t, msg, "upgrade-repo upgrade abort up")
	for _, n := range []string{"cp-2", "w-1", "w-2"} {
		require.Equal(t, v1beta1.NodeUpgradePending, d.Status.NodeUpgradeStatuses[n].State, n)
	}
	for _, a := range d.Actions {
		require.Equal(t, "cp-1", a.Node, "no other node touched: %v", a)
	}

	// A failure once another node was upgraded says nothing of the kind.
	o.Plan.Status.NodeUpgradeStatuses["w-1"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgraded}
	d = sequencer.Decide(decideCfg, o)
	require.NotContains(t, meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionDegraded).Message, "first control-plane node")
}
