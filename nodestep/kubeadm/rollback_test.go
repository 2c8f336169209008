package kubeadm_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/nodestep/kubeadm"
)

func TestDecideRollback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		f       kubeadm.Facts
		want    kubeadm.Action
		refused bool
	}{
		{name: "first control plane: apply --force", want: kubeadm.Apply,
			f: kubeadm.Facts{Target: "v1.34.3", ControlPlane: "v1.34.4", Kubelet: "v1.34.4", IsControlPlane: true, APIServer: "v1.34.4"}},
		{name: "a worker first, the control plane still newer", want: kubeadm.UpgradeNode,
			f: kubeadm.Facts{Target: "v1.34.3", ControlPlane: "v1.34.4", Kubelet: "v1.34.4"}},
		{name: "another control plane once kubeadm-config is back", want: kubeadm.UpgradeNode,
			f: kubeadm.Facts{Target: "v1.34.3", ControlPlane: "v1.34.3", Kubelet: "v1.34.4", IsControlPlane: true, APIServer: "v1.34.4"}},
		{name: "a control plane whose pods were rolled back, kubelet not yet", want: kubeadm.UpgradeNode,
			f: kubeadm.Facts{Target: "v1.34.3", ControlPlane: "v1.34.3", Kubelet: "v1.34.4", IsControlPlane: true, APIServer: "v1.34.3"}},
		{name: "already back", want: kubeadm.Done,
			f: kubeadm.Facts{Target: "v1.34.3", ControlPlane: "v1.34.3", Kubelet: "v1.34.3", IsControlPlane: true, APIServer: "v1.34.3"}},
		{name: "a worker already back", want: kubeadm.Done, f: kubeadm.Facts{Target: "v1.34.3", ControlPlane: "v1.34.4", Kubelet: "v1.34.3"}},
		{name: "across a minor version", refused: true, f: kubeadm.Facts{Target: "v1.33.9", ControlPlane: "v1.34.4", Kubelet: "v1.34.4"}},
		{name: "across a minor version, forced", refused: true, f: kubeadm.Facts{Target: "v1.33.9", ControlPlane: "v1.34.4", Kubelet: "v1.34.4", Force: true}},
		{name: "not a downgrade", refused: true, f: kubeadm.Facts{Target: "v1.34.5", ControlPlane: "v1.34.4", Kubelet: "v1.34.4"}},
		{name: "a kubelet older than the target", refused: true, f: kubeadm.Facts{Target: "v1.34.3", ControlPlane: "v1.34.4", Kubelet: "v1.34.2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.f.Rollback = true
			got, _, err := kubeadm.Decide(tt.f)
			if tt.refused {
				require.True(t, errors.Is(err, kubeadm.ErrRefused), "%v", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
	// Without Rollback the same patch downgrade is refused.
	_, _, err := kubeadm.Decide(kubeadm.Facts{Target: "v1.34.3", ControlPlane: "v1.34.4", Kubelet: "v1.34.4", IsControlPlane: true, APIServer: "v1.34.4"})
	require.ErrorIs(t, err, kubeadm.ErrRefused)
}
