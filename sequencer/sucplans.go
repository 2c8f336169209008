package sequencer

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer/suc"
)

func (r *Reconciler) applySUCPlans(ctx context.Context, plan *v1beta1.UpgradePlan) error {
	conc := 0
	if o := plan.Spec.NodeUpgradeOption; o != nil {
		conc = o.Concurrency
	}
	plans, err := suc.Plans(suc.Options{
		UpgradePlan: plan.Name, Namespace: r.sucNamespace, Image: r.upgradeImage(plan),
		Version: plan.Spec.Version, RepoURL: r.repoURL, Concurrency: conc,
	})
	if err != nil {
		return err
	}
	for _, p := range plans {
		var cur unstructured.Unstructured
		cur.SetGroupVersionKind(suc.PlanGVK)
		err := r.c.Get(ctx, client.ObjectKeyFromObject(p), &cur)
		switch {
		case apierrors.IsNotFound(err):
			if err := r.c.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create plan %s/%s: %w", p.GetNamespace(), p.GetName(), err)
			}
		case err != nil:
			return fmt.Errorf("get plan %s/%s: %w", p.GetNamespace(), p.GetName(), err)
		case !equality.Semantic.DeepEqual(cur.Object["spec"], p.Object["spec"]):
			cur.Object["spec"] = p.Object["spec"]
			if err := r.c.Update(ctx, &cur); err != nil {
				return fmt.Errorf("update plan %s/%s: %w", p.GetNamespace(), p.GetName(), err)
			}
		}
	}
	return nil
}
