package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
	"github.com/upgrade-repo/upgrade-repo/planctl"
)

// upgradeStatusOptions are the flags and argument of `upgrade status`.
type upgradeStatusOptions struct {
	plan, output string
	kubeclient.Options
	watch bool
	// terminal redraws the status in place with progress bars; else a watch writes one line
	// per change.
	terminal bool
	// timeout bounds a watch; 0 waits for the plan's end.
	timeout time.Duration
}

// runUpgradeStatus prints an UpgradePlan's status; with -w it prints it again at each change
// until the plan ends, and fails when it failed.
func runUpgradeStatus(ctx context.Context, a *app, args []string) error {
	var o upgradeStatusOptions
	fset := verbFlagSet(a, "status",
		"usage: upgrade-repo upgrade status [PLAN] [-o text|wide|json|yaml] [-n NAMESPACE] [-w [--timeout D]] [--kubeconfig FILE] [--context NAME] [--api-timeout D]",
		"  without PLAN: the newest plan that is not finished, else the newest plan")
	fset.StringVar(&o.output, "o", "text", "output `format`: text (wide: the same table), json or yaml")
	fset.StringVar(&o.output, "output", "text", "same as -o")
	o.AddFlags(fset)
	fset.BoolVar(&o.watch, "w", false, "print the status again at each change until the plan ends; exit 1 if it failed")
	fset.BoolVar(&o.watch, "watch", false, "same as -w")
	fset.DurationVar(&o.timeout, "timeout", 0, "with -w, stop following after this `duration` and exit 3 (the plan goes on); 0 waits for its end")
	pos, help, err := parseVerbArgs(a.stdout, fset, args)
	if help || err != nil {
		return err
	}
	if len(pos) > 1 {
		return fmt.Errorf("%w: upgrade status takes at most one plan, got %q", errUsage, pos)
	}
	if len(pos) == 1 {
		o.plan = pos[0]
	}
	switch o.output {
	case "wide":
		o.output = "text" // the table already has every column
	case "text", "json", "yaml":
	default:
		return checkOutput(o.output, "text", "wide", "json", "yaml")
	}
	if o.timeout < 0 {
		return fmt.Errorf("%w: --timeout must not be negative", errUsage)
	}
	if err := o.Check(); err != nil {
		return err
	}
	c, err := o.Client(a.stderr)
	if err != nil {
		return err
	}
	o.terminal = stdoutTerminal(a)
	return followWithTimeout(ctx, c, o.plan, o.timeout, func(ctx context.Context) error {
		return upgradeStatus(ctx, a, c, o, time.Now)
	})
}

// upgradeStatus hands the flags of `upgrade status` to planctl.Status.
func upgradeStatus(ctx context.Context, a *app, c client.WithWatch, o upgradeStatusOptions, now func() time.Time) error {
	return planctl.Status(ctx, a.stdout, a.log, c, planctl.StatusOptions{Plan: o.plan, Output: o.output, Namespace: o.Namespace,
		Watch: o.watch, Terminal: o.terminal}, now)
}

// stdoutTerminal reports whether the command writes to a terminal.
func stdoutTerminal(a *app) bool {
	f, ok := a.stdout.(*os.File)
	return ok && isTerminal(f)
}
