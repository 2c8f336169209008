package main

import (
	"context"
	"fmt"

	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
	"github.com/upgrade-repo/upgrade-repo/planctl"
)

// upgradeNodeOptions are the flags and argument of `upgrade node`.
type upgradeNodeOptions struct {
	node, version, name string
	kubeclient.Options
}

// runUpgradeNode creates the plan that upgrades one node alone.
func runUpgradeNode(ctx context.Context, a *app, args []string) error {
	var o upgradeNodeOptions
	fset := verbFlagSet(a, "node",
		"usage: upgrade-repo upgrade node NODE [--version V] [--name PLAN] [-n NAMESPACE] [--kubeconfig FILE] [--context NAME] [--api-timeout D]",
		"  creates an UpgradePlan limited to NODE (spec.nodeUpgradeOption.nodes), e.g. for a node a plan skipped, once it is back;",
		"  a plan in flight for the same node and Version is reported, not created again")
	fset.StringVar(&o.version, "version", "", "the `Version` to upgrade the node to; default: the Version of the plan that Succeeded last")
	fset.StringVar(&o.name, "name", "", "the UpgradePlan's `name`; default: VERSION-NODE, dots as dashes")
	o.AddFlags(fset)
	pos, help, err := parseVerbArgs(a.stdout, fset, args)
	if help || err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: upgrade node takes one node, got %q", errUsage, pos)
	}
	o.node = pos[0]
	if err := o.Check(); err != nil {
		return err
	}
	c, err := o.Client(a.stderr)
	if err != nil {
		return err
	}
	return planctl.NodeVerb(ctx, a.stdout, c, o.node, o.version, o.name)
}
