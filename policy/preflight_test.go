package policy_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/policy"
)

func TestPreflightChecks(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	base := policy.Input{Current: "v1.5.2", Target: "v1.6.0", VersionExists: true}
	tests := []struct {
		name      string
		pre       policy.Preflight
		force     bool
		check     string
		want      outcome
		message   string
		transient bool
	}{
		{name: "disk not forecast passes saying so", check: policy.CheckNodeDiskSpace, want: pass,
			message: "not checked: the release's size or the nodes' file systems are not known"},
		{name: "disk with room", pre: policy.Preflight{DiskChecked: true}, check: policy.CheckNodeDiskSpace, want: pass, message: "every node has room"},
		{name: "a node out of room, with its figures", check: policy.CheckNodeDiskSpace, want: fail, transient: true,
			pre:     policy.Preflight{DiskChecked: true, DiskProblems: map[string][]string{"w-2": {"images need 9 GiB in /var/lib/containerd, 2 GiB free"}, "w-1": {"ISO needs 6 GiB"}}},
			message: "node w-1: ISO needs 6 GiB; node w-2: images need 9 GiB in /var/lib/containerd, 2 GiB free"},
		{name: "force lets a full disk through", force: true, check: policy.CheckNodeDiskSpace, want: forced,
			pre: policy.Preflight{DiskChecked: true, DiskProblems: map[string][]string{"w-1": {"ISO needs 6 GiB"}}}, message: "node w-1: ISO needs 6 GiB (forced)"},
		{name: "cordoned by someone else", check: policy.CheckNodesSchedulable, want: fail, transient: true,
			pre: policy.Preflight{CordonedNodes: []string{"w-1", "w-3"}}, message: "cordoned by someone else (the plan's drain and uncordon would undo it): w-1, w-3"},
		{name: "a budget no drain meets", check: policy.CheckDrainable, want: fail, transient: true,
			pre: policy.Preflight{UndrainableBudgets: []string{"PodDisruptionBudget db/pg allows no eviction"}}, message: "PodDisruptionBudget db/pg allows no eviction"},
		{name: "no certificate read", check: policy.CheckCertificateExpiry, want: pass, message: "not checked: no control-plane certificate was read"},
		{name: "certificates past the window", check: policy.CheckCertificateExpiry, want: pass,
			pre: policy.Preflight{Now: now, Window: 2 * time.Hour, Certificates: []policy.Certificate{
				{Node: "cp-b", Name: "API server serving certificate", NotAfter: now.Add(48 * time.Hour)},
				{Node: "cp-a", Name: "API server serving certificate", NotAfter: now.Add(3 * time.Hour)}}},
			message: "the first to expire, API server serving certificate of node cp-a, expires 2026-05-01T15:00:00Z, after the plan's window of 2h0m0s"},
		{name: "a certificate expiring within the default window", check: policy.CheckCertificateExpiry, want: fail, transient: true,
			pre: policy.Preflight{Now: now, Certificates: []policy.Certificate{
				{Node: "cp-a", Name: "API server serving certificate", NotAfter: now.Add(3 * time.Hour)}}},
			message: "API server serving certificate of node cp-a expires 2026-05-01T15:00:00Z (in 3h0m0s): within the plan's window of 24h0m0s; renew them (kubeadm certs renew) before the upgrade"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := base
			in.Preflight, in.Force = tt.pre, tt.force
			res := policy.Evaluate(in)
			var got *policy.Check
			for i := range res.Checks {
				if res.Checks[i].Name == tt.check {
					got = &res.Checks[i]
				}
			}
			require.NotNil(t, got)
			require.Equal(t, tt.message, got.Message)
			require.Equal(t, tt.want == pass, got.Passed)
			require.Equal(t, tt.want == forced, got.Forced)
			require.Equal(t, tt.want != fail, res.Allowed)
			require.False(t, got.Required)
			if tt.want == fail {
				require.Equal(t, tt.transient, res.Transient())
			}
		})
	}
}
