package sequencer_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

const productNS = "harvester-system"

// compatState reads the plan's compatibility objects; nil when absent.
func (k *cluster) compatState(plan string) (*corev1.Service, *appsv1.Deployment) {
	k.t.Helper()
	key := client.ObjectKey{Namespace: productNS, Name: sequencer.CompatName(plan)}
	var svc corev1.Service
	var dep appsv1.Deployment
	sp, dp := &svc, &dep
	if err := k.c.Get(k.t.Context(), key, &svc); err != nil {
		require.True(k.t, apierrors.IsNotFound(err), err)
		sp = nil
	}
	if err := k.c.Get(k.t.Context(), key, &dep); err != nil {
		require.True(k.t, apierrors.IsNotFound(err), err)
		dp = nil
	}
	return sp, dp
}

// TestCompatPublishesTheRepoWhileInUse runs a whole plan in compatibility mode: the Service and
// the Deployment the product's scripts look for exist from RepoCreated until CleaningUp, point
// at the agents' Service, never run a pod, and go away with the plan's other objects.
func TestCompatPublishesTheRepoWhileInUse(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("to-v1-6-0", nil))
	k.opts = []sequencer.Option{sequencer.WithCompat(productNS), sequencer.WithClusterDomain("cluster.test")}
	present := map[v1beta1.Phase]bool{}
	absent := map[v1beta1.Phase]bool{}
	scaled := false
	p := k.run("to-v1-6-0", 300, "", 2, 2, func(p *v1beta1.UpgradePlan) {
		svc, dep := k.compatState(p.Name)
		require.Equal(t, svc == nil, dep == nil, "phase %s: the Service and the Deployment come and go together", p.Status.Phase)
		if svc == nil {
			absent[p.Status.Phase] = true
			return
		}
		present[p.Status.Phase] = true
		require.Equal(t, corev1.ServiceTypeExternalName, svc.Spec.Type)
		require.Equal(t, "upgrade-repo.upgrade-repo.svc.cluster.test", svc.Spec.ExternalName)
		require.Equal(t, int32(80), svc.Spec.Ports[0].Port)
		require.Empty(t, svc.Spec.Selector)
		require.Equal(t, "to-v1-6-0", metav1.GetControllerOf(svc).Name)
		require.Equal(t, "to-v1-6-0", svc.Labels[sequencer.LabelPlan])
		require.Equal(t, "to-v1-6-0", metav1.GetControllerOf(dep).Name)
		require.Equal(t, sequencer.CompatImage, dep.Spec.Template.Spec.Containers[0].Image)
		if p.Status.Phase == v1beta1.PhaseImagePreloading && !scaled {
			// Someone scales it up: the sequencer sets it back to zero, no second server.
			require.Zero(t, *dep.Spec.Replicas)
			three := int32(3)
			dep.Spec.Replicas = &three
			require.NoError(t, k.c.Update(t.Context(), dep))
			scaled = true
			return
		}
		require.Zero(t, *dep.Spec.Replicas, "phase %s", p.Status.Phase)
	})
	require.Equal(t, v1beta1.PhaseSucceeded, p.Status.Phase, "conditions: %+v", p.Status.Conditions)
	require.True(t, scaled)
	for _, ph := range []v1beta1.Phase{v1beta1.PhaseInitializing, v1beta1.PhaseISODownloading, v1beta1.PhaseRepoCreating} {
		require.False(t, present[ph], "published in %s, before the repo is ready", ph)
	}
	for _, ph := range []v1beta1.Phase{v1beta1.PhaseRepoCreated, v1beta1.PhaseImagePreloading, v1beta1.PhaseClusterUpgrading, v1beta1.PhaseNodeUpgrading} {
		require.True(t, present[ph], "not published in %s", ph)
		require.False(t, absent[ph], "missing in %s", ph)
	}
	svc, dep := k.compatState("to-v1-6-0")
	require.Nil(t, svc, "the Service is removed in CleaningUp")
	require.Nil(t, dep, "the Deployment is removed in CleaningUp")
}

func TestCompatOffCreatesNothing(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("up", nil))
	p := k.run("up", 300, "", 2, 2, func(p *v1beta1.UpgradePlan) {
		svc, dep := k.compatState(p.Name)
		require.Nil(t, svc)
		require.Nil(t, dep)
	})
	require.Equal(t, v1beta1.PhaseSucceeded, p.Status.Phase)
}

// TestCompatLeavesForeignObjects: a Service of the same name that the plan did not create (the
// product's own repo, say) is never changed or deleted; the plan waits Degraded and says why.
func TestCompatLeavesForeignObjects(t *testing.T) {
	t.Parallel()
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: productNS, Name: "upgrade-repo-up"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "nginx"}, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	k := newCluster(t, newPlan("up", nil), foreign)
	k.opts = []sequencer.Option{sequencer.WithCompat(productNS)}
	p := k.run("up", 100, "", 2, 2, nil)
	require.Equal(t, v1beta1.PhaseRepoCreating, p.Status.Phase, "the plan does not move on")
	c := meta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionDegraded)
	require.NotNil(t, c)
	require.Equal(t, "CompatibilityFailed", c.Reason)
	require.Contains(t, c.Message, "service harvester-system/upgrade-repo-up")
	require.Contains(t, c.Message, "does not belong to the plan")

	var got corev1.Service
	require.NoError(t, k.c.Get(t.Context(), client.ObjectKeyFromObject(foreign), &got))
	require.Equal(t, map[string]string{"app": "nginx"}, got.Spec.Selector)
	require.Empty(t, got.Spec.ExternalName)
}

func TestCompatRefusesANameDNSCannotCarry(t *testing.T) {
	t.Parallel()
	name := "v1.6.0-" + strings.Repeat("x", 50) // a dot, and longer than a DNS label with the prefix
	k := newCluster(t, newPlan(name, nil))
	k.opts = []sequencer.Option{sequencer.WithCompat(productNS)}
	p := k.run(name, 100, "", 2, 2, nil)
	require.Empty(t, p.Status.Phase, "refused before Initializing: nothing is downloaded")
	c := meta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionDegraded)
	require.NotNil(t, c)
	require.Equal(t, "CompatibilityFailed", c.Reason)
	require.Contains(t, c.Message, "cannot name a Service upgrade-repo-v1.6.0-")
}
