package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
	"github.com/upgrade-repo/upgrade-repo/planctl"
)

// planVerbOptions are what pause, resume, retry and abort share: the plan and the cluster.
type planVerbOptions struct {
	plan string
	kubeclient.Options
}

// parsePlanVerb parses the flags of a verb that acts on one plan, PLAN before or after them;
// extra registers the verb's own flags.
func parsePlanVerb(a *app, verb, usage string, args []string, extra func(*flag.FlagSet)) (planVerbOptions, bool, error) {
	var o planVerbOptions
	fset := verbFlagSet(a, verb,
		fmt.Sprintf("usage: upgrade-repo upgrade %s PLAN [-n NAMESPACE] [--kubeconfig FILE] [--context NAME] [--api-timeout D]", verb), "  "+usage)
	o.AddFlags(fset)
	if extra != nil {
		extra(fset)
	}
	pos, help, err := parseVerbArgs(a.stdout, fset, args)
	if help || err != nil {
		return o, help, err
	}
	if len(pos) != 1 {
		return o, false, fmt.Errorf("%w: upgrade %s takes one plan, got %q", errUsage, verb, pos)
	}
	if err := o.Check(); err != nil {
		return o, false, err
	}
	o.plan = pos[0]
	return o, false, nil
}

// runUpgradePause holds a plan before its next node.
func runUpgradePause(ctx context.Context, a *app, args []string) error {
	o, help, err := parsePlanVerb(a, "pause", "adds every node not yet Upgraded to spec.nodeUpgradeOption.pauseNodes: no new node starts", args, nil)
	if help || err != nil {
		return err
	}
	c, err := o.Client(a.stderr)
	if err != nil {
		return err
	}
	return planctl.PauseVerb(ctx, a.stdout, c, o.plan)
}

// runUpgradeResume takes the nodes pause added out of pauseNodes.
func runUpgradeResume(ctx context.Context, a *app, args []string) error {
	var all bool
	o, help, err := parsePlanVerb(a, "resume", "removes the nodes upgrade pause added from pauseNodes (--all: every node)", args, func(fset *flag.FlagSet) {
		fset.BoolVar(&all, "all", false, "empty pauseNodes, the nodes paused by hand too")
	})
	if help || err != nil {
		return err
	}
	c, err := o.Client(a.stderr)
	if err != nil {
		return err
	}
	return planctl.ResumeVerb(ctx, a.stdout, c, o.plan, all)
}

// runUpgradeRetry resumes a Failed plan.
func runUpgradeRetry(ctx context.Context, a *app, args []string) error {
	o, help, err := parsePlanVerb(a, "retry", "resumes a Failed plan from the phase that failed ("+v1beta1.RetryAnnotation+")", args, nil)
	if help || err != nil {
		return err
	}
	c, err := o.Client(a.stderr)
	if err != nil {
		return err
	}
	return planctl.RetryVerb(ctx, a.stdout, c, o.plan, time.Now())
}

// upgradeAbortOptions are the flags of `upgrade abort`.
type upgradeAbortOptions struct {
	planVerbOptions
	yes          bool
	sucNamespace string
}

// runUpgradeAbort deletes a plan, once confirmed, and says what it leaves.
func runUpgradeAbort(ctx context.Context, a *app, args []string) error {
	var o upgradeAbortOptions
	var err error
	var help bool
	o.planVerbOptions, help, err = parsePlanVerb(a, "abort", "deletes the plan; upgraded nodes stay upgraded, a cordoned node stays cordoned (see docs/operating.md)", args, func(fset *flag.FlagSet) {
		fset.BoolVar(&o.yes, "yes", false, "do not ask (required when stdin is not a terminal)")
		fset.StringVar(&o.sucNamespace, "suc-namespace", "cattle-system", "system-upgrade-controller's `namespace`, as the sequencer's --suc-namespace")
	})
	if help || err != nil {
		return err
	}
	c, err := o.Client(a.stderr)
	if err != nil {
		return err
	}
	return usageOf(planctl.AbortVerb(ctx, a.stdout, c, planctl.AbortOptions{Plan: o.plan, Yes: o.yes, SUCNamespace: o.sucNamespace,
		In: os.Stdin, Interactive: isTerminal(os.Stdin)}))
}
