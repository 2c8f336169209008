package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// controlPlan is plan p in phase whose nodes are in the given states (node -> state).
func controlPlan(phase v1beta1.Phase, states map[string]v1beta1.NodeState) *v1beta1.UpgradePlan {
	p := upgradeTestPlan("p", 0, phase)
	p.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
	for n, s := range states {
		p.Status.NodeUpgradeStatuses[n] = v1beta1.NodeUpgradeStatus{State: s}
	}
	return p
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
