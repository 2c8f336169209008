package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

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
	return upgradeNode(ctx, a.stdout, c, o)
}

// upgradeNode makes sure a plan upgrades o.node alone and says which.
func upgradeNode(ctx context.Context, w io.Writer, c client.Client, o upgradeNodeOptions) error {
	res, err := planctl.UpgradeNode(ctx, c, o.node, o.version, o.name)
	if err != nil {
		return err
	}
	p := res.Plan
	from := ""
	if res.From != "" {
		from = " (the Version of " + res.From + ", the plan that Succeeded last)"
	}
	if res.Created {
		fmt.Fprintf(w, "Created upgradeplan %s: node %s alone to version %s%s.\n", p.Name, o.node, p.Spec.Version, from)
	} else {
		fmt.Fprintf(w, "Upgradeplan %s upgrades node %s alone to version %s already (%s): nothing created.\n",
			p.Name, o.node, p.Spec.Version, p.Status.Phase.Name())
	}
	if len(res.Others) > 0 {
		fmt.Fprintf(w, "In flight: %s; the sequencer starts %s once they are finished.\n", strings.Join(res.Others, ", "), p.Name)
	}
	fmt.Fprintf(w, "Follow it: upgrade-repo upgrade status %s -w\n", p.Name)
	return nil
}
