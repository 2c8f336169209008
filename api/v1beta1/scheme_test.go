package v1beta1_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

func TestAddToScheme(t *testing.T) {
	t.Parallel()
	s := runtime.NewScheme()
	require.NoError(t, v1beta1.AddToScheme(s))
	for _, kind := range []string{"Version", "VersionList", "UpgradePlan", "UpgradePlanList", "RepoNode", "RepoNodeList"} {
		require.True(t, s.Recognizes(v1beta1.GroupVersion.WithKind(kind)), kind)
	}
	// Deepcopy is generated: a copy shares nothing with the original.
	p := &v1beta1.UpgradePlan{Status: v1beta1.UpgradePlanStatus{NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{"n": {State: v1beta1.NodeUpgraded}}}}
	c := p.DeepCopy()
	c.Status.NodeUpgradeStatuses["n"] = v1beta1.NodeUpgradeStatus{}
	require.Equal(t, v1beta1.NodeUpgraded, p.Status.NodeUpgradeStatuses["n"].State)
}
