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
		{name: "certificates past a window of twice the estimate", check: policy.CheckCertificateExpiry, want: pass,
			pre: policy.Preflight{Now: now, Estimate: 30 * time.Hour, Certificates: []policy.Certificate{
				{Node: "cp-b", Component: "etcd", CommonName: "cp-b", NotAfter: now.Add(72 * time.Hour), Renewal: policy.RenewedByKubeadm},
				{Node: "cp-a", Component: "kube-apiserver", CommonName: "kube-apiserver", NotAfter: now.Add(61 * time.Hour), Renewal: policy.RenewedByKubeadm}},
				CertificatesNote: "kube-scheduler (:10259) on cp-a, cp-b: refused, skipped"},
			message: "the first to expire, kube-apiserver's serving certificate on node cp-a (CN kube-apiserver), expires 2026-05-04T01:00:00Z, " +
				"after the plan's window of 60h0m0s (twice the plan's estimate of 30h0m0s); kube-scheduler (:10259) on cp-a, cp-b: refused, skipped; " + policy.ClientCertificatesUnchecked},
		{name: "a short estimate still checks a day", check: policy.CheckCertificateExpiry, want: fail, transient: true,
			pre: policy.Preflight{Now: now, Estimate: 90 * time.Minute, Certificates: []policy.Certificate{
				{Node: "cp-a", Component: "etcd", CommonName: "cp-a", NotAfter: now.Add(3 * time.Hour), Renewal: policy.RenewedByKubeadm}},
				CertificatesNote: "kubelet (:10250) on cp-a: no answer in 3s, skipped"},
			message: "etcd's serving certificate on node cp-a (CN cp-a) expires 2026-05-01T15:00:00Z (in 3h0m0s; kubeadm renews it as it upgrades that node, " +
				"which may be after it expires): within the plan's window of 24h0m0s (at least 24h0m0s; the plan is estimated to take 1h30m0s); " +
				"renew them before the upgrade (kubeadm certs renew on the node, for kubeadm's), or force; kubelet (:10250) on cp-a: no answer in 3s, skipped; " + policy.ClientCertificatesUnchecked},
		{name: "the kubelet's is not renewed by the upgrade", check: policy.CheckCertificateExpiry, want: fail, transient: true,
			pre: policy.Preflight{Now: now, Certificates: []policy.Certificate{
				{Node: "cp-a", Component: "kubelet", CommonName: "cp-a@1714560000", NotAfter: now.Add(5 * time.Hour)},
				{Node: "cp-a", Component: "kube-apiserver", CommonName: "kube-apiserver", NotAfter: now.Add(400 * 24 * time.Hour), Renewal: policy.RenewedByKubeadm}}},
			message: "kubelet's serving certificate on node cp-a (CN cp-a@1714560000) expires 2026-05-01T17:00:00Z (in 5h0m0s; not renewed by kubeadm upgrade apply): " +
				"within the plan's window of 24h0m0s (the plan's duration is not estimated); " +
				"renew them before the upgrade (the kubelet's by its certificate rotation or a new certificate), or force; " + policy.ClientCertificatesUnchecked},
		{name: "several, soonest first, forced", check: policy.CheckCertificateExpiry, want: forced, force: true,
			pre: policy.Preflight{Now: now, Certificates: []policy.Certificate{
				{Node: "cp-b", Component: "kubelet", NotAfter: now.Add(20 * time.Hour)},
				{Node: "cp-a", Component: "kube-scheduler", CommonName: "localhost@1714560000", NotAfter: now.Add(2 * time.Hour), Renewal: policy.RenewedOnRestart},
				{Node: "cp-a", Component: "kube-apiserver", CommonName: "kube-apiserver", NotAfter: now.Add(25 * time.Hour), Renewal: policy.RenewedByKubeadm}}},
			message: "kube-scheduler's serving certificate on node cp-a (CN localhost@1714560000) expires 2026-05-01T14:00:00Z (in 2h0m0s; made anew when the upgrade restarts kube-scheduler on that node); " +
				"kubelet's serving certificate on node cp-b expires 2026-05-02T08:00:00Z (in 20h0m0s; not renewed by kubeadm upgrade apply): " +
				"within the plan's window of 24h0m0s (the plan's duration is not estimated); " +
				"renew them before the upgrade (kubeadm certs renew on the node, for kubeadm's; the kubelet's by its certificate rotation or a new certificate), or force; " + policy.ClientCertificatesUnchecked + " (forced)"},
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

// The window a certificate must outlast: twice the plan's estimate, never less than a day.
func TestCertificateWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		estimate time.Duration
		want     time.Duration
	}{
		{name: "not estimated", want: 24 * time.Hour},
		{name: "an hour's plan", estimate: time.Hour, want: 24 * time.Hour},
		{name: "exactly half a day", estimate: 12 * time.Hour, want: 24 * time.Hour},
		{name: "longer than half a day", estimate: 13 * time.Hour, want: 26 * time.Hour},
		{name: "two days", estimate: 48 * time.Hour, want: 96 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, policy.CertificateWindow(tt.estimate))
		})
	}
}
