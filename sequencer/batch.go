package sequencer

import (
	"context"
	"fmt"

	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Which workers are upgraded together. With a concurrency above one, the nodes in flight at once
// form a batch, and a node joins it only when that is safe (Joinable): no two nodes of one
// failure domain (the topology.kubernetes.io/zone label, where set), and no two nodes whose pods
// one PodDisruptionBudget needs more of than it allows to lose. Control-plane nodes go one at a
// time. The sequencer asks Joinable of each node it may start (startNodes); Judge shows the
// batches that follow when every node takes as long (WorkerBatches), so that `plan` shows the
// batches the sequencer starts.

// Disruption is a PodDisruptionBudget as the choice of a batch sees it.
type Disruption struct {
	// Name is the budget's namespace/name.
	Name string
	// Allowed is how many of its pods may be disrupted now (status.disruptionsAllowed).
	Allowed int32
	// Pods counts the budget's pods that a drain would evict, by node.
	Pods map[string]int
}

// Joinable says whether node n may be drained together with the nodes of batch, given the
// budgets: "" when it may, else why not. A node alone may always start: a budget that allows no
// disruption at all holds its drain, which says so (DrainBlocked), and no batch would help.
func Joinable(n NodeInfo, batch []NodeInfo, budgets []Disruption) string {
	for _, b := range batch {
		if n.Zone != "" && n.Zone == b.Zone {
			return fmt.Sprintf("node %s is in zone %s too", b.Name, n.Zone)
		}
	}
	if len(batch) == 0 {
		return ""
	}
	for _, d := range budgets {
		mine := d.Pods[n.Name]
		if mine == 0 {
			continue
		}
		total, with := mine, []string{}
		for _, b := range batch {
			if k := d.Pods[b.Name]; k > 0 {
				total += k
				with = append(with, b.Name)
			}
		}
		if len(with) > 0 && total > int(d.Allowed) {
			return fmt.Sprintf("PodDisruptionBudget %s allows %d disruptions, and node %s runs %d of its pods besides %s", d.Name, d.Allowed, n.Name, mine, strings.Join(with, ", "))
		}
	}
	return ""
}

// WorkerBatches splits workers, in upgrade order, into the batches they are upgraded in when
// each node takes as long: each batch takes, in order, the nodes not upgraded yet that may join
// it (Joinable), up to limit.
func WorkerBatches(workers []NodeInfo, limit int, budgets []Disruption) [][]string {
	limit = max(limit, 1)
	left := slices.Clone(workers)
	var out [][]string
	for len(left) > 0 {
		var batch []NodeInfo
		var rest []NodeInfo
		for _, n := range left {
			if len(batch) < limit && Joinable(n, batch, budgets) == "" {
				batch = append(batch, n)
			} else {
				rest = append(rest, n)
			}
		}
		names := make([]string, len(batch))
		for i, n := range batch {
			names[i] = n.Name
		}
		out = append(out, names)
		left = rest
	}
	return out
}

// GatherDisruptions reads the PodDisruptionBudgets of the cluster and, for each, its pods that a
// drain would evict (Drainable, not kept), by node. The pods are read only for the budgets that
// select some, namespace by namespace.
func GatherDisruptions(ctx context.Context, r client.Reader, kept func(*corev1.Pod) bool) ([]Disruption, error) {
	var pdbs policyv1.PodDisruptionBudgetList
	if err := r.List(ctx, &pdbs); err != nil {
		return nil, fmt.Errorf("list pod disruption budgets: %w", err)
	}
	var out []Disruption
	for i := range pdbs.Items {
		b := &pdbs.Items[i]
		if b.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		var pods corev1.PodList
		if err := r.List(ctx, &pods, client.InNamespace(b.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return nil, fmt.Errorf("list pods of pod disruption budget %s/%s: %w", b.Namespace, b.Name, err)
		}
		d := Disruption{Name: b.Namespace + "/" + b.Name, Allowed: b.Status.DisruptionsAllowed, Pods: map[string]int{}}
		for j := range pods.Items {
			p := &pods.Items[j]
			if p.Spec.NodeName != "" && Drainable(p) && (kept == nil || !kept(p)) {
				d.Pods[p.Spec.NodeName]++
			}
		}
		if len(d.Pods) > 0 {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b Disruption) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
