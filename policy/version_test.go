package policy_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/policy"
)

func TestParseVersion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    policy.Version
		pre     bool
		wantErr string
	}{
		{name: "release", in: "v1.5.2", want: policy.Version{Major: 1, Minor: 5, Patch: 2}},
		{name: "no v", in: "1.5.2", want: policy.Version{Major: 1, Minor: 5, Patch: 2}},
		{name: "rc", in: "v1.6.0-rc1", want: policy.Version{Major: 1, Minor: 6, Pre: "rc1"}, pre: true},
		{name: "dev build", in: "v1.5.2-dev-20250101", want: policy.Version{Major: 1, Minor: 5, Patch: 2, Pre: "dev-20250101"}, pre: true},
		{name: "build metadata", in: "v1.32.7+rke2r1", want: policy.Version{Major: 1, Minor: 32, Patch: 7, Build: "rke2r1"}},
		{name: "spaces", in: " v1.5.2 ", want: policy.Version{Major: 1, Minor: 5, Patch: 2}},
		{name: "empty", in: "", wantErr: `version "": want vMAJOR.MINOR.PATCH`},
		{name: "two parts", in: "v1.5", wantErr: `version "v1.5": want vMAJOR.MINOR.PATCH`},
		{name: "four parts", in: "v1.5.2.1", wantErr: "want vMAJOR.MINOR.PATCH"},
		{name: "letters", in: "v1.x.2", wantErr: `"x" is not a number`},
		{name: "negative", in: "v1.-5.2", wantErr: "want vMAJOR.MINOR.PATCH"},
		{name: "empty part", in: "v1..2", wantErr: `"" is not a number`},
		{name: "empty pre", in: "v1.5.2-", wantErr: "empty pre-release"},
		{name: "empty build", in: "v1.5.2+", wantErr: "empty build metadata"},
		{name: "huge", in: "v1.99999999999999999999.0", wantErr: "is not a number"},
		{name: "head", in: "v1.5-head", wantErr: "want vMAJOR.MINOR.PATCH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := policy.ParseVersion(tt.in)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.pre, got.IsPrerelease())
		})
	}
}

func TestVersionCompare(t *testing.T) {
	t.Parallel()
	// Each version sorts strictly after the one before it.
	order := []string{
		"v1.4.2-rc1", "v1.4.2", "v1.5.0-dev-20250101", "v1.5.0-dev-20250201", "v1.5.0-rc1", "v1.5.0-rc2",
		"v1.5.0-rc10", "v1.5.0", "v1.5.2", "v1.5.10", "v1.6.0-rc1", "v1.6.0", "v2.0.0",
	}
	for i := range order {
		for j := range order {
			a, err := policy.ParseVersion(order[i])
			require.NoError(t, err)
			b, err := policy.ParseVersion(order[j])
			require.NoError(t, err)
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			require.Equal(t, want, a.Compare(b), "%s vs %s", order[i], order[j])
		}
	}
	a, _ := policy.ParseVersion("v1.5.2+a")
	b, _ := policy.ParseVersion("v1.5.2+b")
	require.Equal(t, 0, a.Compare(b), "build metadata does not order")
	require.Equal(t, "v1.6.0-rc1+x", policy.Version{Major: 1, Minor: 6, Pre: "rc1", Build: "x"}.String())
}
