package sequencer_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

func TestNodeChanged(t *testing.T) {
	t.Parallel()
	now := metav1.Now()
	tests := []struct {
		name string
		mut  func(*corev1.Node)
		want bool
	}{
		{name: "a heartbeat", mut: func(n *corev1.Node) { n.Status.Conditions[0].LastHeartbeatTime = now }},
		{name: "an annotation", mut: func(n *corev1.Node) { n.Annotations = map[string]string{"a": "b"} }},
		{name: "cordoned", mut: func(n *corev1.Node) { n.Spec.Unschedulable = true }, want: true},
		{name: "not Ready", mut: func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }, want: true},
		{name: "a new kubelet", mut: func(n *corev1.Node) { n.Status.NodeInfo.KubeletVersion = "v1.34.0" }, want: true},
		{name: "rebooted", mut: func(n *corev1.Node) { n.Status.NodeInfo.BootID = "b2" }, want: true},
		{name: "a zone label", mut: func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = "z1" }, want: true},
		{name: "deleted", mut: func(n *corev1.Node) { n.DeletionTimestamp = &now }, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := testNode("w-1", false)
			a.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: "v1.33.3", BootID: "b1"}
			b := a.DeepCopy()
			tt.mut(b)
			require.Equal(t, tt.want, sequencer.NodeChanged(a, b))
		})
	}
}

func TestHeartbeatOnly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mut  func(*v1beta1.RepoNodeStatus)
		want bool
	}{
		{name: "a heartbeat", mut: func(s *v1beta1.RepoNodeStatus) { s.HeartbeatTime = metav1.Now() }, want: true},
		{name: "the cache's free space", mut: func(s *v1beta1.RepoNodeStatus) { s.Cache.FreeBytes = 7 }, want: true},
		{name: "the step's report", mut: func(s *v1beta1.RepoNodeStatus) {
			s.Step = &v1beta1.RepoNodeStep{Plan: "up", Stage: v1beta1.StageKubernetesUpgraded}
		}},
		{name: "the repo stops serving", mut: func(s *v1beta1.RepoNodeStatus) { s.Repo.Ready = false }},
		{name: "download progress", mut: func(s *v1beta1.RepoNodeStatus) { s.ISO.BytesDone = 10 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := &v1beta1.RepoNodeStatus{ISO: v1beta1.RepoNodeISO{Checksum: testChecksum, State: v1beta1.ISOReady}, Repo: v1beta1.RepoNodeRepo{Ready: true}}
			b := a.DeepCopy()
			tt.mut(b)
			require.Equal(t, tt.want, sequencer.HeartbeatOnly(a, b))
		})
	}
}

func TestPodChanged(t *testing.T) {
	t.Parallel()
	now := metav1.Now()
	tests := []struct {
		name string
		mut  func(*corev1.Pod)
		want bool
	}{
		{name: "a label", mut: func(p *corev1.Pod) { p.Labels = map[string]string{"a": "b"} }},
		{name: "being deleted", mut: func(p *corev1.Pod) { p.DeletionTimestamp = &now }, want: true},
		{name: "succeeded", mut: func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, want: true},
		{name: "Ready", mut: func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := testPod("p", "w-1", "ReplicaSet", nil)
			b := a.DeepCopy()
			tt.mut(b)
			require.Equal(t, tt.want, sequencer.PodChanged(a, b))
		})
	}
}
