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

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
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

// defaultNamespace is the namespace the chart and the manifests install the sequencer into.
const defaultNamespace = "upgrade-repo-system"

// kubeOptions are the flags of every command that talks to the cluster as a client (plan and
// the upgrade verbs): which cluster and namespace, as kubectl takes them, and how long to wait
// for its API server while it is away. They are registered by flags and turned into a client
// configuration by restConfig, and nowhere else.
type kubeOptions struct {
	kubeconfig, context string
	// namespace is the sequencer's: where the installed-version ConfigMap and its pods are.
	namespace string
	// apiTimeout bounds each wait for an API server that is away (planctl.RetryingClient).
	apiTimeout time.Duration
}

// flags registers kubectl's --kubeconfig, --context and -n/--namespace, and --api-timeout, on fset.
func (k *kubeOptions) flags(fset *flag.FlagSet) {
	fset.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig `file`; else $KUBECONFIG, else ~/.kube/config, as kubectl")
	fset.StringVar(&k.context, "context", "", "the kubeconfig `context` to use; its current context when empty")
	fset.StringVar(&k.namespace, "namespace", defaultNamespace, "the sequencer's `namespace`, where the installed version is recorded")
	fset.StringVar(&k.namespace, "n", defaultNamespace, "same as --namespace, as kubectl")
	fset.DurationVar(&k.apiTimeout, "api-timeout", planctl.DefaultAPITimeout,
		"how long to wait for an API server that is away (restarting, electing a leader, overloaded) before failing")
}

// check refuses flags that cannot work.
func (k kubeOptions) check() error {
	switch {
	case k.apiTimeout <= 0:
		return fmt.Errorf("%w: --api-timeout must be positive", errUsage)
	case k.namespace == "":
		return fmt.Errorf("%w: --namespace must not be empty", errUsage)
	}
	return nil
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

// upgradeRESTConfig loads the configuration of the cluster kubectl would talk to (kubeRESTConfig).
func upgradeRESTConfig(k kubeOptions) (*rest.Config, error) {
	return kubeRESTConfig(k.kubeconfig, k.context)
}

// errNoKubeconfig says that no kubeconfig was found and the process does not run in a pod.
var errNoKubeconfig = errors.New("none found (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not running in a cluster")

// kubeRESTConfig is the one place every command (the CLI's verbs, plan, the sequencer and the
// agent) loads its cluster's configuration: clientcmd's loading rules, as kubectl's (kubeconfig,
// else $KUBECONFIG, else ~/.kube/config, else the in-cluster configuration of a pod), and the
// context to use (the current one when empty).
func kubeRESTConfig(kubeconfig, context string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	switch {
	case err == nil:
		return cfg, nil
	case kubeconfig != "":
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	case clientcmd.IsEmptyConfig(err):
		return nil, fmt.Errorf("load kubeconfig: %w", errNoKubeconfig)
	}
	return nil, fmt.Errorf("load kubeconfig: %w", err)
}

// upgradeClient builds a client of the cluster kubectl would talk to (upgradeRESTConfig) that
// rides out a restarting API server (upgradeClientFor).
func upgradeClient(a *app, k kubeOptions) (*planctl.RetryingClient, error) {
	cfg, err := upgradeRESTConfig(k)
	if err != nil {
		return nil, err
	}
	return upgradeClientFor(a, cfg, k.apiTimeout)
}

// upgradeClientFor builds a client of the cluster of cfg that knows the core kinds and v1beta1
// and waits for its API server for at most apiTimeout at each outage, saying once on a.stderr
// that it waits and why.
func upgradeClientFor(a *app, cfg *rest.Config, apiTimeout time.Duration) (*planctl.RetryingClient, error) {
	s, err := planScheme()
	if err != nil {
		return nil, err
	}
	return planctl.NewClusterClient(cfg, s, apiTimeout, planctl.WithWaiting(func(w planctl.Wait) {
		fmt.Fprintf(a.stderr, "upgrade-repo: waiting up to %s for the API server (%s: %s)\n", w.Bound, w.Op, w.Why)
	}))
}
