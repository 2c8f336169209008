package sequencer

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// The soak: once a plan has Succeeded, the release it upgraded from stays ready for a rollback
// for spec.soak (v1beta1.DefaultSoak when unset). The record lives in status.soak, set at
// CleaningUp (startSoak) and ended in Succeeded (soaking): a restarted sequencer finds it there.
// While it lasts, the agents keep that release's ISO in their caches and its images pinned
// (report.Decide reads status.soak), and the installed Version says until when a rollback may
// start (status.rollback). When it ends (expired, or the operator set
// v1beta1.FinalizeAnnotation), the agents clean the previous release up as they did at once
// before soaks; a soak ended by the rollback itself cleans nothing of the release rolled back to.

// ActionRecordRollbackWindow sets, on the plan's Version, the rollback its soak allows
// (status.rollback), or clears it once the soak ended.
const ActionRecordRollbackWindow ActionKind = "RecordRollbackWindow"

// maxSoakPoll is how long a soaking plan waits before it looks again for a rollback that
// Succeeded (its own changes, the finalize annotation among them, wake it at once).
const maxSoakPoll = time.Minute

// SoakOf returns how long plan p soaks once it Succeeded: spec.soak, DefaultSoak when unset,
// 0 when negative.
func SoakOf(p *v1beta1.UpgradePlan) time.Duration {
	if p.Spec.Soak == nil {
		return v1beta1.DefaultSoak
	}
	return max(p.Spec.Soak.Duration, 0)
}

// SoakOn reports whether plan p's soak keeps the previous release now: recorded, with an ISO
// kept, and not ended. Past status.soak.until it is still on until the sequencer ends it, which
// it does at once unless a rollback from it is in flight.
func SoakOn(p *v1beta1.UpgradePlan) bool {
	s := p.Status.Soak
	return s != nil && s.Ended == nil && s.ISOChecksum != ""
}

// RollbackUntil returns the last moment a rollback of plan p may start, and false when none
// may: the soak kept nothing, ended, or passed its end at now.
func RollbackUntil(p *v1beta1.UpgradePlan, now time.Time) (time.Time, bool) {
	if p.Status.Phase != v1beta1.PhaseSucceeded || !SoakOn(p) || now.After(p.Status.Soak.Until.Time) {
		return time.Time{}, false
	}
	return p.Status.Soak.Until.Time, true
}

// startSoak records the plan's soak as it installs its release (CleaningUp): the previous
// release and its ISO, kept until now plus the soak. A plan with no soak records nothing (the
// previous release is cleaned up at once, as always); one whose previous release cannot be kept
// records why, ended. Idempotent: a recorded soak is left as it is.
func (d *decider) startSoak() {
	soak := SoakOf(d.o.Plan)
	if d.st.Soak != nil || soak <= 0 {
		return
	}
	now := d.now
	s := &v1beta1.SoakStatus{PreviousVersion: d.st.PreviousVersion, Started: now, Until: metav1.NewTime(now.Add(soak))}
	prev := d.o.PreviousVersion
	nothing := ""
	switch {
	case d.o.Plan.Spec.Rollback != nil:
		nothing = "a rollback is not rolled back: upgrade again to go forward"
	case s.PreviousVersion == "":
		nothing = "the version the plan upgraded from is not known"
	case s.PreviousVersion == d.o.Plan.Spec.Version:
		nothing = "the plan re-applied the installed version"
	case prev == nil || prev.Name != s.PreviousVersion:
		nothing = fmt.Sprintf("no Version named %s: its ISO is not known", s.PreviousVersion)
	case prev.Spec.ISOChecksum == "" || prev.Spec.ISOURL == "":
		nothing = fmt.Sprintf("Version %s names no ISO with a checksum", s.PreviousVersion)
	}
	if nothing != "" {
		s.Ended, s.EndReason, s.Message = &now, v1beta1.SoakNothingKept, "nothing kept for a rollback: "+nothing
		d.st.Soak = s
		d.event("SoakNothingKept", "%s", s.Message)
		return
	}
	s.ISOURL, s.ISOChecksum = prev.Spec.ISOURL, prev.Spec.ISOChecksum
	s.Message = fmt.Sprintf("release %s kept for a rollback until %s: its ISO in the nodes' caches, its images pinned; "+
		"its cleanup runs then, or at upgrade finalize", s.PreviousVersion, s.Until.UTC().Format(time.RFC3339))
	d.st.Soak = s
	d.out.Actions = append(d.out.Actions, d.rollbackWindow())
	d.event("SoakStarted", "%s", s.Message)
}

// soaking follows the soak of a Succeeded plan: it ends when a rollback from it Succeeded
// (RolledBack), when the operator finalizes the plan (Finalized), or at its end (Expired); never
// while a rollback from it is in flight, which needs the release it keeps.
func (d *decider) soaking() {
	s := d.st.Soak
	if s == nil || s.Ended != nil {
		return
	}
	end := func(reason, msg string) {
		now := d.now
		s.Ended, s.EndReason, s.Message = &now, reason, msg
		d.out.Actions = append(d.out.Actions, Action{Kind: ActionRecordRollbackWindow})
		d.event("Soak"+reason, "%s", msg)
	}
	var inFlight string
	for _, r := range d.o.Rollbacks {
		switch {
		case r.Phase == v1beta1.PhaseSucceeded:
			end(v1beta1.SoakRolledBack, fmt.Sprintf("upgradeplan %s rolled the cluster back to %s: the soak ended", r.Name, s.PreviousVersion))
			return
		case r.Phase != v1beta1.PhaseFailed:
			inFlight = r.Name
		}
	}
	finalize := d.o.Plan.Annotations[v1beta1.FinalizeAnnotation] != ""
	switch {
	case inFlight != "":
		d.out.RequeueAfter = d.cfg.Poll
		if finalize || !d.now.Time.Before(s.Until.Time) {
			d.event("SoakHeld", "the soak ends once rollback %s is over: it runs from the release the soak keeps", inFlight)
		}
	case finalize:
		end(v1beta1.SoakFinalized, fmt.Sprintf("finalized by the operator (%s): release %s can no longer be rolled back to and is cleaned up", v1beta1.FinalizeAnnotation, s.PreviousVersion))
	case !d.now.Time.Before(s.Until.Time):
		end(v1beta1.SoakExpired, fmt.Sprintf("the soak ended at %s: release %s can no longer be rolled back to and is cleaned up", s.Until.UTC().Format(time.RFC3339), s.PreviousVersion))
	default:
		d.out.Actions = append(d.out.Actions, d.rollbackWindow())
		d.out.RequeueAfter = min(s.Until.Sub(d.now.Time), maxSoakPoll)
	}
}

// rollbackWindow is the action that records on the plan's Version the rollback its soak allows.
func (d *decider) rollbackWindow() Action {
	s := d.st.Soak
	return Action{Kind: ActionRecordRollbackWindow, Window: &v1beta1.VersionRollback{To: s.PreviousVersion, Until: s.Until, Plan: d.o.Plan.Name}}
}

// recordRollbackWindow sets window, until when a rollback is possible and to what, on the plan's
// Version; nil clears what this plan set there. A missing Version is no error.
func (r *Reconciler) recordRollbackWindow(ctx context.Context, plan *v1beta1.UpgradePlan, window *v1beta1.VersionRollback) error {
	var v v1beta1.Version
	if err := r.c.Get(ctx, client.ObjectKey{Name: plan.Spec.Version}, &v); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("get version %s: %w", plan.Spec.Version, err)
	}
	want := v.Status.Rollback
	switch {
	case window != nil:
		want = window
	case want != nil && want.Plan == plan.Name:
		want = nil
	}
	if equality.Semantic.DeepEqual(want, v.Status.Rollback) {
		return nil
	}
	v.Status.Rollback = want
	if err := r.c.Status().Update(ctx, &v); err != nil {
		return fmt.Errorf("update status of version %s: %w", v.Name, err)
	}
	return nil
}

// soakWatched reports whether a finished plan is still reconciled: a Succeeded plan whose soak
// has not ended.
func soakWatched(p *v1beta1.UpgradePlan) bool {
	return p.Status.Phase == v1beta1.PhaseSucceeded && p.Status.Soak != nil && p.Status.Soak.Ended == nil
}

// observeSoak adds to o what the soak and a rollback need: the Version the plan upgraded from
// (CleaningUp), the rollbacks of the plan (Succeeded), and for a rollback in Initializing the
// plan it rolls back.
func (r *Reconciler) observeSoak(ctx context.Context, plan *v1beta1.UpgradePlan, o *Observation) error {
	switch plan.Status.Phase {
	case v1beta1.PhaseCleaningUp:
		if prev := plan.Status.PreviousVersion; prev != "" {
			var v v1beta1.Version
			switch err := r.c.Get(ctx, client.ObjectKey{Name: prev}, &v); {
			case apierrors.IsNotFound(err):
			case err != nil:
				return fmt.Errorf("get version %s: %w", prev, err)
			default:
				o.PreviousVersion = &v
			}
		}
	case v1beta1.PhaseSucceeded:
		if !soakWatched(plan) {
			return nil
		}
		var plans v1beta1.UpgradePlanList
		if err := r.c.List(ctx, &plans); err != nil {
			return fmt.Errorf("list upgrade plans: %w", err)
		}
		for _, p := range plans.Items {
			if p.Spec.Rollback != nil && p.Spec.Rollback.Plan == plan.Name {
				o.Rollbacks = append(o.Rollbacks, RollbackState{Name: p.Name, Phase: p.Status.Phase})
			}
		}
	case "", v1beta1.PhaseInitializing:
		if plan.Spec.Rollback == nil {
			return nil
		}
		var of v1beta1.UpgradePlan
		switch err := r.c.Get(ctx, client.ObjectKey{Name: plan.Spec.Rollback.Plan}, &of); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("get upgradeplan %s: %w", plan.Spec.Rollback.Plan, err)
		default:
			o.RollbackOf = &of
		}
	}
	return nil
}
