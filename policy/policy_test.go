package policy_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/policy"
)

// outcome is what a test expects of one check: pass, fail (blocking), forced (failed, warned).
type outcome int

const (
	pass outcome = iota
	fail
	forced
)

func TestEvaluateMatrix(t *testing.T) {
	t.Parallel()
	base := policy.Input{Current: "v1.5.2", Target: "v1.6.0", VersionExists: true}
	with := func(f func(*policy.Input)) policy.Input {
		in := base
		f(&in)
		return in
	}
	tests := []struct {
		name    string
		in      policy.Input
		allowed bool
		// checks lists the outcome of the checks the case is about; every other check must pass.
		checks map[string]outcome
	}{
		{name: "one minor up", in: base, allowed: true},
		{name: "patch up", in: with(func(i *policy.Input) { i.Target = "v1.5.3" }), allowed: true},
		{name: "same version re-apply", in: with(func(i *policy.Input) { i.Target = "v1.5.2" }), allowed: true},
		{name: "same version re-apply below min", in: with(func(i *policy.Input) { i.Target = "v1.5.2"; i.MinUpgradableVersion = "v1.5.2" }), allowed: true},
		{name: "two minors up without min", in: with(func(i *policy.Input) { i.Target = "v1.7.0" }),
			checks: map[string]outcome{policy.CheckMinorStep: fail}},
		{name: "two minors up with force still refused", in: with(func(i *policy.Input) { i.Target = "v1.7.0"; i.Force = true }),
			checks: map[string]outcome{policy.CheckMinorStep: fail}},
		{name: "major up without min", in: with(func(i *policy.Input) { i.Target = "v2.0.0" }),
			checks: map[string]outcome{policy.CheckMinorStep: fail}},
		{name: "two minors up allowed by min", in: with(func(i *policy.Input) { i.Target = "v1.7.0"; i.MinUpgradableVersion = "v1.5.0" }), allowed: true},
		{name: "major up allowed by min", in: with(func(i *policy.Input) { i.Target = "v2.0.0"; i.MinUpgradableVersion = "v1.5.2" }), allowed: true},
		{name: "current equals min", in: with(func(i *policy.Input) { i.MinUpgradableVersion = "v1.5.2" }), allowed: true},
		{name: "current below min", in: with(func(i *policy.Input) { i.MinUpgradableVersion = "v1.5.3" }),
			checks: map[string]outcome{policy.CheckMinUpgradableVersion: fail}},
		{name: "current below min with force still refused", in: with(func(i *policy.Input) { i.MinUpgradableVersion = "v1.5.3"; i.Force = true }),
			checks: map[string]outcome{policy.CheckMinUpgradableVersion: fail}},
		{name: "pre-release of min is below min", in: with(func(i *policy.Input) { i.Current = "v1.5.3-rc1"; i.MinUpgradableVersion = "v1.5.3" }),
			checks: map[string]outcome{policy.CheckMinUpgradableVersion: fail}},
		{name: "min does not parse", in: with(func(i *policy.Input) { i.MinUpgradableVersion = "1.5" }),
			checks: map[string]outcome{policy.CheckMinUpgradableVersion: fail}},
		{name: "downgrade", in: with(func(i *policy.Input) { i.Target = "v1.5.1" }),
			checks: map[string]outcome{policy.CheckNoDowngrade: fail}},
		{name: "downgrade forced", in: with(func(i *policy.Input) { i.Target = "v1.5.1"; i.Force = true }), allowed: true,
			checks: map[string]outcome{policy.CheckNoDowngrade: forced}},
		{name: "downgrade to an older minor forced", in: with(func(i *policy.Input) { i.Target = "v1.4.0"; i.Force = true }), allowed: true,
			checks: map[string]outcome{policy.CheckNoDowngrade: forced}},
		{name: "release to its own pre-release is a downgrade", in: with(func(i *policy.Input) { i.Target = "v1.5.2-rc1"; i.AllowPrerelease = true }),
			checks: map[string]outcome{policy.CheckNoDowngrade: fail}},
		{name: "nodes not ready", in: with(func(i *policy.Input) { i.NotReadyNodes = []string{"n2"} }),
			checks: map[string]outcome{policy.CheckNodesReady: fail}},
		{name: "nodes not ready forced", in: with(func(i *policy.Input) { i.NotReadyNodes = []string{"n2"}; i.Force = true }), allowed: true,
			checks: map[string]outcome{policy.CheckNodesReady: forced}},
		{name: "pre-release target refused", in: with(func(i *policy.Input) { i.Target = "v1.6.0-rc1" }),
			checks: map[string]outcome{policy.CheckPrerelease: fail}},
		{name: "pre-release target allowed", in: with(func(i *policy.Input) { i.Target = "v1.6.0-rc1"; i.AllowPrerelease = true }), allowed: true},
		{name: "pre-release target forced", in: with(func(i *policy.Input) { i.Target = "v1.6.0-rc1"; i.Force = true }), allowed: true,
			checks: map[string]outcome{policy.CheckPrerelease: forced}},
		{name: "dev build target refused", in: with(func(i *policy.Input) { i.Target = "v1.5.3-dev-20250101" }),
			checks: map[string]outcome{policy.CheckPrerelease: fail}},
		{name: "from a pre-release to its release", in: with(func(i *policy.Input) { i.Current = "v1.6.0-rc1" }), allowed: true},
		{name: "version missing", in: with(func(i *policy.Input) { i.VersionExists = false }),
			checks: map[string]outcome{policy.CheckVersionExists: fail}},
		{name: "version missing forced still refused", in: with(func(i *policy.Input) { i.VersionExists = false; i.Force = true }),
			checks: map[string]outcome{policy.CheckVersionExists: fail}},
		{name: "plan in flight", in: with(func(i *policy.Input) { i.PlansInFlight = []string{"other"} }),
			checks: map[string]outcome{policy.CheckNoPlanInFlight: fail}},
		{name: "plan in flight forced still refused", in: with(func(i *policy.Input) { i.PlansInFlight = []string{"other"}; i.Force = true }),
			checks: map[string]outcome{policy.CheckNoPlanInFlight: fail}},
		{name: "target does not parse", in: with(func(i *policy.Input) { i.Target = "latest" }),
			checks: map[string]outcome{policy.CheckTargetVersion: fail, policy.CheckMinorStep: fail, policy.CheckNoDowngrade: fail, policy.CheckPrerelease: fail}},
		{name: "current unknown", in: with(func(i *policy.Input) { i.Current = "" }),
			checks: map[string]outcome{policy.CheckCurrentVersion: fail, policy.CheckMinorStep: fail, policy.CheckNoDowngrade: fail}},
		{name: "current unknown with min", in: with(func(i *policy.Input) { i.Current = ""; i.MinUpgradableVersion = "v1.5.0"; i.Force = true }),
			checks: map[string]outcome{policy.CheckCurrentVersion: fail, policy.CheckMinUpgradableVersion: fail, policy.CheckNoDowngrade: forced}},
		{name: "release unknown defers the path check", in: with(func(i *policy.Input) { i.Target = "v1.9.0"; i.ReleaseUnknown = true }), allowed: true},
		{name: "everything skippable forced at once", in: with(func(i *policy.Input) {
			i.Target = "v1.5.1-rc1"
			i.NotReadyNodes = []string{"a", "b"}
			i.Force = true
		}), allowed: true,
			checks: map[string]outcome{policy.CheckNoDowngrade: forced, policy.CheckNodesReady: forced, policy.CheckPrerelease: forced}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := policy.Evaluate(tt.in)
			require.Equal(t, tt.allowed, r.Allowed, "checks: %+v", r.Checks)
			seen := map[string]bool{}
			for _, c := range r.Checks {
				seen[c.Name] = true
				want := tt.checks[c.Name]
				got := pass
				switch {
				case c.Forced:
					got = forced
				case !c.Passed:
					got = fail
				}
				require.Equal(t, want, got, "check %s: %s", c.Name, c.Message)
				require.NotEmpty(t, c.Message, "check %s", c.Name)
				require.NotEmpty(t, c.Description, "check %s", c.Name)
			}
			for name := range tt.checks {
				require.True(t, seen[name], "check %s was not evaluated", name)
			}
			require.Equal(t, !tt.allowed, r.Summary() != "")
		})
	}
}

func TestEvaluateRequiredSplit(t *testing.T) {
	t.Parallel()
	required := map[string]bool{
		policy.CheckTargetVersion: true, policy.CheckCurrentVersion: true, policy.CheckVersionExists: true,
		policy.CheckNoPlanInFlight: true, policy.CheckMinorStep: true, policy.CheckMinUpgradableVersion: true,
		policy.CheckNoDowngrade: false, policy.CheckNodesReady: false, policy.CheckPrerelease: false,
		policy.CheckKubernetesNoDowngrade: false, policy.CheckKubernetesMinorStep: false, policy.CheckKubeletSkew: false,
		policy.CheckNodeDiskSpace: false, policy.CheckNodesSchedulable: false, policy.CheckDrainable: false, policy.CheckCertificateExpiry: false,
	}
	for _, minV := range []string{"", "v1.5.0"} {
		r := policy.Evaluate(policy.Input{Current: "v1.5.2", Target: "v1.6.0", MinUpgradableVersion: minV, VersionExists: true})
		require.Len(t, r.Checks, 15)
		for _, c := range r.Checks {
			want, ok := required[c.Name]
			require.True(t, ok, "unexpected check %s", c.Name)
			require.Equal(t, want, c.Required, "check %s", c.Name)
		}
	}
}

func TestTransient(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   policy.Input
		want bool
	}{
		{name: "allowed is not transient", in: policy.Input{Current: "v1.5.2", Target: "v1.6.0", VersionExists: true}, want: false},
		{name: "nodes and plans may clear", in: policy.Input{Current: "v1.5.2", Target: "v1.6.0", NotReadyNodes: []string{"n"}, PlansInFlight: []string{"p"}}, want: true},
		{name: "unknown installed version may be recorded", in: policy.Input{Target: "v1.6.0", MinUpgradableVersion: "v1.5.0", VersionExists: true}, want: true},
		{name: "a downgrade never clears", in: policy.Input{Current: "v1.5.2", Target: "v1.5.1", VersionExists: true, NotReadyNodes: []string{"n"}}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, policy.Evaluate(tt.in).Transient())
		})
	}
}
