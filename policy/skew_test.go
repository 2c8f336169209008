package policy_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/policy"
)

func TestKubernetesSkew(t *testing.T) {
	t.Parallel()
	// A Harvester upgrade that is allowed, so that only the Kubernetes checks decide.
	base := policy.Input{Current: "v1.5.2", Target: "v1.6.0", VersionExists: true}
	k8s := func(current, target string, kubelets map[string]string, mut ...func(*policy.Input)) policy.Input {
		in := base
		in.KubernetesCurrent, in.KubernetesTarget, in.Kubelets = current, target, kubelets
		for _, m := range mut {
			m(&in)
		}
		return in
	}
	withForce := func(in *policy.Input) { in.Force = true }
	tests := []struct {
		name    string
		in      policy.Input
		allowed bool
		// checks gives the outcome of the Kubernetes checks the case is about; the others pass.
		checks map[string]outcome
		// message is a part of the message of the first check named in checks, or of every
		// Kubernetes check when checks is empty.
		message string
	}{
		{name: "patch upgrade", in: k8s("v1.33.4", "v1.33.5", map[string]string{"cp": "v1.33.4", "w": "v1.33.4"}), allowed: true,
			message: "v1.33.4 to v1.33.5"},
		{name: "minor upgrade", in: k8s("v1.33.4", "v1.34.1", map[string]string{"cp": "v1.33.4", "w": "v1.32.9"}), allowed: true},
		{name: "re-apply", in: k8s("v1.34.1", "v1.34.1", map[string]string{"cp": "v1.34.1"}), allowed: true},
		{name: "two minors skipped", in: k8s("v1.32.7", "v1.34.1", nil),
			checks: map[string]outcome{policy.CheckKubernetesMinorStep: fail}, message: "skips 1 minor versions"},
		{name: "two minors skipped forced", in: k8s("v1.32.7", "v1.34.1", nil, withForce), allowed: true,
			checks: map[string]outcome{policy.CheckKubernetesMinorStep: forced}},
		{name: "major change", in: k8s("v1.34.1", "v2.0.0", nil),
			checks: map[string]outcome{policy.CheckKubernetesMinorStep: fail}, message: "changes the major version"},
		{name: "minor downgrade", in: k8s("v1.34.1", "v1.33.5", map[string]string{"cp": "v1.34.1"}),
			checks:  map[string]outcome{policy.CheckKubernetesNoDowngrade: fail, policy.CheckKubeletSkew: fail},
			message: "the release's Kubernetes v1.33.5 is older than the control plane's v1.34.1"},
		{name: "patch downgrade", in: k8s("v1.34.2", "v1.34.1", nil),
			checks: map[string]outcome{policy.CheckKubernetesNoDowngrade: fail}},
		{name: "downgrade forced", in: k8s("v1.34.2", "v1.34.1", map[string]string{"cp": "v1.34.2"}, withForce), allowed: true,
			checks: map[string]outcome{policy.CheckKubernetesNoDowngrade: forced, policy.CheckKubeletSkew: forced}},
		{name: "rke2 minor upgrade", in: k8s("v1.32.7+rke2r1", "v1.33.3+rke2r1", map[string]string{"m-1": "v1.32.7+rke2r1"}), allowed: true},
		{name: "rke2 release number up", in: k8s("v1.33.3+rke2r1", "v1.33.3+rke2r2", map[string]string{"m-1": "v1.33.3+rke2r1"}), allowed: true},
		{name: "rke2 two minors skipped", in: k8s("v1.31.9+rke2r1", "v1.33.3+rke2r1", nil),
			checks: map[string]outcome{policy.CheckKubernetesMinorStep: fail}},
		{name: "rke2 downgrade", in: k8s("v1.33.3+rke2r1", "v1.32.7+rke2r1", nil),
			checks: map[string]outcome{policy.CheckKubernetesNoDowngrade: fail}},
		{name: "another distribution is not judged", in: k8s("v1.34.0", "v1.32.7+rke2r1", map[string]string{"kind": "v1.34.0"}), allowed: true,
			message: "not checked"},
		{name: "pre-release to its release", in: k8s("v1.35.0-rc.1", "v1.35.0", nil), allowed: true},
		{name: "pre-release of the next minor", in: k8s("v1.34.2", "v1.35.0-alpha.3", nil), allowed: true},
		{name: "release to its own pre-release is a downgrade", in: k8s("v1.35.0", "v1.35.0-rc.1", nil),
			checks: map[string]outcome{policy.CheckKubernetesNoDowngrade: fail}},
		{name: "pre-releases in order", in: k8s("v1.35.0-alpha.3", "v1.35.0-beta.0", nil), allowed: true},
		{name: "a kubelet newer than the control plane", in: k8s("v1.33.4", "v1.34.1", map[string]string{"cp": "v1.33.4", "w-2": "v1.34.0"}),
			checks: map[string]outcome{policy.CheckKubeletSkew: fail}, message: "node w-2: kubelet v1.34.0 is newer than the control plane's v1.33.4"},
		{name: "a kubelet newer than the target", in: k8s("v1.34.2", "v1.34.2", map[string]string{"w-1": "v1.35.0"}),
			checks: map[string]outcome{policy.CheckKubeletSkew: fail}, message: "node w-1: kubelet v1.35.0 is newer than the control plane's v1.34.2"},
		{name: "kubelets judged before the target is known", in: k8s("v1.33.4", "", map[string]string{"w-1": "v1.34.0"}, func(in *policy.Input) { in.ReleaseUnknown = true }),
			checks: map[string]outcome{policy.CheckKubeletSkew: fail}},
		{name: "a kubelet that does not parse", in: k8s("v1.33.4", "v1.34.1", map[string]string{"w-1": "1.34"}),
			checks: map[string]outcome{policy.CheckKubeletSkew: fail}, message: "node w-1: kubelet version"},
		{name: "a kubelet newer than the target only", in: k8s("", "v1.34.1", map[string]string{"w-1": "v1.34.2"}),
			checks: map[string]outcome{policy.CheckKubeletSkew: fail}, message: "newer than the release's v1.34.1"},
		{name: "release unknown", in: k8s("v1.33.4", "", nil, func(in *policy.Input) { in.ReleaseUnknown = true }), allowed: true,
			message: "not checked"},
		{name: "release names no Kubernetes", in: k8s("v1.33.4", "", nil), allowed: true, message: "not checked"},
		{name: "control plane unknown", in: k8s("", "v1.34.1", nil), allowed: true, message: "not checked"},
		{name: "target does not parse", in: k8s("v1.33.4", "1.34", nil),
			checks: map[string]outcome{policy.CheckKubernetesNoDowngrade: fail, policy.CheckKubernetesMinorStep: fail}},
	}
	names := []string{policy.CheckKubernetesNoDowngrade, policy.CheckKubernetesMinorStep, policy.CheckKubeletSkew}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := policy.Evaluate(tt.in)
			require.Equal(t, tt.allowed, r.Allowed, "checks: %+v", r.Checks)
			got := map[string]policy.Check{}
			for _, c := range r.Checks {
				got[c.Name] = c
			}
			first := ""
			for _, n := range names {
				if _, ok := tt.checks[n]; ok && first == "" {
					first = n
				}
			}
			for _, n := range names {
				c, ok := got[n]
				require.True(t, ok, "check %s was not evaluated", n)
				require.False(t, c.Required, "check %s is skippable", n)
				out := pass
				switch {
				case c.Forced:
					out = forced
				case !c.Passed:
					out = fail
				}
				require.Equal(t, tt.checks[n], out, "check %s: %s", n, c.Message)
				if tt.message != "" && (first == "" && n != policy.CheckKubeletSkew || n == first) {
					require.Contains(t, c.Message, tt.message, "check %s", n)
				}
			}
			for _, c := range r.Checks {
				if _, ours := tt.checks[c.Name]; !ours && !slices.Contains(names, c.Name) {
					require.True(t, c.Passed, "check %s: %s", c.Name, c.Message)
				}
			}
		})
	}
}

func TestDistribution(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"v1.34.1": "", "v1.32.7+rke2r1": "rke2r", "v1.33.3+rke2r12": "rke2r", "v1.33.1+k3s1": "k3s", "v1.35.0-rc.1": ""} {
		v, err := policy.ParseVersion(in)
		require.NoError(t, err)
		require.Equal(t, want, v.Distribution(), in)
	}
}
