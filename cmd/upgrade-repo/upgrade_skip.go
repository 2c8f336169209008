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
	return upgradeSkip(ctx, a.stdout, c, pos)
}

// upgradeSkip skips the nodes of args ([PLAN] NODE...) and says what that leaves.
func upgradeSkip(ctx context.Context, w io.Writer, c client.Client, args []string) error {
	plan, nodes, err := planctl.PlanAndNodes(ctx, c, args)
	if err != nil {
		return err
	}
	res, err := planctl.Skip(ctx, c, plan, nodes)
	if err != nil {
		return err
	}
	if len(res.Added) > 0 {
		fmt.Fprintf(w, "Skipped in upgradeplan %s: %s added to spec.nodeUpgradeOption.skipNodes; the plan finishes without them.\n", plan, strings.Join(res.Added, ", "))
	}
	if len(res.Already) > 0 {
		fmt.Fprintf(w, "Already skipped in upgradeplan %s: %s.\n", plan, strings.Join(res.Already, ", "))
	}
	for _, n := range append(res.Added, res.Already...) {
		at := "the version it has"
		if v := res.Versions[n]; v != "" {
			at = "kubelet " + v
		}
		fmt.Fprintf(w, "%s stays at %s; once it is back: upgrade-repo upgrade node %s\n", n, at, n)
	}
	if len(res.Stepping) > 0 {
		fmt.Fprintf(w, "Being upgraded: %s; the step goes on, and the node is skipped once it ends.\n", strings.Join(res.Stepping, ", "))
	}
	return nil
}
