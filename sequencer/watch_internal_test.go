package sequencer

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// TestEventsMoveThePlansThatWait checks which plans each watched change enqueues: a plan
// draining or rejoining a node hears of that node's pods and agent at once, and no plan hears of
// a heartbeat it does not wait for.
func TestEventsMoveThePlansThatWait(t *testing.T) {
	t.Parallel()
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, v1beta1.AddToScheme(s))
	plan := func(name string, phase v1beta1.Phase, nodes map[string]v1beta1.NodeState) *v1beta1.UpgradePlan {
		p := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: name}}
		p.Status.Phase = phase
		p.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
		for n, st := range nodes {
			p.Status.NodeUpgradeStatuses[n] = v1beta1.NodeUpgradeStatus{State: st}
		}
		return p
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		plan("draining", v1beta1.PhaseNodeUpgrading, map[string]v1beta1.NodeState{"w-1": v1beta1.NodeCordoned}),
		plan("rejoining", v1beta1.PhaseNodeUpgrading, map[string]v1beta1.NodeState{"w-2": v1beta1.NodeRejoining}),
		plan("downloading", v1beta1.PhaseISODownloading, nil),
		plan("done", v1beta1.PhaseSucceeded, map[string]v1beta1.NodeState{"w-1": v1beta1.NodeCordoned}),
	).Build()
	r, err := NewReconciler(c, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	pod := func(node string, mut func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "p"}, Spec: corev1.PodSpec{NodeName: node}}
		p.Status.Phase = corev1.PodRunning
		if mut != nil {
			mut(p)
		}
		return p
	}
	gone := func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }
	report := func(node string, mut func(*v1beta1.RepoNodeStatus)) *v1beta1.RepoNode {
		rn := &v1beta1.RepoNode{ObjectMeta: metav1.ObjectMeta{Name: node}}
		rn.Status.Repo.Ready = true
		if mut != nil {
			mut(&rn.Status)
		}
		return rn
	}
	beat := func(s *v1beta1.RepoNodeStatus) { s.HeartbeatTime = metav1.Now() }
	tests := []struct {
		name     string
		moved    func(ctx context.Context, old, obj client.Object) []reconcile.Request
		old, obj client.Object
		want     []string
	}{
		{name: "a pod created on a node being drained", moved: r.podEvents, obj: pod("w-1", nil), want: []string{"draining"}},
		{name: "a pod of a drained node goes away", moved: r.podEvents, old: pod("w-1", nil), obj: pod("w-1", gone), want: []string{"draining"}},
		{name: "a pod's label changes", moved: r.podEvents, old: pod("w-1", nil), obj: pod("w-1", func(p *corev1.Pod) { p.Labels = map[string]string{"a": "b"} })},
		{name: "a pod elsewhere goes away", moved: r.podEvents, old: pod("w-9", nil), obj: pod("w-9", gone)},
		{name: "a control-plane pod elsewhere becomes Ready", moved: r.podEvents,
			old: pod("cp-1", func(p *corev1.Pod) { p.Namespace = "kube-system" }),
			obj: pod("cp-1", func(p *corev1.Pod) {
				p.Namespace = "kube-system"
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
			}), want: []string{"draining", "rejoining"}},
		{name: "a rejoining node's agent beats", moved: r.repoNodeEvents, old: report("w-2", nil), obj: report("w-2", beat), want: []string{"rejoining"}},
		{name: "another node's agent beats", moved: r.repoNodeEvents, old: report("w-3", nil), obj: report("w-3", beat)},
		{name: "an agent's new report", moved: r.repoNodeEvents, old: report("w-3", nil),
			obj: report("w-3", func(s *v1beta1.RepoNodeStatus) { s.ISO.BytesDone = 5 }), want: []string{"downloading", "draining", "rejoining"}},
		{name: "a node's heartbeat", moved: r.nodeEvents, old: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w-1"}},
			obj: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w-1", Annotations: map[string]string{"beat": "1"}}}},
		{name: "a node cordoned", moved: r.nodeEvents, old: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w-1"}},
			obj: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w-1"}, Spec: corev1.NodeSpec{Unschedulable: true}}, want: []string{"downloading", "draining", "rejoining"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, req := range tt.moved(t.Context(), tt.old, tt.obj) {
				got = append(got, req.Name)
			}
			slices.Sort(got)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestApplyAllNodesTogether applies the actions of several nodes at once: each node's in order,
// and the first failure in the list's order is the one reported, after the others were applied.
func TestApplyAllNodesTogether(t *testing.T) {
	t.Parallel()
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, v1beta1.AddToScheme(s))
	var objs []client.Object
	for _, n := range []string{"w-1", "w-2", "w-4", "w-5"} {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
	r, err := NewReconciler(c, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	plan := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "up"}}
	actions := []Action{
		{Kind: ActionCordon, Node: "w-1"}, {Kind: ActionCordon, Node: "w-2"}, {Kind: ActionUncordon, Node: "w-2"},
		{Kind: ActionCordon, Node: "w-3"}, {Kind: ActionCordon, Node: "w-4"}, {Kind: ActionCordon, Node: "w-5"},
	}
	_, failed, err := r.applyAll(t.Context(), plan, Observation{}, actions)
	require.Error(t, err)
	require.Equal(t, Action{Kind: ActionCordon, Node: "w-3"}, failed, "w-3 does not exist")
	want := map[string]bool{"w-1": true, "w-2": false, "w-4": true, "w-5": true}
	for name, cordoned := range want {
		var n corev1.Node
		require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: name}, &n))
		require.Equal(t, cordoned, n.Spec.Unschedulable, "node %s: its actions applied in order", name)
	}
}
