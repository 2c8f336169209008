package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	return upgradePause(ctx, a.stdout, c, o.plan)
}

// upgradePause pauses plan and says what that does and does not stop.
func upgradePause(ctx context.Context, w io.Writer, c client.Client, plan string) error {
	res, err := planctl.Pause(ctx, c, plan)
	if err != nil {
		return err
	}
	if len(res.Added) == 0 {
		fmt.Fprintf(w, "Nothing to pause in upgradeplan %s: every node is upgraded or paused already.\n", plan)
		return nil
	}
	fmt.Fprintf(w, "Paused upgradeplan %s: %s added to spec.nodeUpgradeOption.pauseNodes; no new node starts until upgrade resume %s.\n",
		plan, strings.Join(res.Added, ", "), plan)
	if len(res.InFlight) > 0 {
		fmt.Fprintf(w, "Being upgraded, and finishing: %s.\n", strings.Join(res.InFlight, ", "))
	}
	var p v1beta1.UpgradePlan
	if err := c.Get(ctx, client.ObjectKey{Name: plan}, &p); err == nil && beforeNodes(p.Status.Phase) {
		fmt.Fprintf(w, "The plan is %s: the phases before NodeUpgrading go on, and it holds before its first node.\n", p.Status.Phase.Name())
	}
	return nil
}

// beforeNodes reports whether a running plan has not reached NodeUpgrading yet.
func beforeNodes(p v1beta1.Phase) bool {
	switch p {
	case v1beta1.PhaseNodeUpgrading, v1beta1.PhaseNodeUpgraded, v1beta1.PhaseCleaningUp, v1beta1.PhaseCleanedUp,
		v1beta1.PhaseSucceeded, v1beta1.PhaseFailed:
		return false
	}
	return true
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
	return upgradeResume(ctx, a.stdout, c, o.plan, all)
}

// upgradeResume resumes plan and names the nodes left paused.
func upgradeResume(ctx context.Context, w io.Writer, c client.Client, plan string, all bool) error {
	removed, still, err := planctl.Resume(ctx, c, plan, all)
	if err != nil {
		return err
	}
	if len(removed) == 0 {
		fmt.Fprintf(w, "Nothing to resume in upgradeplan %s: upgrade pause paused no node.\n", plan)
	} else {
		fmt.Fprintf(w, "Resumed upgradeplan %s: %s removed from spec.nodeUpgradeOption.pauseNodes.\n", plan, strings.Join(removed, ", "))
	}
	if len(still) > 0 {
		fmt.Fprintf(w, "Still paused, listed by hand: %s (upgrade resume %s --all removes them).\n", strings.Join(still, ", "), plan)
	}
	return nil
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
	return upgradeRetry(ctx, a.stdout, c, o.plan, time.Now())
}

// upgradeRetry asks the sequencer to retry plan.
func upgradeRetry(ctx context.Context, w io.Writer, c client.Client, plan string, now time.Time) error {
	v, err := planctl.Retry(ctx, c, plan, now)
	if err != nil {
		return err
	}
	var p v1beta1.UpgradePlan
	from := "the phase that failed"
	if c.Get(ctx, client.ObjectKey{Name: plan}, &p) == nil && p.Status.FailedPhase != "" {
		from = string(p.Status.FailedPhase)
	}
	fmt.Fprintf(w, "Asked upgradeplan %s to retry (%s=%s): the sequencer resumes it from %s.\nFollow it: upgrade-repo upgrade status %s -w\n",
		plan, v1beta1.RetryAnnotation, v, from, plan)
	return nil
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
	return upgradeAbort(ctx, a.stdout, c, o, os.Stdin, isTerminal(os.Stdin))
}

// upgradeAbort shows what deleting the plan leaves, asks, deletes it and says what to do about
// what it left.
func upgradeAbort(ctx context.Context, w io.Writer, c client.Client, o upgradeAbortOptions, in io.Reader, interactive bool) error {
	var p v1beta1.UpgradePlan
	if err := c.Get(ctx, client.ObjectKey{Name: o.plan}, &p); err != nil {
		return fmt.Errorf("get upgradeplan %s: %w", o.plan, err)
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	if !o.yes {
		fmt.Fprintf(w, "Deleting upgradeplan %s (%s) leaves:\n", p.Name, p.Status.Phase.Name())
		printLeftovers(w, planctl.Inspect(&p, nodes.Items, o.sucNamespace), p.Spec.Version, false)
		if err := confirm(w, in, interactive, "Abort?", "nothing was deleted"); err != nil {
			return err
		}
	}
	l, err := planctl.Abort(ctx, c, &p, nodes.Items, o.sucNamespace)
	if err != nil {
		return err
	}
	if !o.yes {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "Deleted upgradeplan %s (it was %s). It leaves:\n", p.Name, l.Phase.Name())
	printLeftovers(w, l, p.Spec.Version, true)
	return nil
}

// printLeftovers says what a deleted plan leaves; with commands, how to deal with it.
func printLeftovers(w io.Writer, l planctl.Leftovers, version string, commands bool) {
	if len(l.Upgraded) > 0 {
		fmt.Fprintf(w, "- upgraded, and they stay so: %s (the installed version is not recorded: only a plan that succeeds does)\n", strings.Join(l.Upgraded, ", "))
	}
	if len(l.Interrupted) > 0 {
		fmt.Fprintf(w, "- interrupted: the step of %s; its Job and pod are deleted with the plan, wherever the step is: the node may be half upgraded\n", strings.Join(l.Interrupted, ", "))
	}
	if l.ClusterJob {
		fmt.Fprintln(w, "- interrupted: the cluster Job, deleted with the plan wherever it is")
	}
	if len(l.Cordoned) > 0 {
		fmt.Fprintf(w, "- cordoned, and they stay so (nothing uncordons them once the plan is gone): %s\n", strings.Join(l.Cordoned, ", "))
		if commands {
			fmt.Fprintf(w, "  once fit to run pods again: kubectl uncordon %s\n", strings.Join(l.Cordoned, " "))
		}
	}
	if len(l.Restored) > 0 {
		verb := "is uncordoned"
		if !commands {
			verb = "will be uncordoned"
		}
		fmt.Fprintf(w, "- nothing on %s: the release failed there first and kubeadm restored its manifests; it runs its earlier version and %s\n", strings.Join(l.Restored, ", "), verb)
	}
	if len(l.SUCPlans) > 0 {
		fmt.Fprintf(w, "- system-upgrade-controller's Plans %s, which go on upgrading nodes until deleted\n", strings.Join(l.SUCPlans, ", "))
		if commands {
			ns, _, _ := strings.Cut(l.SUCPlans[0], "/")
			var names []string
			for _, p := range l.SUCPlans {
				_, n, _ := strings.Cut(p, "/")
				names = append(names, n)
			}
			fmt.Fprintf(w, "  to stop them: kubectl -n %s delete plans.upgrade.cattle.io %s\n", ns, strings.Join(names, " "))
		}
	}
	fmt.Fprintf(w, "- the Version %s, for a later plan\n", version)
	fmt.Fprintln(w, "Gone with the plan: its Jobs and their pods (and logs), compatibility mode's Service and Deployment; the agents drop the ISO once no plan holds it.")
}
