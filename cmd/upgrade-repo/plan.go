package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"time"

	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
	"github.com/upgrade-repo/upgrade-repo/planctl"
)

// errNotAllowed is returned by plan and upgrade apply when the upgrade is refused, so the exit
// status is not 0.
var errNotAllowed = planctl.ErrNotAllowed

// runPlan shows whether upgrading to a release is allowed and what it would change. It returns
// errNotAllowed (exit status 1) when the upgrade is refused.
func runPlan(ctx context.Context, a *app, args []string) error {
	var (
		o      planctl.PreviewOptions
		output string
		kube   kubeclient.Options
	)
	fset := flag.NewFlagSet("plan", flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	fset.StringVar(&o.Current, "current", "", "the installed `version` (default: read from the cluster)")
	fset.StringVar(&o.Release, "release", "", "the target's harvester-release.yaml: a `file`, its URL, or a repo's base URL (read at /v1/release)")
	fset.StringVar(&o.CurrentRelease, "current-release", "", "the installed release's metadata, as --release, to compare component versions")
	fset.StringVar(&o.To, "to", "", "the target `version` (the name of a Version in the cluster)")
	kube.AddFlags(fset)
	fset.StringVar(&o.CurrentKubernetes, "current-kubernetes", "", "the control plane's Kubernetes `version` (default: the API server's with a cluster, else --current-release's kubernetes)")
	fset.BoolVar(&o.Force, "force", false, "turn the failures of skippable policies into warnings")
	fset.BoolVar(&o.AllowPrerelease, "allow-prerelease", false, "allow a pre-release target")
	fset.StringVar(&output, "o", "text", "output `format`: text or json")
	fset.Usage = func() {
		fmt.Fprintln(fset.Output(), "usage: upgrade-repo plan --current VERSION --release FILE|URL [flags]   (no cluster)")
		fmt.Fprintln(fset.Output(), "       upgrade-repo plan --to VERSION [--release FILE|URL] [--kubeconfig FILE] [--context NAME] [-n NAMESPACE] [flags]")
		fmt.Fprintln(fset.Output(), "       upgrade-repo plan [--kubeconfig FILE] [--context NAME]   (the cluster's Versions, judged: which it can upgrade to)")
		fmt.Fprintln(fset.Output(), "  the cluster is kubectl's: --kubeconfig, else $KUBECONFIG, else ~/.kube/config; --context, else the current one")
		fset.PrintDefaults()
	}
	if help, err := parseFlags(a.stdout, fset, args); help || err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return fmt.Errorf("%w: plan takes no arguments, got %q", errUsage, fset.Args())
	}
	if err := checkOutput(output, "text", "json"); err != nil {
		return err
	}
	if err := kube.Check(); err != nil {
		return err
	}
	o.Namespace = kube.Namespace
	// The cluster (kubectl's: --kubeconfig, $KUBECONFIG, ~/.kube/config) is asked unless what
	// it would tell is given (--current and --release) and no flag names a cluster.
	named := false
	fset.Visit(func(f *flag.Flag) { named = named || f.Name == "kubeconfig" || f.Name == "context" })
	var c client.Reader
	if named || o.Current == "" || o.Release == "" {
		var sv discovery.ServerVersionInterface
		var err error
		c, sv, err = kube.Reader()
		switch {
		case errors.Is(err, kubeclient.ErrNoKubeconfig) && !named:
			return fmt.Errorf("%w: give --current and --release, or a cluster (--kubeconfig, $KUBECONFIG or ~/.kube/config) and --to", errUsage)
		case err != nil:
			return err
		}
		if o.CurrentKubernetes == "" {
			v, err := sv.ServerVersion()
			if err != nil {
				return fmt.Errorf("read the API server's version: %w", err)
			}
			o.CurrentKubernetes = v.GitVersion
		}
	}
	return planctl.PlanVerb(ctx, a.stdout, c, o, output, &http.Client{Timeout: 30 * time.Second})
}
