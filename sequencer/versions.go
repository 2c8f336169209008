package sequencer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
	"github.com/upgrade-repo/upgrade-repo/sequencer/repoclient"
)

// DefaultURLRecheck is how soon a Version whose URL did not answer is checked again.
const DefaultURLRecheck = time.Minute

// probeTimeout bounds one check of a Version's URL.
const probeTimeout = 30 * time.Second

// VersionReconciler checks each Version's ISO URL when the Version is created or its spec
// changes, before any plan needs it, and records the answer in the URLReachable condition and
// status.isoSize. A URL that did not answer is checked again every recheck interval; one that did
// is not checked again until the spec changes.
type VersionReconciler struct {
	c       client.Client
	log     *slog.Logger
	http    *http.Client
	now     func() time.Time
	recheck time.Duration
}

// NewVersionReconciler returns a VersionReconciler that writes through c and asks origins with
// hc (a client with a 30 s timeout when nil). now is the clock (time.Now when nil).
func NewVersionReconciler(c client.Client, log *slog.Logger, hc *http.Client, now func() time.Time) (*VersionReconciler, error) {
	if c == nil || log == nil {
		return nil, errors.New("new version reconciler: the client and the logger are required")
	}
	if hc == nil {
		hc = &http.Client{Timeout: probeTimeout}
	}
	if now == nil {
		now = time.Now
	}
	return &VersionReconciler{c: c, log: log, http: hc, now: now, recheck: DefaultURLRecheck}, nil
}

var _ reconcile.Reconciler = (*VersionReconciler)(nil)

// SetupWithManager registers the VersionReconciler with mgr: it sees a Version when it is
// created and when its spec changes, not when its status does.
func (r *VersionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("version").
		For(&v1beta1.Version{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up the version controller: %w", err)
	}
	return nil
}

// Reconcile checks one Version's URL unless this generation's check found it reachable.
func (r *VersionReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var v v1beta1.Version
	if err := r.c.Get(ctx, req.NamespacedName, &v); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if v.Status.ObservedGeneration == v.Generation && meta.IsStatusConditionTrue(v.Status.Conditions, v1beta1.VersionURLReachable) {
		return reconcile.Result{}, nil
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	probe, err := httprange.Probe(pctx, r.http, v.Spec.ISOURL)
	cancel()
	// A URL that does not answer is the Version's state, recorded below; not a failed reconcile.
	reachable := err == nil
	cond := metav1.Condition{Type: v1beta1.VersionURLReachable, ObservedGeneration: v.Generation,
		LastTransitionTime: metav1.NewTime(r.now().UTC().Truncate(time.Second))}
	switch {
	case err != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "Unreachable", err.Error()
		r.log.Warn("the ISO's URL does not answer", "version", v.Name, "url", redact.URL(v.Spec.ISOURL), "err", err)
	case probe.Ranges:
		cond.Status, cond.Reason = metav1.ConditionTrue, "RangesSupported"
		cond.Message = fmt.Sprintf("%d bytes; the origin serves ranges", probe.Size)
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, "RangesUnsupported"
		cond.Message = "the origin sends the whole file to a range request: nodes cannot share the download or resume it"
		if probe.Size > 0 {
			cond.Message = fmt.Sprintf("%d bytes; %s", probe.Size, cond.Message)
		}
	}
	meta.SetStatusCondition(&v.Status.Conditions, cond)
	v.Status.ObservedGeneration = v.Generation
	if reachable {
		v.Status.ISOSize = probe.Size
	}
	if uerr := r.c.Status().Update(ctx, &v); uerr != nil {
		if apierrors.IsConflict(uerr) {
			return reconcile.Result{Requeue: true}, nil
		}
		return reconcile.Result{}, fmt.Errorf("update status of version %s: %w", v.Name, uerr)
	}
	if !reachable {
		return reconcile.Result{RequeueAfter: r.recheck}, nil
	}
	return reconcile.Result{}, nil
}

// markVersion sets conds on Version name's status, and installedBy when not empty. A missing
// Version is no error: the plan keeps its snapshot.
func markVersion(ctx context.Context, c client.Client, name, installedBy string, conds ...metav1.Condition) error {
	var v v1beta1.Version
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &v); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("get version %s: %w", name, err)
	}
	changed := false
	for _, cond := range conds {
		cond.ObservedGeneration = v.Generation
		changed = meta.SetStatusCondition(&v.Status.Conditions, cond) || changed
	}
	if installedBy != "" && v.Status.InstalledBy != installedBy {
		v.Status.InstalledBy, changed = installedBy, true
	}
	if !changed {
		return nil
	}
	if err := c.Status().Update(ctx, &v); err != nil {
		return fmt.Errorf("update status of version %s: %w", name, err)
	}
	return nil
}

// recordDownloaded marks the plan's Version Downloaded and Verified: every node holds the ISO
// and verified it.
func (r *Reconciler) recordDownloaded(ctx context.Context, plan *v1beta1.UpgradePlan, nodes int) error {
	now := metav1.NewTime(r.now().UTC().Truncate(time.Second))
	msg := fmt.Sprintf("upgradeplan %s: on %d nodes", plan.Name, nodes)
	return markVersion(ctx, r.c, plan.Spec.Version, "",
		metav1.Condition{Type: v1beta1.VersionDownloaded, Status: metav1.ConditionTrue, Reason: "OnEveryNode", Message: msg, LastTransitionTime: now},
		metav1.Condition{Type: v1beta1.VersionVerified, Status: metav1.ConditionTrue, Reason: "ChecksumMatched", Message: msg + ", sha512 matched", LastTransitionTime: now})
}

// recordInstalledVersions marks the plan's Version Installed and every other Installed Version
// Superseded.
func (r *Reconciler) recordInstalledVersions(ctx context.Context, plan *v1beta1.UpgradePlan) error {
	now := metav1.NewTime(r.now().UTC().Truncate(time.Second))
	var list v1beta1.VersionList
	if err := r.c.List(ctx, &list); err != nil {
		return fmt.Errorf("list versions: %w", err)
	}
	for _, v := range list.Items {
		if v.Name == plan.Spec.Version || !meta.IsStatusConditionTrue(v.Status.Conditions, v1beta1.VersionInstalled) {
			continue
		}
		if err := markVersion(ctx, r.c, v.Name, "", metav1.Condition{Type: v1beta1.VersionInstalled, Status: metav1.ConditionFalse,
			Reason: "Superseded", Message: "upgradeplan " + plan.Name + " installed " + plan.Spec.Version, LastTransitionTime: now}); err != nil {
			return err
		}
	}
	return markVersion(ctx, r.c, plan.Spec.Version, plan.Name, metav1.Condition{Type: v1beta1.VersionInstalled, Status: metav1.ConditionTrue,
		Reason: "PlanSucceeded", Message: "installed by upgradeplan " + plan.Name, LastTransitionTime: now})
}

// recordImages reads the release's images through the repo and records them on the plan's
// Version, for the agents' registries, with what the verified ISO's archives say they are (read
// by the agent that answers, for the Version's ISO) once an agent has read them. It never holds
// the plan up: a repo that does not list the images is logged and leaves the Version as it was
// (each node still serves what it preloaded), and digests no agent has read yet are recorded at
// a later call. A missing Version is no error: the plan keeps its snapshot.
func (r *Reconciler) recordImages(ctx context.Context, plan *v1beta1.UpgradePlan) error {
	refs, err := repoclient.FetchImages(ctx, r.http, r.repoURL)
	if err != nil {
		r.log.Warn("the release's images are not recorded on its Version", "plan", plan.Name, "version", plan.Spec.Version, "err", err)
		return nil
	}
	var v v1beta1.Version
	if err := r.c.Get(ctx, client.ObjectKey{Name: plan.Spec.Version}, &v); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("get version %s: %w", plan.Spec.Version, err)
	}
	digests := v.Status.ImageDigests
	if sum, err := checksum.Parse(v.Spec.ISOChecksum); err == nil {
		if got, err := repoclient.FetchImageDigests(ctx, r.http, r.repoURL, sum.Hex()); err != nil {
			r.log.Info("the release's image digests are not read yet", "plan", plan.Name, "version", v.Name, "err", err)
		} else {
			digests = digests[:0:0]
			for _, d := range got {
				if _, ok := slices.BinarySearch(refs, d.Ref); ok {
					digests = append(digests, v1beta1.ImageDigest{Ref: d.Ref, Config: d.Config, Manifest: d.Manifest})
				}
			}
		}
	}
	if slices.Equal(v.Status.Images, refs) && slices.Equal(v.Status.ImageDigests, digests) {
		return nil
	}
	v.Status.Images, v.Status.ImageDigests = refs, digests
	if err := r.c.Status().Update(ctx, &v); err != nil {
		return fmt.Errorf("update status of version %s: %w", v.Name, err)
	}
	return nil
}
