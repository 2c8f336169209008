package sequencer_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/release"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// mirrorPod is a kubeadm static pod's mirror pod, named <component>-<node> in kube-system, Ready,
// without the tier label (the name alone makes it a control-plane pod).
func mirrorPod(component, node, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: component + "-" + node,
			Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: component, Image: image}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// TestReconcileVerifiesTheRelease runs a kubeadm release whose node steps upgrade each node's
// kubelet and control plane, but one API server keeps its old image: the plan stops at
// NodeUpgraded, Degraded VersionMismatch naming it, and goes on to Succeeded once it runs the
// release's image.
func TestReconcileVerifiesTheRelease(t *testing.T) {
	t.Parallel()
	const before, target, etcdBefore, etcd = "v1.33.5", "v1.34.1", "3.5.21-0", "3.6.4-0"
	var pods []client.Object
	for _, n := range []string{"cp-1", "cp-2"} {
		for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			pods = append(pods, mirrorPod(c, n, "registry.k8s.io/"+c+":"+before))
		}
		pods = append(pods, mirrorPod("etcd", n, "registry.k8s.io/etcd:"+etcdBefore))
	}
	k := newCluster(t, newPlan("up", nil), pods...)
	rel := release.Release{Harvester: "v1.6.0", Kubernetes: target, Extra: map[string]any{"etcd": etcd}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(rel) }))
	t.Cleanup(srv.Close)
	k.repoURL = srv.URL
	ctx := t.Context()
	setKubelet := func(node, v string) {
		var n corev1.Node
		require.NoError(t, k.c.Get(ctx, client.ObjectKey{Name: node}, &n))
		n.Status.NodeInfo.KubeletVersion = v
		require.NoError(t, k.c.Status().Update(ctx, &n))
	}
	setImage := func(component, node, image string) {
		var p corev1.Pod
		require.NoError(t, k.c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: component + "-" + node}, &p))
		p.Spec.Containers[0].Image = image
		require.NoError(t, k.c.Update(ctx, &p))
	}
	for _, n := range []string{"cp-1", "cp-2", "w-1", "w-2", "w-3"} {
		setKubelet(n, before)
	}
	// step plays the node steps: a node whose Job exists runs the release, but for cp-2's API
	// server.
	step := func(*v1beta1.UpgradePlan) {
		var jobs batchv1.JobList
		require.NoError(t, k.c.List(ctx, &jobs, client.InNamespace(testNS), client.MatchingLabels{sequencer.LabelComponent: "node"}))
		for _, j := range jobs.Items {
			n := j.Labels[sequencer.LabelNode]
			setKubelet(n, target)
			if n == "cp-1" || n == "cp-2" {
				for _, c := range []string{"kube-controller-manager", "kube-scheduler"} {
					setImage(c, n, "registry.k8s.io/"+c+":"+target)
				}
				setImage("etcd", n, "registry.k8s.io/etcd:"+etcd)
				if n == "cp-1" {
					setImage("kube-apiserver", n, "registry.k8s.io/kube-apiserver:"+target)
				}
			}
		}
	}
	p := k.run("up", 300, "", 2, 2, step)
	require.Equal(t, v1beta1.PhaseNodeUpgraded, p.Status.Phase, "conditions: %+v", p.Status.Conditions)
	c := meta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionDegraded)
	require.Equal(t, metav1.ConditionTrue, c.Status)
	require.Equal(t, "VersionMismatch", c.Reason)
	require.Equal(t, "node cp-2: kube-apiserver runs registry.k8s.io/kube-apiserver:v1.33.5, want tag v1.34.1", c.Message)
	for n, s := range p.Status.NodeUpgradeStatuses {
		require.Equal(t, [3]string{before, target, target}, [3]string{s.KubeletVersionBefore, s.KubeletVersion, s.TargetKubeletVersion}, n)
	}

	setImage("kube-apiserver", "cp-2", "registry.k8s.io/kube-apiserver:"+target)
	p = k.run("up", 20, "", 2, 2, step)
	require.Equal(t, v1beta1.PhaseSucceeded, p.Status.Phase, "conditions: %+v", p.Status.Conditions)
}

// TestReconcileGateWaitsForAControlPlanePod: a control-plane pod of an upgraded node that turns
// not Ready while another node rejoins holds the next node, and the plan says which.
func TestReconcileGateWaitsForAControlPlanePod(t *testing.T) {
	t.Parallel()
	etcd := mirrorPod("etcd", "cp-1", "registry.k8s.io/etcd:3.6.4-0")
	k := newCluster(t, newPlan("up", nil), etcd)
	ctx := t.Context()
	p := k.run("up", 300, "", 2, 2, func(p *v1beta1.UpgradePlan) {
		// While cp-2's step runs: one reconcile may take cp-2 from its Job's end through its
		// rejoin to the next node's start.
		if s := p.Status.NodeUpgradeStatuses["cp-2"]; s.Times == nil || s.Times.JobCreated == nil || s.State == v1beta1.NodeUpgraded {
			return
		}
		var pod corev1.Pod
		require.NoError(t, k.c.Get(ctx, client.ObjectKeyFromObject(etcd), &pod))
		pod.Status.Conditions[0].Status = corev1.ConditionFalse
		require.NoError(t, k.c.Status().Update(ctx, &pod))
	})
	require.Equal(t, v1beta1.PhaseNodeUpgrading, p.Status.Phase)
	require.Equal(t, v1beta1.NodeUpgraded, p.Status.NodeUpgradeStatuses["cp-2"].State)
	s := p.Status.NodeUpgradeStatuses["w-1"]
	require.Equal(t, v1beta1.NodeUpgradePending, s.State)
	require.Equal(t, "WaitingForCluster", s.Reason)
	c := meta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionProgressing)
	require.Equal(t, "WaitingForCluster", c.Reason)
	require.Equal(t, "node w-1 waits for control-plane pods kube-system/etcd-cp-1 of node cp-1 to be Ready", c.Message)

	// Ready again, the workers go on.
	var pod corev1.Pod
	require.NoError(t, k.c.Get(ctx, client.ObjectKeyFromObject(etcd), &pod))
	pod.Status.Conditions[0].Status = corev1.ConditionTrue
	require.NoError(t, k.c.Status().Update(ctx, &pod))
	p = k.run("up", 100, "", 2, 2, nil)
	require.Equal(t, v1beta1.PhaseSucceeded, p.Status.Phase, "conditions: %+v", p.Status.Conditions)
}
