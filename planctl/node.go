package planctl

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// NodePlanName is the default name of the plan that upgrades node alone to version: the version
// and the node, lower case, dots as dashes (v1-6-0-worker-1), a DNS label as PlanName's.
func NodePlanName(version, node string) string {
	return strings.ReplaceAll(strings.ToLower(version+"-"+node), ".", "-")
}

// NodeResult is what UpgradeNode did.
type NodeResult struct {
	// Plan is the plan that upgrades the node: the one created, or the one found.
	Plan *v1beta1.UpgradePlan
	// Created is true when UpgradeNode created Plan, false when it found it.
	Created bool
	// From names the Succeeded plan whose Version was taken; empty when the version was given.
	From string
	// Others names the other plans in flight: the sequencer starts Plan once they are finished.
	Others []string
}

// UpgradeNode makes sure that a plan upgrades node alone (spec.nodeUpgradeOption.nodes) to
// version, or, when version is empty, to the Version of the plan that Succeeded last: a node a
// plan skipped, upgraded once it is back. name is the plan's name, NodePlanName when empty.
//
// It is idempotent: a plan of that target (the Version and the one node) that is not finished,
// or the plan of that name that Succeeded, is returned as it is (Created false), and a Create
// whose answer was lost is taken for done. A plan of that name that failed, or that has another
// target, is refused (ErrState, ErrConflict), as are a node not in the cluster, no plan that
// Succeeded without a version, a version without its Version, and a name Kubernetes refuses
// (ErrInvalid). The new plan takes spec.upgrade and spec.allowPrerelease from the last plan that
// Succeeded to that Version, if any; never spec.force.
func UpgradeNode(ctx context.Context, c client.Client, node, version, name string) (NodeResult, error) {
	var res NodeResult
	var n corev1.Node
	switch err := c.Get(ctx, client.ObjectKey{Name: node}, &n); {
	case apierrors.IsNotFound(err):
		return res, fmt.Errorf("%w: node %s is not in the cluster: it must be back before it is upgraded", ErrInvalid, node)
	case err != nil:
		return res, fmt.Errorf("get node %s: %w", node, err)
	}
	var list v1beta1.UpgradePlanList
	if err := c.List(ctx, &list); err != nil {
		return res, fmt.Errorf("list upgradeplans: %w", err)
	}
	src := lastSucceeded(list.Items, version)
	if version == "" {
		if src == nil {
			return res, fmt.Errorf("%w: no UpgradePlan has Succeeded: give the version to upgrade %s to (--version)", ErrInvalid, node)
		}
		version, res.From = src.Spec.Version, src.Name
	}
	var v v1beta1.Version
	switch err := c.Get(ctx, client.ObjectKey{Name: version}, &v); {
	case apierrors.IsNotFound(err):
		return res, fmt.Errorf("%w: there is no Version %s (upgrade apply creates one from a release ISO)", ErrInvalid, version)
	case err != nil:
		return res, fmt.Errorf("get version %s: %w", version, err)
	}
	if name == "" {
		name = NodePlanName(version, node)
	}
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return res, fmt.Errorf("%w: %q cannot name an UpgradePlan: %s: give another name (--name)", ErrInvalid, name, strings.Join(errs, "; "))
	}
	want := &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1beta1.UpgradePlanSpec{Version: version,
			NodeUpgradeOption: &v1beta1.NodeUpgradeOption{Nodes: []string{node}}},
	}
	if src != nil && src.Spec.Version == version {
		want.Spec.Upgrade = src.Spec.Upgrade
		want.Spec.AllowPrerelease = src.Spec.AllowPrerelease
	}
	for i := range list.Items {
		p := &list.Items[i]
		same := sameTarget(p, want)
		switch {
		case p.Name == name && !same:
			return res, fmt.Errorf("%w: upgradeplan %s exists for another target (version %s, nodes %s): give another name (--name)",
				ErrConflict, name, p.Spec.Version, strings.Join(onlyNodes(p), ", "))
		case p.Name == name && p.Status.Phase == v1beta1.PhaseFailed:
			return res, fmt.Errorf("%w: upgradeplan %s failed in %s: resume it (upgrade retry %s), or delete it (upgrade abort %s) and run this again",
				ErrState, name, p.Status.FailedPhase, name, name)
		case same && (p.Name == name || !p.Status.Phase.Finished()):
			res.Plan = p
			return res, nil
		case !p.Status.Phase.Finished():
			res.Others = append(res.Others, p.Name)
		}
	}
	slices.Sort(res.Others)
	created, err := createPlan(ctx, c, want)
	if err != nil {
		return res, err
	}
	res.Plan, res.Created = want, created
	return res, nil
}

// createPlan creates p. A plan of its name that exists already with the same target (a Create
// of this call whose answer was lost, or another caller's at the same time) is read into p, and
// created is false; one with another target is an error wrapping ErrConflict.
func createPlan(ctx context.Context, c client.Client, p *v1beta1.UpgradePlan) (created bool, err error) {
	err = c.Create(ctx, p)
	if err == nil {
		return true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("create upgradeplan %s: %w", p.Name, err)
	}
	var cur v1beta1.UpgradePlan
	if gerr := c.Get(ctx, client.ObjectKeyFromObject(p), &cur); gerr != nil {
		return false, fmt.Errorf("create upgradeplan %s: %w; and get it: %w", p.Name, err, gerr)
	}
	if !sameTarget(&cur, p) {
		return false, fmt.Errorf("%w: upgradeplan %s exists for another target (version %s)", ErrConflict, p.Name, cur.Spec.Version)
	}
	*p = cur
	return false, nil
}

// sameTarget reports whether two plans upgrade the same nodes to the same Version.
func sameTarget(a, b *v1beta1.UpgradePlan) bool {
	return a.Spec.Version == b.Spec.Version && slices.Equal(onlyNodes(a), onlyNodes(b))
}

// onlyNodes is the plan's spec.nodeUpgradeOption.nodes, sorted; nil for every node.
func onlyNodes(p *v1beta1.UpgradePlan) []string {
	if p.Spec.NodeUpgradeOption == nil || len(p.Spec.NodeUpgradeOption.Nodes) == 0 {
		return nil
	}
	return slices.Sorted(slices.Values(p.Spec.NodeUpgradeOption.Nodes))
}

// lastSucceeded returns the plan that Succeeded last (to version, unless empty), by the time it
// entered Succeeded, else its creation; nil when none did.
func lastSucceeded(plans []v1beta1.UpgradePlan, version string) *v1beta1.UpgradePlan {
	var best *v1beta1.UpgradePlan
	var bestAt metav1.Time
	for i := range plans {
		p := &plans[i]
		if p.Status.Phase != v1beta1.PhaseSucceeded || version != "" && p.Spec.Version != version {
			continue
		}
		at := p.CreationTimestamp
		for _, t := range p.Status.PhaseTransitionTimestamps {
			if t.Phase == v1beta1.PhaseSucceeded {
				at = t.PhaseTransitionTimestamp
			}
		}
		if best == nil || bestAt.Before(&at) || bestAt.Equal(&at) && p.Name > best.Name {
			best, bestAt = p, at
		}
	}
	return best
}
