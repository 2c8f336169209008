package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
	"github.com/upgrade-repo/upgrade-repo/forecast"
	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
	"github.com/upgrade-repo/upgrade-repo/isorelease"
	"github.com/upgrade-repo/upgrade-repo/planview"
	"github.com/upgrade-repo/upgrade-repo/policy"
	"github.com/upgrade-repo/upgrade-repo/release"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
	"github.com/upgrade-repo/upgrade-repo/sequencer/repoclient"
)

// errNotAllowed is returned by plan when the upgrade is refused, so the exit status is not 0.
var errNotAllowed = errors.New("the upgrade is not allowed")

// planOptions are the plan command's flags.
type planOptions struct {
	current, release, currentRelease string
	to, namespace                    string
	force, allowPrerelease           bool
	output                           string
	// currentKubernetes is the control plane's Kubernetes version: given, or the API server's.
	currentKubernetes string
	// versionCreated says the Version named by to is created once the upgrade is allowed
	// (upgrade apply): the VersionExists policy holds for it.
	versionCreated bool
	// isoURL, without release, is the release ISO's URL (upgrade apply): the release is read from
	// it through ranges when it can be, else judged by the sequencer once read.
	isoURL string
	// plan is the plan judged (upgrade apply's, to create): its nodeUpgradeOption scopes the
	// nodes judged and ordered as the sequencer will. Nil judges one over every node.
	plan *v1beta1.UpgradePlan
}

// planComponent is one component's version before and after.
type planComponent struct {
	Name    string `json:"name"`
	Current string `json:"current"`
	Target  string `json:"target"`
	Changed bool   `json:"changed"`
}

// planCheck is one policy's outcome as the plan command shows it.
type planCheck struct {
	policy.Check
	// Result is pass, fail, warn (failed, forced) or skip (not judged without a cluster).
	Result string `json:"result"`
}

// planPhase is one phase that would run.
type planPhase struct {
	Phase v1beta1.Phase `json:"phase"`
	What  string        `json:"what"`
}

// planReport is what plan prints; -o json prints it as it is.
type planReport struct {
	Allowed    bool            `json:"allowed"`
	Current    string          `json:"current"`
	Target     string          `json:"target"`
	Components []planComponent `json:"components"`
	Checks     []planCheck     `json:"checks"`
	Phases     []planPhase     `json:"phases"`
	// CurrentKubernetes and TargetKubernetes are the control plane's Kubernetes version and the
	// release's, when known: what the Kubernetes version-skew checks judged.
	CurrentKubernetes string `json:"currentKubernetes,omitempty"`
	TargetKubernetes  string `json:"targetKubernetes,omitempty"`
	// ControlPlaneNodes and OtherNodes give the node upgrade order when a cluster was asked.
	ControlPlaneNodes []string `json:"controlPlaneNodes,omitempty"`
	OtherNodes        []string `json:"otherNodes,omitempty"`
	// WorkersFirst says the other nodes go first, then the control plane (a rollback).
	WorkersFirst bool `json:"workersFirst,omitempty"`
	// Batches are the other nodes in the batches they are upgraded in, with the plan's
	// concurrency, when each takes as long: no two nodes of one zone, nor two whose pods one
	// PodDisruptionBudget needs, in one batch.
	Batches [][]string `json:"batches,omitempty"`
	Notes   []string   `json:"notes,omitempty"`
	// Images is what the target ISO's archives hold, when --release names an ISO.
	Images *planImageReport `json:"images,omitempty"`
	// Disk is each node's disk forecast, when a cluster was asked and the ISO's size is known.
	Disk []forecast.NodeDisk `json:"disk,omitempty"`
}

// runPlan shows whether upgrading to a release is allowed and what it would change. It returns
// errNotAllowed (exit status 1) when the upgrade is refused.
func runPlan(ctx context.Context, a *app, args []string) error {
	var (
		o    planOptions
		kube kubeclient.Options
	)
	fset := flag.NewFlagSet("plan", flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	fset.StringVar(&o.current, "current", "", "the installed `version` (default: read from the cluster)")
	fset.StringVar(&o.release, "release", "", "the target's harvester-release.yaml: a `file`, its URL, or a repo's base URL (read at /v1/release)")
	fset.StringVar(&o.currentRelease, "current-release", "", "the installed release's metadata, as --release, to compare component versions")
	fset.StringVar(&o.to, "to", "", "the target `version` (the name of a Version in the cluster)")
	kube.AddFlags(fset)
	fset.StringVar(&o.currentKubernetes, "current-kubernetes", "", "the control plane's Kubernetes `version` (default: the API server's with a cluster, else --current-release's kubernetes)")
	fset.BoolVar(&o.force, "force", false, "turn the failures of skippable policies into warnings")
	fset.BoolVar(&o.allowPrerelease, "allow-prerelease", false, "allow a pre-release target")
	fset.StringVar(&o.output, "o", "text", "output `format`: text or json")
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
	if err := checkOutput(o.output, "text", "json"); err != nil {
		return err
	}
	if err := kube.Check(); err != nil {
		return err
	}
	o.namespace = kube.Namespace
	// The cluster (kubectl's: --kubeconfig, $KUBECONFIG, ~/.kube/config) is asked unless what
	// it would tell is given (--current and --release) and no flag names a cluster.
	named := false
	fset.Visit(func(f *flag.Flag) { named = named || f.Name == "kubeconfig" || f.Name == "context" })
	var c client.Reader
	if named || o.current == "" || o.release == "" {
		var sv discovery.ServerVersionInterface
		var err error
		c, sv, err = kube.Reader()
		switch {
		case errors.Is(err, kubeclient.ErrNoKubeconfig) && !named:
			return fmt.Errorf("%w: give --current and --release, or a cluster (--kubeconfig, $KUBECONFIG or ~/.kube/config) and --to", errUsage)
		case err != nil:
			return err
		}
		if o.currentKubernetes == "" {
			v, err := sv.ServerVersion()
			if err != nil {
				return fmt.Errorf("read the API server's version: %w", err)
			}
			o.currentKubernetes = v.GitVersion
		}
	}
	if c != nil && o.to == "" {
		// No target: every Version of the cluster, judged.
		if o.output == "json" {
			vs, err := planVersions(ctx, nil, c, o, &http.Client{Timeout: 30 * time.Second})
			if err != nil {
				return err
			}
			return planview.Encode(a.stdout, vs)
		}
		_, err := planVersions(ctx, a.stdout, c, o, &http.Client{Timeout: 30 * time.Second})
		return err
	}
	rep, err := makePlan(ctx, o, c, &http.Client{Timeout: 30 * time.Second})
	if err != nil {
		return err
	}
	if o.output == "json" {
		if err := planview.Encode(a.stdout, rep); err != nil {
			return fmt.Errorf("write plan: %w", err)
		}
	} else if err := printUpgradePlan(a.stdout, rep); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	if !rep.Allowed {
		return errNotAllowed
	}
	return nil
}

// makePlan gathers the facts (from c when it is not nil) and judges them.
func makePlan(ctx context.Context, o planOptions, c client.Reader, hc *http.Client) (*planReport, error) {
	target, targetISO, err := loadRelease(ctx, hc, o.release)
	if err != nil {
		return nil, fmt.Errorf("target release: %w", err)
	}
	var isoNote string
	if o.release == "" && o.isoURL != "" {
		if targetISO, err = isorelease.Open(ctx, hc, o.isoURL); err == nil {
			target = targetISO.Release
		} else {
			// The reason is the operator's to act on (a refused signature, an origin without
			// ranges or validators, a damaged image); isorelease names the URL redacted.
			reason := strings.Join(strings.Fields(err.Error()), " ")
			if errors.Is(err, httprange.ErrNoRanges) {
				reason = "its origin does not serve ranges: " + reason
			}
			targetISO, isoNote = nil, "the release was not read from the ISO's URL ("+reason+")"
		}
	}
	currentRel, currentISO, err := loadRelease(ctx, hc, o.currentRelease)
	if err != nil {
		return nil, fmt.Errorf("current release: %w", err)
	}
	// The plan judged: the one apply would create, else the one the flags describe.
	p := &v1beta1.UpgradePlan{}
	if o.plan != nil {
		p = o.plan.DeepCopy()
	}
	p.Spec.Force, p.Spec.AllowPrerelease = o.force, o.allowPrerelease
	facts := sequencer.JudgeFacts{
		Installed:         sequencer.Installed{Version: o.current},
		VersionExists:     true,
		KubernetesVersion: o.currentKubernetes,
		Release:           target,
	}
	rep := &planReport{}
	switch {
	case target != nil:
		p.Spec.Version = target.Harvester
		if o.to != "" && o.to != target.Harvester {
			return nil, fmt.Errorf("--to %s but the release given by --release is %s", o.to, target.Harvester)
		}
	default:
		p.Spec.Version = o.to
		if isoNote == "" {
			isoNote = "the target release metadata was not given (--release)"
		}
		rep.Notes = append(rep.Notes, isoNote+": minUpgradableVersion is checked once the sequencer reads it")
	}
	if c != nil {
		f, err := sequencer.GatherFacts(ctx, c, o.namespace, "", p.Spec.Version)
		if err != nil {
			return nil, err
		}
		if facts.Installed.Version == "" {
			facts.Installed.Version = f.Installed.Version
			if facts.Installed.Version == "" {
				rep.Notes = append(rep.Notes, fmt.Sprintf("no installed version recorded in configmap %s/%s; give --current", o.namespace, sequencer.InstalledConfigMap))
			}
		}
		if currentRel == nil {
			currentRel = f.Installed.Release
		}
		facts.VersionExists = f.Version != nil || o.versionCreated
		facts.PlansInFlight = f.PlansInFlight
		if facts.KubernetesVersion == "" {
			facts.KubernetesVersion = f.KubernetesVersion
		}
		facts.Nodes = sequencer.NodeInfos(f.Nodes)
		facts.RepoNodes, facts.UndrainableBudgets = f.RepoNodes, f.UndrainableBudgets
		if f.Version != nil {
			facts.ISOChecksum = f.Version.Spec.ISOChecksum
		}
		facts.Now = time.Now()
		facts.Certificates, facts.CertificatesNote = sequencer.ServingCertificates(ctx, f.Nodes, sequencer.DefaultAPIServerPort)
		if facts.Disruptions, err = sequencer.GatherDisruptions(ctx, c, nil); err != nil {
			return nil, err
		}
	}
	if targetISO != nil {
		facts.ISOSize, facts.Archives = targetISO.Size, targetISO.Archives
	}
	facts.Installed.Release = currentRel
	j := sequencer.Judge(p, facts)
	if c != nil {
		rep.ControlPlaneNodes, rep.OtherNodes, rep.WorkersFirst, rep.Batches = j.ControlPlaneNodes, j.OtherNodes, j.WorkersFirst, j.Batches
	}
	in, res := j.Input, j.Result
	rep.Allowed = res.Allowed
	rep.Current, rep.Target = in.Current, in.Target
	rep.CurrentKubernetes, rep.TargetKubernetes = in.KubernetesCurrent, in.KubernetesTarget
	for _, ch := range res.Checks {
		pc := planCheck{Check: ch, Result: checkResult(ch)}
		if c == nil && slices.Contains(clusterChecks, ch.Name) {
			pc.Result = "skip"
			pc.Message = "not checked without a cluster (--current and --release only)"
		}
		rep.Checks = append(rep.Checks, pc)
	}
	rep.Disk = j.Disk
	rep.Components = planComponents(in.Current, currentRel, in.Target, target)
	if targetISO != nil {
		rep.Images = planImages(targetISO, currentISO)
		if targetISO.Requests > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("read %s of the %s ISO in %d requests, without downloading it",
				planview.Bytes(targetISO.Bytes), planview.Bytes(targetISO.Size), targetISO.Requests))
		}
	}
	for _, s := range sequencer.Steps {
		rep.Phases = append(rep.Phases, planPhase{Phase: s.Running, What: s.What})
	}
	return rep, nil
}

// clusterChecks are the checks that only a cluster answers: plan without one skips them.
var clusterChecks = []string{policy.CheckVersionExists, policy.CheckNoPlanInFlight, policy.CheckNodesReady,
	policy.CheckNodeDiskSpace, policy.CheckNodesSchedulable, policy.CheckDrainable, policy.CheckCertificateExpiry}

// checkResult is how plan shows a check's outcome: pass, warn (failed, forced) or fail.
func checkResult(ch policy.Check) string {
	switch {
	case ch.Forced:
		return "warn"
	case !ch.Passed:
		return "fail"
	}
	return "pass"
}

// loadRelease reads the release at src ("" reads nothing); an ISO (a file or URL ending in .iso)
// is read with its image lists and archive sizes, a URL through Range requests.
func loadRelease(ctx context.Context, hc *http.Client, src string) (*release.Release, *isorelease.Contents, error) {
	switch {
	case src == "":
		return nil, nil, nil
	case isorelease.IsISO(src):
		c, err := isorelease.Open(ctx, hc, src)
		if err != nil {
			return nil, nil, err
		}
		return c.Release, c, nil
	}
	r, err := repoclient.Load(ctx, hc, src)
	return r, nil, err
}
