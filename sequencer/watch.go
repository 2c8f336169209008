package sequencer

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// The events that move a plan. Every transition of NodeUpgrading follows from a change the
// sequencer watches: a node Job's status (Owns), a Node's readiness, schedulability or kubelet
// (nodeEvents), an agent's report (repoNodeEvents), a drained or control-plane pod (podEvents).
// The poll (Config.Poll) is only the fallback for what no event announces: time passing, for
// stalls and stale reports. The handlers drop the updates that move nothing (a Node's or an
// agent's heartbeat), so that a large cluster's heartbeats do not reconcile its plan over and
// over.

// plansFor returns the requests of the plans not finished that want passes, listed from the cache.
func (r *Reconciler) plansFor(ctx context.Context, want func(*v1beta1.UpgradePlan) bool) []reconcile.Request {
	// The plans are only read: the cache's own, not copies of plans that hold a status per node.
	var plans v1beta1.UpgradePlanList
	if err := r.c.List(ctx, &plans, client.UnsafeDisableDeepCopy); err != nil {
		r.log.Error("list upgrade plans for an event", "err", err)
		return nil
	}
	var out []reconcile.Request
	for i := range plans.Items {
		p := &plans.Items[i]
		if !p.Status.Phase.Finished() && (want == nil || want(p)) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
		}
	}
	return out
}

// enqueue adds reqs to q.
func enqueue(q workqueue.TypedRateLimitingInterface[reconcile.Request], reqs []reconcile.Request) {
	for _, req := range reqs {
		q.Add(req)
	}
}

// planEvents is an event handler that enqueues the plans that moved returns for an object:
// created, deleted or, when old is not nil, updated from old.
func (r *Reconciler) planEvents(moved func(ctx context.Context, old, obj client.Object) []reconcile.Request) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, moved(ctx, nil, e.Object))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, moved(ctx, e.ObjectOld, e.ObjectNew))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, moved(ctx, nil, e.Object))
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(q, moved(ctx, nil, e.Object))
		},
	}
}

// nodeEvents moves every plan on a Node's creation, deletion, or a change of what Decide reads
// of it (NodeChanged).
func (r *Reconciler) nodeEvents(ctx context.Context, old, obj client.Object) []reconcile.Request {
	o, _ := old.(*corev1.Node)
	n, ok := obj.(*corev1.Node)
	if !ok || (o != nil && !NodeChanged(o, n)) {
		return nil
	}
	return r.plansFor(ctx, nil)
}

// NodeChanged reports whether Node b differs from a in what the sequencer reads of a node: its
// labels (roles, zone), schedulability, readiness, kubelet version, boot ID or deletion. A
// heartbeat alone (a condition's lastHeartbeatTime) is no change.
func NodeChanged(a, b *corev1.Node) bool {
	ia, ib := NodeInfos([]corev1.Node{*a})[0], NodeInfos([]corev1.Node{*b})[0]
	return ia != ib || !equality.Semantic.DeepEqual(a.Labels, b.Labels) ||
		(a.DeletionTimestamp == nil) != (b.DeletionTimestamp == nil)
}

// repoNodeEvents moves every plan on an agent's new report, and only the plans waiting for that
// node's agent (the node rejoins after its step) on a heartbeat alone.
func (r *Reconciler) repoNodeEvents(ctx context.Context, old, obj client.Object) []reconcile.Request {
	o, _ := old.(*v1beta1.RepoNode)
	n, ok := obj.(*v1beta1.RepoNode)
	if !ok {
		return nil
	}
	if o == nil || !HeartbeatOnly(&o.Status, &n.Status) {
		return r.plansFor(ctx, nil)
	}
	return r.plansFor(ctx, func(p *v1beta1.UpgradePlan) bool {
		return p.Status.NodeUpgradeStatuses[n.Name].State == v1beta1.NodeRejoining
	})
}

// HeartbeatOnly reports whether agent report b says nothing a does not, but for its heartbeat
// time and the free space of its cache.
func HeartbeatOnly(a, b *v1beta1.RepoNodeStatus) bool {
	x, y := *a.DeepCopy(), *b.DeepCopy()
	x.HeartbeatTime = y.HeartbeatTime
	x.Cache, y.Cache = v1beta1.RepoNodeCache{}, v1beta1.RepoNodeCache{}
	return equality.Semantic.DeepEqual(x, y)
}

// podEvents moves the plans that wait on a pod's node: the pod of a node being drained that
// goes away, and a control-plane pod whose readiness changes (the gate before each node and the
// rejoin of a control-plane node).
func (r *Reconciler) podEvents(ctx context.Context, old, obj client.Object) []reconcile.Request {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return nil
	}
	if o, _ := old.(*corev1.Pod); o != nil && !PodChanged(o, p) {
		return nil
	}
	controlPlane := p.Labels["tier"] == "control-plane" || p.Namespace == "kube-system"
	return r.plansFor(ctx, func(plan *v1beta1.UpgradePlan) bool {
		if ph := plan.Status.Phase; ph != v1beta1.PhaseNodeUpgrading && ph != v1beta1.PhaseNodeUpgraded {
			return false
		}
		switch plan.Status.NodeUpgradeStatuses[p.Spec.NodeName].State {
		case v1beta1.NodeCordoned, v1beta1.NodeRejoining:
			return true
		}
		return controlPlane
	})
}

// PodChanged reports whether pod b differs from a in what a drain or a rejoin waits for: its
// phase, readiness, deletion or node.
func PodChanged(a, b *corev1.Pod) bool {
	return a.Status.Phase != b.Status.Phase || podReady(a) != podReady(b) ||
		(a.DeletionTimestamp == nil) != (b.DeletionTimestamp == nil) || a.Spec.NodeName != b.Spec.NodeName
}
