package planctl

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// NodeDrain is what upgrading one node would evict.
type NodeDrain struct {
	// Node is the node's name.
	Node string
	// ControlPlane is true for a control-plane node (sequencer.IsControlPlane).
	ControlPlane bool
	// Pods are the pods its drain would evict, as namespace/name, sorted.
	Pods []string
}

// DrainPreview lists the nodes plan p works on (every node when p is nil) in the order the
// sequencer upgrades them (sequencer.PlanNodes, sequencer.NodeOrder), each with the pods its drain would evict now. Like the sequencer's drain it leaves mirror pods,
// DaemonSet pods and finished pods, and in the sequencer's namespace the pods keep matches (the
// sequencer's own replicas; the chart passes it the same selector as --keep-pods). Every node is
// cordoned and drained in turn by the Job executor, the default; a node with no pod to evict is
// only cordoned.
func DrainPreview(ctx context.Context, c client.Reader, p *v1beta1.UpgradePlan, namespace string, keep labels.Selector) ([]NodeDrain, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	byNode := map[string][]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == "" || !sequencer.Drainable(p) || (p.Namespace == namespace && keep.Matches(labels.Set(p.Labels))) {
			continue
		}
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p.Namespace+"/"+p.Name)
	}
	cp, others := sequencer.NodeOrder(sequencer.PlanNodes(p, sequencer.NodeInfos(nodes.Items)))
	out := make([]NodeDrain, 0, len(nodes.Items))
	for i, name := range append(cp, others...) {
		ps := byNode[name]
		slices.Sort(ps)
		out = append(out, NodeDrain{Node: name, ControlPlane: i < len(cp), Pods: ps})
	}
	return out, nil
}
