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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/policy"
)

// Facts is what the policy checks need from the cluster.
type Facts struct {
	// Installed is the recorded installed version.
	Installed Installed
	// Nodes are the cluster's nodes.
	Nodes []corev1.Node
	// NotReady names the nodes that are not Ready.
	NotReady []string
	// PlansInFlight names the plans, other than the one asking, that are neither Succeeded nor
	// Failed.
	PlansInFlight []string
	// Plans are the cluster's UpgradePlans (their Succeeded ones are the history of the time
	// estimate).
	Plans []v1beta1.UpgradePlan
	// Version is the target Version; nil when it does not exist.
	Version *v1beta1.Version
	// KubernetesVersion is the control plane's Kubernetes version as its nodes tell it: the
	// oldest kubelet version of the control-plane nodes (a kubelet is never newer than its API
	// server); empty when none reports one. A caller that can ask the API server (/version)
	// should prefer its answer.
	KubernetesVersion string
	// RepoNodes are the agents' reports by node name.
	RepoNodes map[string]*v1beta1.RepoNodeStatus
	// UndrainableBudgets say which PodDisruptionBudgets no drain can ever satisfy
	// (UndrainableBudgets).
	UndrainableBudgets []string
}

// ControlPlaneKubelet returns the oldest kubelet version among the control-plane nodes, or ""
// when none reports a version that parses.
func ControlPlaneKubelet(nodes []corev1.Node) string {
	var oldest policy.Version
	out := ""
	for i := range nodes {
		if !IsControlPlane(&nodes[i]) {
			continue
		}
		s := nodes[i].Status.NodeInfo.KubeletVersion
		v, err := policy.ParseVersion(s)
		if err != nil {
			continue
		}
		if out == "" || v.Compare(oldest) < 0 {
			oldest, out = v, s
		}
	}
	return out
}

// GatherFacts reads the facts for a plan named plan (may be empty) that targets the Version named
// target, with InstalledConfigMap in namespace.
func GatherFacts(ctx context.Context, r client.Reader, namespace, plan, target string) (Facts, error) {
	var f Facts
	var err error
	if f.Installed, err = ReadInstalled(ctx, r, namespace); err != nil {
		return Facts{}, err
	}
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes); err != nil {
		return Facts{}, fmt.Errorf("list nodes: %w", err)
	}
	f.Nodes = nodes.Items
	f.KubernetesVersion = ControlPlaneKubelet(nodes.Items)
	for i := range nodes.Items {
		if !IsReady(&nodes.Items[i]) {
			f.NotReady = append(f.NotReady, nodes.Items[i].Name)
		}
	}
	slices.Sort(f.NotReady)
	var plans v1beta1.UpgradePlanList
	if err := r.List(ctx, &plans); err != nil {
		return Facts{}, fmt.Errorf("list upgrade plans: %w", err)
	}
	f.PlansInFlight = inFlight(plans.Items, plan)
	f.Plans = plans.Items
	var rns v1beta1.RepoNodeList
	if err := r.List(ctx, &rns); err != nil {
		return Facts{}, fmt.Errorf("list repo nodes: %w", err)
	}
	f.RepoNodes = map[string]*v1beta1.RepoNodeStatus{}
	for i := range rns.Items {
		f.RepoNodes[rns.Items[i].Name] = &rns.Items[i].Status
	}
	var pdbs policyv1.PodDisruptionBudgetList
	if err := r.List(ctx, &pdbs); err != nil {
		return Facts{}, fmt.Errorf("list pod disruption budgets: %w", err)
	}
	if len(pdbs.Items) > 0 {
		// Every pod of the cluster, listed only when a budget may select some.
		var pods corev1.PodList
		if err := r.List(ctx, &pods); err != nil {
			return Facts{}, fmt.Errorf("list pods: %w", err)
		}
		f.UndrainableBudgets = UndrainableBudgets(pdbs.Items, pods.Items)
	}
	var v v1beta1.Version
	switch err := r.Get(ctx, client.ObjectKey{Name: target}, &v); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return Facts{}, fmt.Errorf("get version %s: %w", target, err)
	default:
		f.Version = &v
	}
	return f, nil
}

// UndrainableBudgets says which of budgets no drain can ever satisfy: those that, with every
// pod they expect healthy, still allow no disruption (maxUnavailable 0, or minAvailable as many
// as their pods), and select a pod a drain evicts (Drainable), on the nodes named. A drain of
// such a node waits for ever; a budget that allows none only now (a pod not Ready) is the drain's
// to wait for, and only warned of.
func UndrainableBudgets(budgets []policyv1.PodDisruptionBudget, pods []corev1.Pod) []string {
	var out []string
	for _, b := range budgets {
		st := b.Status
		if st.ExpectedPods <= 0 || st.ExpectedPods > st.DesiredHealthy || b.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		var nodes []string
		for i := range pods {
			p := &pods[i]
			if p.Namespace == b.Namespace && Drainable(p) && p.Spec.NodeName != "" && sel.Matches(labels.Set(p.Labels)) {
				nodes = append(nodes, p.Spec.NodeName)
			}
		}
		if len(nodes) == 0 {
			continue
		}
		slices.Sort(nodes)
		out = append(out, fmt.Sprintf("PodDisruptionBudget %s/%s allows no eviction even with its %d pods healthy (it wants %d healthy): the drain of node %s would wait for ever",
			b.Namespace, b.Name, st.ExpectedPods, st.DesiredHealthy, strings.Join(slices.Compact(nodes), ", ")))
	}
	slices.Sort(out)
	return out
}

// inFlight names the plans other than self that have not finished. A plan that has not started
// yet or is still Initializing counts only when it is older than self, so that two plans created
// together do not block each other forever: the older one goes first.
func inFlight(plans []v1beta1.UpgradePlan, self string) []string {
	var selfPlan *v1beta1.UpgradePlan
	for i := range plans {
		if plans[i].Name == self {
			selfPlan = &plans[i]
		}
	}
	var out []string
	for i := range plans {
		p := &plans[i]
		if p.Name == self || p.Status.Phase.Finished() {
			continue
		}
		starting := p.Status.Phase == "" || p.Status.Phase == v1beta1.PhaseInitializing
		if starting && selfPlan != nil && !olderThan(p, selfPlan) {
			continue
		}
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

func olderThan(a, b *v1beta1.UpgradePlan) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}
