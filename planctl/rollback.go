package planctl

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// Soaking returns the Succeeded plan whose soak keeps a previous release now, the newest when
// there are several; ErrState when none does.
func Soaking(ctx context.Context, c client.Reader) (*v1beta1.UpgradePlan, error) {
	var plans v1beta1.UpgradePlanList
	if err := c.List(ctx, &plans); err != nil {
		return nil, fmt.Errorf("list upgrade plans: %w", err)
	}
	var out *v1beta1.UpgradePlan
	for i := range plans.Items {
		p := &plans.Items[i]
		if p.Status.Phase == v1beta1.PhaseSucceeded && sequencer.SoakOn(p) && (out == nil || out.CreationTimestamp.Before(&p.CreationTimestamp)) {
			out = p
		}
	}
	if out == nil {
		return nil, fmt.Errorf("%w: no Succeeded upgradeplan keeps a previous release for a rollback", ErrState)
	}
	return out, nil
}

// Finalize ends the soak of plan name (FinalizeAnnotation): the sequencer ends it and the
// agents clean the previous release up. A plan whose soak has ended or that has none is refused
// (ErrState).
func Finalize(ctx context.Context, c client.Client, name string, now time.Time) error {
	return update(ctx, c, name, func(p *v1beta1.UpgradePlan) error {
		if p.Status.Phase != v1beta1.PhaseSucceeded || p.Status.Soak == nil || p.Status.Soak.Ended != nil {
			return fmt.Errorf("%w: upgradeplan %s has no soak to end", ErrState, name)
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[v1beta1.FinalizeAnnotation] = now.UTC().Format(time.RFC3339)
		return nil
	})
}

// RollbackPlan is the plan that rolls of back to the release its soak keeps, named name.
func RollbackPlan(of *v1beta1.UpgradePlan, name string) *v1beta1.UpgradePlan {
	prev := ""
	if of.Status.Soak != nil {
		prev = of.Status.Soak.PreviousVersion
	}
	p := &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1beta1.UpgradePlanSpec{Version: prev, Upgrade: of.Spec.Upgrade, Mode: v1beta1.ModeAutomatic,
			Rollback: &v1beta1.RollbackSpec{Plan: of.Name}, Soak: &metav1.Duration{}},
	}
	if o := of.Spec.NodeUpgradeOption; o != nil {
		p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{Concurrency: o.Concurrency, Executor: o.Executor}
	}
	return p
}

// Rollback creates the plan that rolls plan of back, once sequencer.JudgeRollback allows it
// against the cluster as it is (the installed version, the Version of the kept release); a
// refusal is returned before anything is created, wrapping ErrState.
func Rollback(ctx context.Context, c client.Client, of *v1beta1.UpgradePlan, now time.Time) (*v1beta1.UpgradePlan, error) {
	p := RollbackPlan(of, fmt.Sprintf("%s-rollback-%d", of.Name, now.Unix()))
	var target *v1beta1.Version
	var v v1beta1.Version
	switch err := c.Get(ctx, client.ObjectKey{Name: p.Spec.Version}, &v); {
	case p.Spec.Version == "" || apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("get version %s: %w", p.Spec.Version, err)
	default:
		target = &v
	}
	installed, err := sequencer.ReadInstalled(ctx, c, "")
	if err != nil {
		installed = sequencer.Installed{}
	}
	if why := sequencer.JudgeRollback(p, of, target, installed.Version, now); why != "" {
		return nil, fmt.Errorf("%w: rollback refused: %s", ErrState, why)
	}
	if err := c.Create(ctx, p); err != nil {
		return nil, fmt.Errorf("create upgradeplan %s: %w", p.Name, err)
	}
	return p, nil
}
