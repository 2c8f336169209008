package sequencer

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer/suc"
)

func (r *Reconciler) cleanUp(ctx context.Context, plan *v1beta1.UpgradePlan) error {
	bg := client.PropagationPolicy(metav1.DeletePropagationBackground)
	if err := r.c.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(r.namespace), client.MatchingLabels{LabelPlan: plan.Name}, bg); err != nil {
		return fmt.Errorf("delete jobs: %w", err)
	}
	if plan.NodeExecutor() == v1beta1.ExecutorSystemUpgradeController {
		for _, name := range []string{suc.ServerPlanName(plan.Name), suc.AgentPlanName(plan.Name)} {
			var p unstructured.Unstructured
			p.SetGroupVersionKind(suc.PlanGVK)
			p.SetNamespace(r.sucNamespace)
			p.SetName(name)
			if err := r.c.Delete(ctx, &p); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete plan %s/%s: %w", r.sucNamespace, name, err)
			}
		}
	}
	return r.removeCompat(ctx, plan)
}

// deleteNodeJob deletes the plan's Job of node and, in the background, its pods.
func (r *Reconciler) deleteNodeJob(ctx context.Context, plan *v1beta1.UpgradePlan, node string) error {
	bg := client.PropagationPolicy(metav1.DeletePropagationBackground)
	if err := r.c.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(r.namespace), client.MatchingLabels{LabelPlan: plan.Name, LabelNode: node}, bg); err != nil {
		return fmt.Errorf("delete the job of node %s: %w", node, err)
	}
	return nil
}

func (r *Reconciler) recordInstalled(ctx context.Context, plan *v1beta1.UpgradePlan, o Observation) error {
	rel := o.Release
	if rel == nil {
		if m := plan.Status.ReleaseMetadata; m != nil {
			rel = releaseFromMetadata(m)
		}
	}
	want, err := installedConfigMap(r.namespace, plan.Name, plan.Spec.Version, rel)
	if err != nil {
		return err
	}
	var cur corev1.ConfigMap
	err = r.c.Get(ctx, client.ObjectKeyFromObject(want), &cur)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.c.Create(ctx, want); err != nil {
			return fmt.Errorf("create configmap %s/%s: %w", want.Namespace, want.Name, err)
		}
	case err != nil:
		return fmt.Errorf("get configmap %s/%s: %w", want.Namespace, want.Name, err)
	default:
		cur.Data = want.Data
		if err := r.c.Update(ctx, &cur); err != nil {
			return fmt.Errorf("update configmap %s/%s: %w", want.Namespace, want.Name, err)
		}
	}
	return r.recordInstalledVersions(ctx, plan)
}
