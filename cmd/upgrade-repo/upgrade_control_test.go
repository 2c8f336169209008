package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// controlPlan is a plan in phase whose nodes are in the given states (node -> state), with
// pauseNodes paused.
func controlPlan(phase v1beta1.Phase, states map[string]v1beta1.NodeState, paused ...string) *v1beta1.UpgradePlan {
	p := upgradeTestPlan("p", 0, phase)
	p.Spec.Version = "v1.6.0"
	p.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
	for n, s := range states {
		p.Status.NodeUpgradeStatuses[n] = v1beta1.NodeUpgradeStatus{State: s}
	}
	if len(paused) > 0 {
		p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: paused}
	}
	return p
}

func getPlan(t *testing.T, c client.Reader) *v1beta1.UpgradePlan {
	t.Helper()
	var p v1beta1.UpgradePlan
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: "p"}, &p))
	return &p
}

func pauseNodes(p *v1beta1.UpgradePlan) []string {
	if p.Spec.NodeUpgradeOption == nil {
		return nil
	}
	return p.Spec.NodeUpgradeOption.PauseNodes
}

func TestUpgradeControlUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"pause"}, {"resume", "a", "b"}, {"retry", "--nope", "p"}, {"abort"}, {"apply"}, {"apply", "--iso-url", "https://x/v1.6.0.iso", "extra"},
		{"apply", "--iso-url", "https://x/v1.6.0.iso", "--timeout", "-1s"}, {"status", "--timeout", "-1s"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			a, _, _ := upgradeTestApp()
			require.ErrorIs(t, runUpgrade(t.Context(), a, args), errUsage)
		})
	}
}
