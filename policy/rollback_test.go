package policy_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/policy"
)

func TestRollback(t *testing.T) {
	t.Parallel()
	rollback := func(current, target, k8sCurrent, k8sTarget string, kubelets map[string]string) policy.Input {
		return policy.Input{Current: current, Target: target, VersionExists: true, Rollback: true,
			KubernetesCurrent: k8sCurrent, KubernetesTarget: k8sTarget, Kubelets: kubelets}
	}
	tests := []struct {
		name    string
		in      policy.Input
		allowed bool
		// failed names the checks that refuse it.
		failed []string
	}{
		{name: "patch downgrade", in: rollback("v1.34.4", "v1.34.3", "v1.34.4", "v1.34.3", map[string]string{"cp": "v1.34.4", "w": "v1.34.4"}), allowed: true},
		{name: "patch downgrade, a worker rolled back already", in: rollback("v1.34.4", "v1.34.3", "v1.34.4", "v1.34.3", map[string]string{"cp": "v1.34.4", "w": "v1.34.3"}), allowed: true},
		{name: "across a minor", in: rollback("v1.35.0", "v1.34.3", "v1.35.0", "v1.34.3", nil),
			failed: []string{policy.CheckNoDowngrade, policy.CheckKubernetesNoDowngrade}},
		{name: "the release a patch back, its Kubernetes a minor back", in: rollback("v1.5.3", "v1.5.2", "v1.33.1", "v1.32.7", nil),
			failed: []string{policy.CheckKubernetesNoDowngrade}},
		{name: "not a downgrade", in: rollback("v1.34.3", "v1.34.4", "v1.34.3", "v1.34.4", nil),
			failed: []string{policy.CheckNoDowngrade, policy.CheckKubernetesNoDowngrade}},
		{name: "the same version", in: rollback("v1.34.4", "v1.34.4", "", "", nil), failed: []string{policy.CheckNoDowngrade}},
		{name: "installed version unknown", in: rollback("", "v1.34.3", "", "", nil),
			failed: []string{policy.CheckCurrentVersion, policy.CheckMinorStep, policy.CheckNoDowngrade}},
		{name: "a kubelet newer than the control plane still refuses", in: rollback("v1.34.4", "v1.34.3", "v1.34.4", "v1.34.3", map[string]string{"w": "v1.34.5"}),
			failed: []string{policy.CheckKubeletSkew}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, force := range []bool{false, true} {
				in := tt.in
				in.Force = force
				r := policy.Evaluate(in)
				var failed []string
				for _, c := range r.Failed() {
					failed = append(failed, c.Name)
				}
				if force && tt.failed != nil && tt.failed[0] == policy.CheckKubeletSkew {
					// Skippable: force lets it through.
					require.True(t, r.Allowed, "forced: %s", r.Summary())
					continue
				}
				require.Equal(t, tt.allowed, r.Allowed, "force=%v: %s", force, r.Summary())
				require.ElementsMatch(t, tt.failed, failed, "force=%v", force)
			}
		})
	}
	// Without spec.rollback the same patch downgrade is refused.
	in := rollback("v1.34.4", "v1.34.3", "v1.34.4", "v1.34.3", map[string]string{"cp": "v1.34.4"})
	in.Rollback = false
	require.False(t, policy.Evaluate(in).Allowed)
}
