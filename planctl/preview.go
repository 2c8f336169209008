package planctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/forecast"
	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
	"github.com/upgrade-repo/upgrade-repo/isorelease"
	"github.com/upgrade-repo/upgrade-repo/planview"
	"github.com/upgrade-repo/upgrade-repo/policy"
	"github.com/upgrade-repo/upgrade-repo/release"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
	"github.com/upgrade-repo/upgrade-repo/sequencer/repoclient"
)

// PreviewOptions say what Preview judges: the target, the installed release when it is given
// rather than read from the cluster, and the plan's options.
type PreviewOptions struct {
	// Current is the installed version; empty: read from the cluster.
	Current string
	// Release is where the target's release metadata is read (a file, its URL, a repo's base URL
	// or an ISO); empty: not given.
	Release string
	// CurrentRelease is where the installed release's metadata is read, as Release.
	CurrentRelease string
	// To is the target version, the name of a Version in the cluster.
	To string
	// Namespace is the sequencer's, where the installed version is recorded.
	Namespace string
	// Force turns the failures of skippable policies into warnings (spec.force).
	Force bool
	// AllowPrerelease allows a pre-release target (spec.allowPrerelease).
	AllowPrerelease bool
	// CurrentKubernetes is the control plane's Kubernetes version: given, or the API server's.
	CurrentKubernetes string
	// VersionCreated says the Version named by To is created once the upgrade is allowed
	// (upgrade apply): the VersionExists policy holds for it.
	VersionCreated bool
	// ISOURL, without Release, is the release ISO's URL (upgrade apply): the release is read from
	// it through ranges when it can be, else judged by the sequencer once read.
	ISOURL string
	// Plan is the plan judged (upgrade apply's, to create): its nodeUpgradeOption scopes the
	// nodes judged and ordered as the sequencer will. Nil judges one over every node.
	Plan *v1beta1.UpgradePlan
	// CertificateSources are the ports of the control planes whose serving certificates are
	// read (sequencer.ControlPlaneCertificates); nil: sequencer.DefaultCertificateSources, as
	// the sequencer reads them.
	CertificateSources []sequencer.CertificateSource
	// Now is when the plan is judged, for the certificates' expiry; zero: time.Now.
	Now time.Time
}

// Preview gathers the facts (from c when it is not nil; without a cluster the checks only a
// cluster answers are skipped) and judges them as the sequencer will: the report `upgrade-repo
// plan` and `upgrade apply` show.
func Preview(ctx context.Context, o PreviewOptions, c client.Reader, hc *http.Client) (*planview.Report, error) {
	target, targetISO, err := loadRelease(ctx, hc, o.Release)
	if err != nil {
		return nil, fmt.Errorf("target release: %w", err)
	}
	var isoNote string
	if o.Release == "" && o.ISOURL != "" {
		if targetISO, err = isorelease.Open(ctx, hc, o.ISOURL); err == nil {
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
	currentRel, currentISO, err := loadRelease(ctx, hc, o.CurrentRelease)
	if err != nil {
		return nil, fmt.Errorf("current release: %w", err)
	}
	// The plan judged: the one apply would create, else the one the flags describe.
	p := &v1beta1.UpgradePlan{}
	if o.Plan != nil {
		p = o.Plan.DeepCopy()
	}
	p.Spec.Force, p.Spec.AllowPrerelease = o.Force, o.AllowPrerelease
	facts := sequencer.JudgeFacts{
		Installed:         sequencer.Installed{Version: o.Current},
		VersionExists:     true,
		KubernetesVersion: o.CurrentKubernetes,
		Release:           target,
	}
	rep := &planview.Report{}
	switch {
	case target != nil:
		p.Spec.Version = target.Harvester
		if o.To != "" && o.To != target.Harvester {
			return nil, fmt.Errorf("--to %s but the release given by --release is %s", o.To, target.Harvester)
		}
	default:
		p.Spec.Version = o.To
		if isoNote == "" {
			isoNote = "the target release metadata was not given (--release)"
		}
		rep.Notes = append(rep.Notes, isoNote+": minUpgradableVersion is checked once the sequencer reads it")
	}
	if c != nil {
		f, err := sequencer.GatherFacts(ctx, c, o.Namespace, "", p.Spec.Version)
		if err != nil {
			return nil, err
		}
		if facts.Installed.Version == "" {
			facts.Installed.Version = f.Installed.Version
			if facts.Installed.Version == "" {
				rep.Notes = append(rep.Notes, fmt.Sprintf("no installed version recorded in configmap %s/%s; give --current", o.Namespace, sequencer.InstalledConfigMap))
			}
		}
		if currentRel == nil {
			currentRel = f.Installed.Release
		}
		facts.VersionExists = f.Version != nil || o.VersionCreated
		facts.PlansInFlight = f.PlansInFlight
		if facts.KubernetesVersion == "" {
			facts.KubernetesVersion = f.KubernetesVersion
		}
		facts.Nodes = sequencer.NodeInfos(f.Nodes)
		facts.RepoNodes, facts.UndrainableBudgets = f.RepoNodes, f.UndrainableBudgets
		if f.Version != nil {
			facts.ISOChecksum = f.Version.Spec.ISOChecksum
		}
		facts.Now = o.Now
		if facts.Now.IsZero() {
			facts.Now = time.Now()
		}
		sources := o.CertificateSources
		if sources == nil {
			sources = sequencer.DefaultCertificateSources
		}
		facts.Certificates, facts.CertificatesNote = sequencer.ControlPlaneCertificates(ctx, f.Nodes, sources)
		facts.Plans = f.Plans
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
		pc := planview.Check{Check: ch, Result: planview.CheckResult(ch)}
		if c == nil && slices.Contains(clusterChecks, ch.Name) {
			pc.Result = "skip"
			pc.Message = "not checked without a cluster (--current and --release only)"
		}
		rep.Checks = append(rep.Checks, pc)
	}
	rep.Disk = j.Disk
	rep.Components = components(in.Current, currentRel, in.Target, target)
	if targetISO != nil {
		rep.Images = images(targetISO, currentISO)
		if targetISO.Requests > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("read %s of the %s ISO in %d requests, without downloading it",
				forecast.Bytes(targetISO.Bytes), forecast.Bytes(targetISO.Size), targetISO.Requests))
		}
	}
	for _, s := range sequencer.Steps {
		rep.Phases = append(rep.Phases, planview.PhaseStep{Phase: s.Running, What: s.What})
	}
	return rep, nil
}

// clusterChecks are the checks that only a cluster answers: plan without one skips them.
var clusterChecks = []string{policy.CheckVersionExists, policy.CheckNoPlanInFlight, policy.CheckNodesReady,
	policy.CheckNodeDiskSpace, policy.CheckNodesSchedulable, policy.CheckDrainable, policy.CheckCertificateExpiry}

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

// Versions judges every Version of the cluster with the policies Preview applies to one (o
// without its target) and returns them, newest first: the ones the cluster can upgrade to, and
// why not for the others (planview.WriteVersions writes them).
func Versions(ctx context.Context, c client.Reader, o PreviewOptions, hc *http.Client) ([]planview.Version, error) {
	var list v1beta1.VersionList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list versions: %w", err)
	}
	out := make([]planview.Version, 0, len(list.Items))
	for _, v := range list.Items {
		po := o
		po.To, po.Release = v.Name, ""
		rep, err := Preview(ctx, po, c, hc)
		if err != nil {
			return nil, fmt.Errorf("judge version %s: %w", v.Name, err)
		}
		pv := planview.Version{Name: v.Name, Allowed: rep.Allowed, Failed: []string{}, Installed: v.Name == rep.Current}
		pv.Failed = append(pv.Failed, rep.Failed()...)
		if cond := meta.FindStatusCondition(v.Status.Conditions, v1beta1.VersionURLReachable); cond != nil {
			pv.Reachable = string(cond.Status)
		}
		out = append(out, pv)
	}
	// Newest first; names that are no version last, by name.
	slices.SortFunc(out, func(a, b planview.Version) int {
		av, aerr := policy.ParseVersion(a.Name)
		bv, berr := policy.ParseVersion(b.Name)
		switch {
		case aerr == nil && berr == nil && av.Compare(bv) != 0:
			return -av.Compare(bv)
		case (aerr == nil) != (berr == nil):
			if aerr == nil {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// components compares the component versions of two releases. Without the current release's
// metadata only the harvester version is known before.
func components(current string, cur *release.Release, target string, tgt *release.Release) []planview.Component {
	before := map[string]string{"harvester": current}
	if cur != nil {
		before = cur.Components()
	}
	after := map[string]string{"harvester": target}
	if tgt != nil {
		after = tgt.Components()
	}
	var names []string
	for k := range after {
		names = append(names, k)
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	// harvester first: it is the version the plan is about.
	if i := slices.Index(names, "harvester"); i > 0 {
		names = append([]string{"harvester"}, slices.Delete(names, i, i+1)...)
	}
	out := make([]planview.Component, 0, len(names))
	for _, n := range names {
		b, ok := before[n]
		if !ok || b == "" {
			b = "unknown"
		}
		t := after[n]
		if t == "" {
			t = "unknown"
		}
		out = append(out, planview.Component{Name: n, Current: b, Target: t, Changed: b != t})
	}
	return out
}

// images compares the image lists of the target ISO with the current one's (nil: unknown).
func images(target, current *isorelease.Contents) *planview.ImageReport {
	rep := &planview.ImageReport{Compared: current != nil}
	before := map[string]bool{}
	if current != nil {
		for _, ref := range current.Images() {
			before[ref] = true
		}
	}
	after := map[string]bool{}
	for _, a := range target.Archives {
		pa := planview.Archive{Group: a.Group, Archive: a.Name(), Images: len(a.Images), Size: a.Size}
		for _, ref := range a.Images {
			if current != nil && !before[ref] {
				pa.New++
			}
		}
		rep.Archives = append(rep.Archives, pa)
	}
	for _, ref := range target.Images() {
		after[ref] = true
		switch {
		case current == nil:
		case before[ref]:
			rep.Unchanged++
		default:
			rep.New = append(rep.New, ref)
		}
	}
	if current != nil {
		for _, ref := range current.Images() {
			if !after[ref] {
				rep.Removed = append(rep.Removed, ref)
			}
		}
	}
	return rep
}

// ErrNotAllowed is returned when the judgement refuses the upgrade (planview.Report.Allowed is
// false): `upgrade-repo plan` and `upgrade apply` exit 1 with it.
var ErrNotAllowed = errors.New("the upgrade is not allowed")

// PlanVerb is `upgrade-repo plan` once its flags are parsed: with a cluster (c) and no target
// (o.To), every Version of the cluster judged (Versions); else the judgement of o (Preview),
// written to w as output says (text or json). A refused upgrade returns ErrNotAllowed.
func PlanVerb(ctx context.Context, w io.Writer, c client.Reader, o PreviewOptions, output string, hc *http.Client) error {
	if c != nil && o.To == "" {
		vs, err := Versions(ctx, c, o, hc)
		switch {
		case err != nil:
			return err
		case output == "json":
			return planview.Encode(w, vs)
		}
		return planview.WriteVersions(w, vs)
	}
	rep, err := Preview(ctx, o, c, hc)
	if err != nil {
		return err
	}
	if output == "json" {
		if err := planview.Encode(w, rep); err != nil {
			return fmt.Errorf("write plan: %w", err)
		}
	} else if err := planview.WriteReport(w, rep); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	if !rep.Allowed {
		return ErrNotAllowed
	}
	return nil
}
