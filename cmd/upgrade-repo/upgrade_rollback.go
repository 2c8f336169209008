package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
	"github.com/upgrade-repo/upgrade-repo/planctl"
)

// parseSoakVerb parses the flags of finalize and rollback, whose PLAN is optional (the
// Succeeded plan that soaks now when absent).
func parseSoakVerb(a *app, verb, usage string, args []string) (plan string, k kubeclient.Options, help bool, err error) {
	fset := verbFlagSet(a, verb,
		fmt.Sprintf("usage: upgrade-repo upgrade %s [PLAN] [-n NAMESPACE] [--kubeconfig FILE] [--context NAME] [--api-timeout D]", verb), "  "+usage)
	k.AddFlags(fset)
	pos, help, err := parseVerbArgs(a.stdout, fset, args)
	if help || err != nil {
		return "", k, help, err
	}
	if err := k.Check(); err != nil {
		return "", k, false, err
	}
	if len(pos) > 1 {
		return "", k, false, fmt.Errorf("%w: upgrade %s takes at most one plan, got %q", errUsage, verb, pos)
	}
	if len(pos) == 1 {
		plan = pos[0]
	}
	return plan, k, false, nil
}

// soakPlan reads plan name, or the plan that soaks now when name is empty.
func soakPlan(ctx context.Context, c client.Reader, name string) (*v1beta1.UpgradePlan, error) {
	if name == "" {
		return planctl.Soaking(ctx, c)
	}
	var p v1beta1.UpgradePlan
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
		return nil, fmt.Errorf("get upgradeplan %s: %w", name, err)
	}
	return &p, nil
}

// runUpgradeFinalize ends a plan's soak.
func runUpgradeFinalize(ctx context.Context, a *app, args []string) error {
	plan, k, help, err := parseSoakVerb(a, "finalize", "ends the soak of a Succeeded plan ("+v1beta1.FinalizeAnnotation+
		"): the previous release can no longer be rolled back to, and its cleanup runs", args)
	if help || err != nil {
		return err
	}
	c, err := k.Client(a.stderr)
	if err != nil {
		return err
	}
	return upgradeFinalize(ctx, a.stdout, c, plan, time.Now())
}

// upgradeFinalize finalizes plan (the soaking one when empty) and says what follows.
func upgradeFinalize(ctx context.Context, w io.Writer, c client.Client, plan string, now time.Time) error {
	p, err := soakPlan(ctx, c, plan)
	if err != nil {
		return err
	}
	if err := planctl.Finalize(ctx, c, p.Name, now); err != nil {
		return err
	}
	fmt.Fprintf(w, "Finalized upgradeplan %s: its soak ends, release %s can no longer be rolled back to, and the agents clean it up.\n",
		p.Name, p.Status.Soak.PreviousVersion)
	return nil
}

// runUpgradeRollback creates the rollback of a plan.
func runUpgradeRollback(ctx context.Context, a *app, args []string) error {
	plan, k, help, err := parseSoakVerb(a, "rollback", "rolls a Succeeded plan's patch upgrade back to the release its soak keeps: "+
		"a new plan from the kept ISO, workers first, then the control plane", args)
	if help || err != nil {
		return err
	}
	c, err := k.Client(a.stderr)
	if err != nil {
		return err
	}
	return upgradeRollback(ctx, a.stdout, c, plan, time.Now())
}

// upgradeRollback creates the rollback of plan (the soaking one when empty), or says why not
// before anything is created.
func upgradeRollback(ctx context.Context, w io.Writer, c client.Client, plan string, now time.Time) error {
	of, err := soakPlan(ctx, c, plan)
	if err != nil {
		return err
	}
	p, err := planctl.Rollback(ctx, c, of, now)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Created upgradeplan %s: rolls upgradeplan %s back from %s to %s with the ISO and images its soak kept; "+
		"workers first, then the control plane; etcd stays at its newer version.\nFollow it: upgrade-repo upgrade status %s -w\n",
		p.Name, of.Name, of.Spec.Version, p.Spec.Version, p.Name)
	return nil
}
