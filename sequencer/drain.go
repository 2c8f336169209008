package sequencer

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kept reports whether a drain must leave p: the pods of the plan's own Jobs and, in the
// sequencer's namespace, the pods the keep selector matches.
func (r *Reconciler) kept(p *corev1.Pod) bool {
	if p.Namespace != r.namespace {
		return false
	}
	if _, ok := p.Labels[LabelPlan]; ok {
		return true
	}
	return r.keepPods.Matches(labels.Set(p.Labels))
}

// maxWarnings bounds the drain warnings of one kind, so that a large cluster's status stays small.
const maxWarnings = 10

// drainWarnings names, before the plan starts, what will make a drain wait or cost
// availability: PodDisruptionBudgets that allow no disruption now, workloads with a single
// running replica, and pods no controller will recreate.
func (r *Reconciler) drainWarnings(ctx context.Context) ([]string, error) {
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	var pdbs policyv1.PodDisruptionBudgetList
	if err := r.c.List(ctx, &pdbs); err != nil {
		return nil, fmt.Errorf("list pod disruption budgets: %w", err)
	}
	type workload struct{ kind, ns, name string }
	replicas := map[workload][]string{}
	var bare, blocked, single []string
	var live []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if !Drainable(p) || r.kept(p) {
			continue
		}
		live = append(live, p)
		owner := metav1.GetControllerOf(p)
		if owner == nil {
			bare = append(bare, fmt.Sprintf("pod %s/%s on node %s has no controller: the drain deletes it for good", p.Namespace, p.Name, p.Spec.NodeName))
			continue
		}
		w := workload{owner.Kind, p.Namespace, owner.Name}
		replicas[w] = append(replicas[w], p.Spec.NodeName)
	}
	for _, b := range pdbs.Items {
		if b.Status.DisruptionsAllowed > 0 || b.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		var nodes []string
		for _, p := range live {
			if p.Namespace == b.Namespace && sel.Matches(labels.Set(p.Labels)) {
				nodes = append(nodes, p.Spec.NodeName)
			}
		}
		if len(nodes) == 0 {
			continue
		}
		slices.Sort(nodes)
		blocked = append(blocked, fmt.Sprintf("PodDisruptionBudget %s/%s allows no disruption: the drain of node %s will wait until it does",
			b.Namespace, b.Name, strings.Join(slices.Compact(nodes), ", ")))
	}
	for w, nodes := range replicas {
		if len(nodes) == 1 {
			single = append(single, fmt.Sprintf("%s %s/%s has one replica, on node %s: it is down while that node is drained", w.kind, w.ns, w.name, nodes[0]))
		}
	}
	var out []string
	for _, list := range [][]string{blocked, single, bare} {
		slices.Sort(list)
		if len(list) > maxWarnings {
			list = append(list[:maxWarnings:maxWarnings], fmt.Sprintf("and %d more like these", len(list)-maxWarnings))
		}
		out = append(out, list...)
	}
	return out, nil
}

// Drainable reports whether a drain evicts p, whoever it belongs to: not a mirror pod, not a
// DaemonSet's, not finished.
func Drainable(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	if owner := metav1.GetControllerOf(p); owner != nil && owner.Kind == "DaemonSet" {
		return false
	}
	return true
}

// evictable lists the pods of node a drain must evict: every pod but mirror pods, DaemonSet pods,
// pods that have finished, the pods of the plan's Jobs and the sequencer's own pods (kept).
func (r *Reconciler) evictable(ctx context.Context, node string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods, client.MatchingFields{podNodeIndex: node}); err != nil {
		return nil, fmt.Errorf("list pods of node %s: %w", node, err)
	}
	var out []corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; Drainable(p) && !r.kept(p) {
			out = append(out, *p)
		}
	}
	return out, nil
}

// setUnschedulable cordons (v) or uncordons node name, unless the cache shows it done. It sends
// a merge patch of spec.unschedulable alone, built here rather than diffed from two copies of
// the Node, and asks for the Node's metadata back rather than the whole Node: at a thousand
// nodes, diffing and decoding whole Nodes was most of what a batch's cordons cost.
func (r *Reconciler) setUnschedulable(ctx context.Context, name string, v bool) error {
	var n corev1.Node
	if err := r.c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		return fmt.Errorf("get node %s: %w", name, err)
	}
	if n.Spec.Unschedulable == v {
		return nil
	}
	// false is the field's absence, as a diff of the Node would say it.
	body := []byte(`{"spec":{"unschedulable":null}}`)
	if v {
		body = []byte(`{"spec":{"unschedulable":true}}`)
	}
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := r.c.Patch(ctx, m, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("set node %s unschedulable=%t: %w", name, v, err)
	}
	return nil
}

// drain evicts the node's evictable pods through the Eviction API. Evictions refused because of a
// PodDisruptionBudget (429) are not errors: their pods (namespace/name) are returned.
func (r *Reconciler) drain(ctx context.Context, node string) ([]string, error) {
	pods, err := r.evictable(ctx, node)
	if err != nil {
		return nil, err
	}
	var blocked []string
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
		err := r.c.SubResource("eviction").Create(ctx, p, ev)
		switch {
		case err == nil, apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			blocked = append(blocked, p.Namespace+"/"+p.Name)
		default:
			return nil, fmt.Errorf("evict pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return blocked, nil
}
