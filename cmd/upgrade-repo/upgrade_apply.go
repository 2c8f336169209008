package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
	"github.com/upgrade-repo/upgrade-repo/planctl"
)

// upgradeApplyOptions are the flags of `upgrade apply`.
type upgradeApplyOptions struct {
	req         planctl.Request
	release     string
	yes, dryRun bool
	timeout     time.Duration
	kubeclient.Options
}

// applyEnv is what apply talks to besides the cluster's objects: the API server's version (nil:
// the control plane's kubelets tell it), the web for the checksum file and the release metadata,
// the operator's answer, and the clock of the status tables.
type applyEnv struct {
	c             client.WithWatch
	serverVersion func() (string, error)
	hc            *http.Client
	// stdin is where the answer to "Proceed?" is read; interactive says it is a terminal.
	stdin       io.Reader
	interactive bool
	now         func() time.Time
}

// runUpgradeApply judges an upgrade to a release ISO against the cluster, creates its Version and
// UpgradePlan once allowed and confirmed, and follows the plan to its end.
func runUpgradeApply(ctx context.Context, a *app, args []string) error {
	var o upgradeApplyOptions
	fset := verbFlagSet(a, "apply",
		"usage: upgrade-repo upgrade apply --iso-url URL [--iso-checksum sha512:HEX] [--version NAME] [--name PLAN] [--yes] [--dry-run] [--timeout D] [flags]",
		"exit status: 0 the plan Succeeded, 1 refused, Failed or deleted, 2 usage, 3 --timeout")
	fset.StringVar(&o.req.ISOURL, "iso-url", "", "the release ISO's `URL` (http or https)")
	fset.StringVar(&o.req.Checksum, "iso-checksum", "", "the ISO's `sha512:HEX`; default: read from the file at the ISO's URL with "+planctl.ChecksumSuffix)
	fset.StringVar(&o.req.Version, "version", "", "the Version's `name`; default: the release version in the ISO's file name")
	fset.StringVar(&o.req.Plan, "name", "", "the UpgradePlan's `name`; default: to-VERSION, dots as dashes")
	fset.StringVar(&o.req.UpgradeImage, "upgrade-image", "", "the `image` of the release's upgrade steps (spec.upgrade); default: the sequencer's")
	fset.BoolVar(&o.req.Force, "force", false, "turn the failures of skippable policies into warnings (spec.force)")
	fset.BoolVar(&o.req.AllowPrerelease, "allow-prerelease", false, "allow a pre-release target (spec.allowPrerelease)")
	fset.StringVar(&o.release, "release", "", "the target's harvester-release.yaml (a `file`, its URL or a repo's base URL); default: read from the ISO's URL through ranges, else judged by the sequencer once it reads the ISO")
	fset.BoolVar(&o.yes, "yes", false, "do not ask before creating the plan (required when stdin is not a terminal)")
	fset.BoolVar(&o.dryRun, "dry-run", false, "print the judgement, the node order and what each drain would evict; create nothing")
	fset.DurationVar(&o.timeout, "timeout", 0, "stop following the plan after this `duration` and exit 3 (the plan goes on); 0 waits for its end")
	o.AddFlags(fset)
	pos, help, err := parseVerbArgs(a.stdout, fset, args)
	if help || err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return fmt.Errorf("%w: upgrade apply takes no arguments, got %q", errUsage, pos)
	case o.req.ISOURL == "":
		return fmt.Errorf("%w: --iso-url is required", errUsage)
	case o.timeout < 0:
		return fmt.Errorf("%w: --timeout must not be negative", errUsage)
	}
	if err := o.Check(); err != nil {
		return err
	}
	// Every flag is judged before the kubeconfig is read: the URL's scheme, the checksum's form
	// and the names the objects would take. Without --iso-checksum the checksum file is read
	// later, so a well-formed stand-in takes its place here.
	early := o.req
	if early.Checksum == "" {
		early.Checksum = "sha512:" + strings.Repeat("0", 128)
	}
	if _, _, err := early.Objects(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	c, err := kubeclient.Retrying(cfg, o.APITimeout, a.stderr)
	if err != nil {
		return err
	}
	// ServerVersion takes no context: its own timeout bounds each attempt.
	dcfg := rest.CopyConfig(cfg)
	dcfg.Timeout = planctl.DefaultAttemptTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(dcfg)
	if err != nil {
		return fmt.Errorf("connect to the cluster: %w", err)
	}
	env := applyEnv{
		c: c, hc: &http.Client{Timeout: 30 * time.Second}, stdin: os.Stdin, interactive: isTerminal(os.Stdin), now: time.Now,
		serverVersion: func() (string, error) {
			var v string
			err := c.Do(ctx, "get the API server's version", func(context.Context) error {
				sv, err := dc.ServerVersion()
				if err == nil {
					v = sv.GitVersion
				}
				return err
			})
			if err != nil {
				return "", fmt.Errorf("read the API server's version: %w", err)
			}
			return v, nil
		},
	}
	return upgradeApply(ctx, a, env, o)
}

// isTerminal reports whether f is a terminal (the ioctl x/term makes on Linux).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// upgradeApply is apply once its flags are parsed (planctl.ApplyVerb), following the plan it
// creates as upgrade status -w does, within the --timeout.
func upgradeApply(ctx context.Context, a *app, env applyEnv, o upgradeApplyOptions) error {
	return usageOf(planctl.ApplyVerb(ctx, a.stdout, env.c, planctl.ApplyOptions{
		Request: o.req, Release: o.release, Namespace: o.Namespace, Yes: o.yes, DryRun: o.dryRun,
		ServerVersion: env.serverVersion, HTTP: env.hc, In: env.stdin, Interactive: env.interactive,
		Follow: func(ctx context.Context, plan string) error {
			return followWithTimeout(ctx, env.c, plan, o.timeout, func(ctx context.Context) error {
				return upgradeStatus(ctx, a, env.c, upgradeStatusOptions{plan: plan, output: "text", watch: true,
					Options: o.Options, terminal: stdoutTerminal(a)}, env.now)
			})
		},
	}))
}
