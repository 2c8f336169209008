package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/planctl"
)

// upgradeVerbs lists the verbs of `upgrade`, each a command of its own.
func upgradeVerbs() map[string]command {
	return map[string]command{
		"apply":    {"judge, create and follow an upgrade from a release ISO's URL and checksum", runUpgradeApply},
		"status":   {"show an UpgradePlan's phase and its nodes; -w follows it until it ends", runUpgradeStatus},
		"pause":    {"start no new node: every node not yet upgraded into spec.nodeUpgradeOption.pauseNodes", runUpgradePause},
		"resume":   {"take the nodes pause added out of pauseNodes again (--all: every node)", runUpgradeResume},
		"retry":    {"resume a Failed UpgradePlan from the phase that failed", runUpgradeRetry},
		"rollback": {"roll a Succeeded plan's patch upgrade back to the release its soak keeps (no download, no pull)", runUpgradeRollback},
		"finalize": {"end a Succeeded plan's soak: no rollback from then on, the previous release is cleaned up", runUpgradeFinalize},
		"abort":    {"delete an UpgradePlan and say what it leaves (cordoned nodes, interrupted steps)", runUpgradeAbort},
		"skip":     {"give up on nodes of the plan in flight: into spec.nodeUpgradeOption.skipNodes, they stay at their version", runUpgradeSkip},
		"node":     {"upgrade one node alone (a node skipped before) to the last Succeeded plan's Version, or --version", runUpgradeNode},
	}
}

// runUpgrade dispatches to the verb named by args[0].
func runUpgrade(ctx context.Context, a *app, args []string) error {
	verbs := upgradeVerbs()
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "usage: upgrade-repo upgrade <verb> [flags]")
		for _, n := range slices.Sorted(maps.Keys(verbs)) {
			fmt.Fprintf(w, "  %-8s %s\n", n, verbs[n].summary)
		}
	}
	if done, err := helpOrMissing(a.stdout, a.stderr, args, usage, "upgrade needs a verb"); done {
		return err
	}
	v, ok := verbs[args[0]]
	if !ok {
		return fmt.Errorf("%w: unknown upgrade verb %q", errUsage, args[0])
	}
	return v.run(ctx, a, args[1:])
}

// verbFlagSet returns the flag set of the upgrade verb name, whose errors go to the command's
// stderr and whose usage is the lines given, then the flags.
func verbFlagSet(a *app, name string, usage ...string) *flag.FlagSet {
	fset := flag.NewFlagSet("upgrade "+name, flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	fset.Usage = func() {
		for _, l := range usage {
			fmt.Fprintln(fset.Output(), l)
		}
		fset.PrintDefaults()
	}
	return fset
}

// parseVerbArgs parses a verb's flags, which may come before or after its arguments (PLAN), as
// with kubectl, and returns the arguments. -h prints the usage to stdout.
func parseVerbArgs(stdout io.Writer, fset *flag.FlagSet, args []string) (pos []string, help bool, err error) {
	for {
		if help, err := parseFlags(stdout, fset, args); help || err != nil {
			return nil, help, err
		}
		if fset.NArg() == 0 {
			return pos, false, nil
		}
		pos, args = append(pos, fset.Arg(0)), fset.Args()[1:]
	}
}

// followWithTimeout runs follow under timeout (none when 0). When the timeout, and not ctx,
// ended it, the error wraps errTimeout and says where the plan stands: it goes on without us.
func followWithTimeout(ctx context.Context, c client.Reader, plan string, timeout time.Duration, follow func(context.Context) error) error {
	if timeout <= 0 {
		return follow(ctx)
	}
	fctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := follow(fctx)
	if err == nil || fctx.Err() == nil || ctx.Err() != nil {
		return err
	}
	where := ""
	var p v1beta1.UpgradePlan
	if plan != "" && c.Get(ctx, client.ObjectKey{Name: plan}, &p) == nil {
		where = fmt.Sprintf(" upgradeplan %s is %s;", plan, p.Status.Phase.Name())
	}
	again := "upgrade-repo upgrade status -w"
	if plan != "" {
		again = "upgrade-repo upgrade status " + plan + " -w"
	}
	return fmt.Errorf("%w after %s:%s the upgrade goes on (%s)", errTimeout, timeout, where, again)
}

// usageOf makes a planctl.ErrUsage a usage error (exit status 2), its words kept.
func usageOf(err error) error {
	if errors.Is(err, planctl.ErrUsage) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return err
}
