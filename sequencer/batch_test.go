package sequencer_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// workers returns worker NodeInfos named w-1.. with the zones given ("" for none).
func workers(zones ...string) []sequencer.NodeInfo {
	out := make([]sequencer.NodeInfo, len(zones))
	for i, z := range zones {
		out[i] = sequencer.NodeInfo{Name: "w-" + string(rune('1'+i)), Ready: true, Zone: z}
	}
	return out
}

func TestJoinable(t *testing.T) {
	t.Parallel()
	ws := workers("a", "a", "b", "")
	web := sequencer.Disruption{Name: "apps/web", Allowed: 1, Pods: map[string]int{"w-3": 1, "w-4": 1}}
	wide := sequencer.Disruption{Name: "apps/wide", Allowed: 2, Pods: map[string]int{"w-3": 1, "w-4": 1}}
	none := sequencer.Disruption{Name: "apps/db", Allowed: 0, Pods: map[string]int{"w-4": 1}}
	tests := []struct {
		name    string
		n       sequencer.NodeInfo
		batch   []sequencer.NodeInfo
		budgets []sequencer.Disruption
		want    string
	}{
		{name: "alone", n: ws[0]},
		{name: "alone, though its budget allows nothing", n: ws[3], budgets: []sequencer.Disruption{none}},
		{name: "one zone", n: ws[1], batch: ws[:1], want: "node w-1 is in zone a too"},
		{name: "two zones", n: ws[2], batch: ws[:1]},
		{name: "no zone beside a zone", n: ws[3], batch: ws[:1]},
		{name: "two nodes without a zone", n: ws[3], batch: []sequencer.NodeInfo{{Name: "w-9"}}},
		{name: "one budget's pods on both, one disruption allowed", n: ws[3], batch: ws[2:3], budgets: []sequencer.Disruption{web},
			want: "PodDisruptionBudget apps/web allows 1 disruptions, and node w-4 runs 1 of its pods besides w-3"},
		{name: "one budget's pods on both, two allowed", n: ws[3], batch: ws[2:3], budgets: []sequencer.Disruption{wide}},
		{name: "the budget's pods on the node alone", n: ws[3], batch: ws[:1], budgets: []sequencer.Disruption{web}},
		{name: "a node with none of the budget's pods", n: ws[0], batch: ws[2:3], budgets: []sequencer.Disruption{web}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, sequencer.Joinable(tt.n, tt.batch, tt.budgets))
		})
	}
}

func TestWorkerBatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		workers []sequencer.NodeInfo
		limit   int
		budgets []sequencer.Disruption
		want    [][]string
	}{
		{name: "one at a time", workers: workers("", "", ""), limit: 1, want: [][]string{{"w-1"}, {"w-2"}, {"w-3"}}},
		{name: "no limit given: one at a time", workers: workers("", ""), limit: 0, want: [][]string{{"w-1"}, {"w-2"}}},
		{name: "two at a time", workers: workers("", "", ""), limit: 2, want: [][]string{{"w-1", "w-2"}, {"w-3"}}},
		{name: "zones spread the batches", workers: workers("a", "a", "b", "b"), limit: 2, want: [][]string{{"w-1", "w-3"}, {"w-2", "w-4"}}},
		{name: "one zone: one at a time", workers: workers("a", "a", "a"), limit: 3, want: [][]string{{"w-1"}, {"w-2"}, {"w-3"}}},
		{name: "a budget keeps its nodes apart", workers: workers("", "", ""), limit: 3,
			budgets: []sequencer.Disruption{{Name: "apps/web", Allowed: 1, Pods: map[string]int{"w-1": 1, "w-2": 1}}},
			want:    [][]string{{"w-1", "w-3"}, {"w-2"}}},
		{name: "a budget that allows enough", workers: workers("", "", ""), limit: 3,
			budgets: []sequencer.Disruption{{Name: "apps/web", Allowed: 2, Pods: map[string]int{"w-1": 1, "w-2": 1}}},
			want:    [][]string{{"w-1", "w-2", "w-3"}}},
		{name: "zones and a budget", workers: workers("a", "b", "a", "b"), limit: 4,
			budgets: []sequencer.Disruption{{Name: "apps/web", Allowed: 1, Pods: map[string]int{"w-1": 1, "w-2": 1}}},
			want:    [][]string{{"w-1", "w-4"}, {"w-2", "w-3"}}},
		{name: "none", limit: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := sequencer.WorkerBatches(tt.workers, tt.limit, tt.budgets)
			require.Equal(t, tt.want, got)
			var all []string
			for _, b := range got {
				all = append(all, b...)
			}
			slices.Sort(all)
			require.Len(t, all, len(tt.workers), "every worker in one batch")
		})
	}
}

func TestGatherDisruptions(t *testing.T) {
	t.Parallel()
	yes := true
	pod := func(ns, name, node string, labels map[string]string, ownerKind string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Spec: corev1.PodSpec{NodeName: node}}
		p.Status.Phase = corev1.PodRunning
		if ownerKind != "" {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: ownerKind, Name: "o", Controller: &yes}}
		}
		return p
	}
	pdb := func(ns, name string, sel map[string]string, allowed int32) *policyv1.PodDisruptionBudget {
		b := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if sel != nil {
			b.Spec.Selector = &metav1.LabelSelector{MatchLabels: sel}
		}
		b.Status.DisruptionsAllowed = allowed
		return b
	}
	web := map[string]string{"app": "web"}
	objs := []client.Object{
		pdb("apps", "web", web, 1), pdb("apps", "empty", map[string]string{"app": "none"}, 1), pdb("apps", "all", nil, 0),
		pod("apps", "web-1", "w-1", web, "ReplicaSet"), pod("apps", "web-2", "w-1", web, "ReplicaSet"),
		pod("apps", "web-3", "w-2", web, "ReplicaSet"), pod("other", "web-4", "w-3", web, "ReplicaSet"),
		pod("apps", "web-ds", "w-3", web, "DaemonSet"), pod("apps", "web-kept", "w-3", web, "ReplicaSet"),
	}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).Build()
	got, err := sequencer.GatherDisruptions(t.Context(), c, func(p *corev1.Pod) bool { return p.Name == "web-kept" })
	require.NoError(t, err)
	require.Equal(t, []sequencer.Disruption{{Name: "apps/web", Allowed: 1, Pods: map[string]int{"w-1": 2, "w-2": 1}}}, got)
}

// TestDecideStartsSafeBatches: with a concurrency of three, NodeUpgrading starts the workers that
// may go together, and says why the others wait.
func TestDecideStartsSafeBatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		zones   []string
		budgets []sequencer.Disruption
		// inFlight are the workers in flight already (their drain done).
		inFlight []string
		want     []string
		waiting  map[string]string
	}{
		{name: "no zones, no budgets: three", zones: []string{"", ""}, want: []string{"w-1", "w-2"}},
		{name: "one zone", zones: []string{"a", "a"}, want: []string{"w-1"}, waiting: map[string]string{"w-2": "node w-1 is in zone a too"}},
		{name: "a budget", zones: []string{"", ""}, want: []string{"w-1"},
			budgets: []sequencer.Disruption{{Name: "apps/web", Allowed: 1, Pods: map[string]int{"w-1": 1, "w-2": 1}}},
			waiting: map[string]string{"w-2": "PodDisruptionBudget apps/web allows 1 disruptions"}},
		{name: "beside a node in flight of the same zone", zones: []string{"a", "a"}, inFlight: []string{"w-1"},
			waiting: map[string]string{"w-2": "node w-1 is in zone a too"}},
		{name: "beside a drained node in flight", zones: []string{"", ""}, inFlight: []string{"w-1"}, want: []string{"w-2"},
			budgets: []sequencer.Disruption{{Name: "apps/web", Allowed: 1, Pods: map[string]int{"w-2": 1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				states := map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgraded, "cp-2": v1beta1.NodeUpgraded}
				for _, n := range tt.inFlight {
					states[n] = v1beta1.NodeUpgrading
					o.NodeJobs[n] = sequencer.JobState{Exists: true}
				}
				nodeStates(o, states)
				o.Nodes[2].Zone, o.Nodes[3].Zone = tt.zones[0], tt.zones[1]
				o.Plan.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{Concurrency: 3}
				o.Disruptions = tt.budgets
			})
			d := sequencer.Decide(decideCfg, o)
			var cordoned []string
			for _, a := range d.Actions {
				if a.Kind == sequencer.ActionCordon {
					cordoned = append(cordoned, a.Node)
				}
			}
			require.Equal(t, tt.want, cordoned)
			for n, why := range tt.waiting {
				s := d.Status.NodeUpgradeStatuses[n]
				require.Equal(t, v1beta1.NodeUpgradePending, s.State)
				require.Equal(t, "WaitingForBatch", s.Reason)
				require.Contains(t, s.Message, why)
			}
		})
	}
}
