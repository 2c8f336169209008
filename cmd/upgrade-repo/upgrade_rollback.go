package main

import (
	"context"
	"fmt"
	"time"

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
	return planctl.FinalizeVerb(ctx, a.stdout, c, plan, time.Now())
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
	return planctl.RollbackVerb(ctx, a.stdout, c, plan, time.Now())
}
