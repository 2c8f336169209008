package main

import (
	"context"
	"fmt"

	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
	"github.com/upgrade-repo/upgrade-repo/planctl"
)

// runUpgradeSkip gives up on nodes of a plan: they go into its skipNodes.
func runUpgradeSkip(ctx context.Context, a *app, args []string) error {
	var k kubeclient.Options
	fset := verbFlagSet(a, "skip",
		"usage: upgrade-repo upgrade skip [PLAN] NODE... [-n NAMESPACE] [--kubeconfig FILE] [--context NAME] [--api-timeout D]",
		"  adds the nodes to spec.nodeUpgradeOption.skipNodes of PLAN, else of the plan in flight: the plan finishes",
		"  without them and they stay at their version (never a control-plane node); upgrade node NODE upgrades one later")
	k.AddFlags(fset)
	pos, help, err := parseVerbArgs(a.stdout, fset, args)
	if help || err != nil {
		return err
	}
	if len(pos) == 0 {
		return fmt.Errorf("%w: upgrade skip takes the nodes to skip, after the plan if it is not the one in flight", errUsage)
	}
	if err := k.Check(); err != nil {
		return err
	}
	c, err := k.Client(a.stderr)
	if err != nil {
		return err
	}
	return planctl.SkipVerb(ctx, a.stdout, c, pos)
}
