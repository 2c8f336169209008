package sequencer_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

func TestUndrainableBudgets(t *testing.T) {
	t.Parallel()
	budget := func(expected, desired int32) policyv1.PodDisruptionBudget {
		return policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "pg"},
			Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pg"}}},
			Status: policyv1.PodDisruptionBudgetStatus{ExpectedPods: expected, DesiredHealthy: desired}}
	}
	pod := func(name, node string, mut ...func(*corev1.Pod)) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: name, Labels: map[string]string{"app": "pg"}}, Spec: corev1.PodSpec{NodeName: node}}
		for _, m := range mut {
			m(&p)
		}
		return p
	}
	daemon := func(p *corev1.Pod) {
		controller := true
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "pg", Controller: &controller}}
	}
	tests := []struct {
		name    string
		budget  policyv1.PodDisruptionBudget
		pods    []corev1.Pod
		flagged bool
	}{
		{name: "maxUnavailable 0", budget: budget(2, 2), pods: []corev1.Pod{pod("pg-0", "w-1"), pod("pg-1", "w-2")}, flagged: true},
		{name: "one disruption allowed once healthy", budget: budget(2, 1), pods: []corev1.Pod{pod("pg-0", "w-1"), pod("pg-1", "w-2")}},
		{name: "not computed yet", budget: budget(0, 0), pods: []corev1.Pod{pod("pg-0", "w-1")}},
		{name: "only DaemonSet pods, which a drain leaves", budget: budget(1, 1), pods: []corev1.Pod{pod("pg-0", "w-1", daemon)}},
		{name: "pods in another namespace", budget: budget(1, 1), pods: []corev1.Pod{pod("pg-0", "w-1", func(p *corev1.Pod) { p.Namespace = "other" })}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := sequencer.UndrainableBudgets([]policyv1.PodDisruptionBudget{tt.budget}, tt.pods)
			if !tt.flagged {
				require.Empty(t, got)
				return
			}
			require.Equal(t, []string{"PodDisruptionBudget db/pg allows no eviction even with its 2 pods healthy (it wants 2 healthy): the drain of node w-1, w-2 would wait for ever"}, got)
		})
	}
}
