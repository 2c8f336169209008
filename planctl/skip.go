package planctl

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// InFlight returns the name of the plan that is not finished, the newest by creation when there
// are several; its error wraps ErrState when every plan is finished or there is none.
func InFlight(ctx context.Context, c client.Reader) (string, error) {
	var list v1beta1.UpgradePlanList
	if err := c.List(ctx, &list); err != nil {
		return "", fmt.Errorf("list upgradeplans: %w", err)
	}
	var best *v1beta1.UpgradePlan
	for i := range list.Items {
		p := &list.Items[i]
		if p.Status.Phase.Finished() {
			continue
		}
		if best == nil || best.CreationTimestamp.Before(&p.CreationTimestamp) ||
			best.CreationTimestamp.Equal(&p.CreationTimestamp) && p.Name > best.Name {
			best = p
		}
	}
	if best == nil {
		return "", fmt.Errorf("%w: no UpgradePlan in flight: name the plan", ErrState)
	}
	return best.Name, nil
}

// PlanAndNodes reads the arguments of a verb given as [PLAN] NODE...: the first argument is the
// plan when there is more than one and an UpgradePlan of that name exists; else every argument
// is a node and the plan is the one in flight (InFlight).
func PlanAndNodes(ctx context.Context, c client.Reader, args []string) (plan string, nodes []string, err error) {
	if len(args) == 0 {
		return "", nil, fmt.Errorf("%w: no node given", ErrInvalid)
	}
	if len(args) > 1 {
		var p v1beta1.UpgradePlan
		switch err := c.Get(ctx, client.ObjectKey{Name: args[0]}, &p); {
		case err == nil:
			return args[0], args[1:], nil
		case !apierrors.IsNotFound(err):
			return "", nil, fmt.Errorf("get upgradeplan %s: %w", args[0], err)
		}
	}
	plan, err = InFlight(ctx, c)
	return plan, args, err
}

// SkipResult is what Skip did.
type SkipResult struct {
	// Added names the nodes added to skipNodes.
	Added []string
	// Already names the nodes skipNodes listed already.
	Already []string
	// Stepping names the nodes whose step may be running: the sequencer skips them once it ends.
	Stepping []string
	// Versions are the kubelet versions the nodes stay at, by node, where known.
	Versions map[string]string
}

// Skip adds nodes to the plan's spec.nodeUpgradeOption.skipNodes: the plan finishes without
// them, and each stays at the version it has. Nodes already listed are left as they are, so
// that Skip may be called again. It refuses, with the reason and changing nothing, a
// control-plane node (sequencer.IsControlPlane, or a node the plan's status gives control-plane
// versions: the plan cannot finish without it), a node neither the cluster nor the plan knows, a
// node outside the plan's spec.nodeUpgradeOption.nodes or already Upgraded (ErrInvalid), and a
// finished plan (ErrState).
func Skip(ctx context.Context, c client.Client, name string, nodes []string) (SkipResult, error) {
	var res SkipResult
	if len(nodes) == 0 {
		return res, fmt.Errorf("%w: no node to skip", ErrInvalid)
	}
	var list corev1.NodeList
	if err := c.List(ctx, &list); err != nil {
		return res, fmt.Errorf("list nodes: %w", err)
	}
	cluster := make(map[string]*corev1.Node, len(list.Items))
	for i := range list.Items {
		cluster[list.Items[i].Name] = &list.Items[i]
	}
	// tried names the nodes the attempts added: a write that failed may have landed.
	var tried []string
	err := update(ctx, c, name, func(p *v1beta1.UpgradePlan) error {
		res = SkipResult{Versions: map[string]string{}}
		if p.Status.Phase.Finished() {
			return fmt.Errorf("%w: upgradeplan %s is %s: there is nothing to skip", ErrState, name, p.Status.Phase)
		}
		if p.Spec.NodeUpgradeOption == nil {
			p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{}
		}
		o := p.Spec.NodeUpgradeOption
		for _, n := range slices.Compact(slices.Sorted(slices.Values(nodes))) {
			st, inStatus := p.Status.NodeUpgradeStatuses[n]
			node, inCluster := cluster[n]
			switch {
			case !inCluster && !inStatus:
				return fmt.Errorf("%w: no node %s in the cluster or in upgradeplan %s", ErrInvalid, n, name)
			case inCluster && sequencer.IsControlPlane(node):
				return fmt.Errorf("%w: %s is a control-plane node (label %s): the plan cannot finish without it, and a control-plane node is never skipped",
					ErrInvalid, n, controlPlaneLabel(node))
			case !inCluster && st.ControlPlane != nil:
				return fmt.Errorf("%w: %s was a control-plane node (the plan's status has its control-plane versions): a control-plane node is never skipped", ErrInvalid, n)
			case len(o.Nodes) > 0 && !slices.Contains(o.Nodes, n):
				return fmt.Errorf("%w: upgradeplan %s is limited to %s (spec.nodeUpgradeOption.nodes): %s is not its to skip",
					ErrInvalid, name, strings.Join(o.Nodes, ", "), n)
			case st.State == v1beta1.NodeUpgraded:
				return fmt.Errorf("%w: %s is already upgraded by upgradeplan %s: there is nothing to skip", ErrInvalid, n, name)
			}
			switch {
			case st.KubeletVersion != "":
				res.Versions[n] = st.KubeletVersion
			case inCluster && node.Status.NodeInfo.KubeletVersion != "":
				res.Versions[n] = node.Status.NodeInfo.KubeletVersion
			}
			if slices.Contains(stepStates, st.State) {
				res.Stepping = append(res.Stepping, n)
			}
			switch {
			case slices.Contains(o.SkipNodes, n) && slices.Contains(tried, n):
				// An earlier attempt of this call added it, and its answer was lost.
				res.Added = append(res.Added, n)
			case slices.Contains(o.SkipNodes, n):
				res.Already = append(res.Already, n)
			default:
				o.SkipNodes = append(o.SkipNodes, n)
				res.Added = append(res.Added, n)
				tried = append(tried, n)
			}
		}
		return nil
	})
	return res, err
}

// controlPlaneLabel names the label that makes n a control-plane node.
func controlPlaneLabel(n *corev1.Node) string {
	for _, l := range sequencer.ControlPlaneLabels {
		if _, ok := n.Labels[l]; ok {
			return l
		}
	}
	return sequencer.ControlPlaneLabels[0]
}
