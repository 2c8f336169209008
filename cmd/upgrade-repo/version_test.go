package main

import (
	"bytes"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	bi, ok := debug.ReadBuildInfo()
	require.True(t, ok, "test binaries carry build info")
	tests := []struct {
		name  string
		args  []string
		want  string
		usage bool
	}{
		{name: "build info", args: []string{"version"}, want: "upgrade-repo " + bi.Main.Version + "\n"},
		{name: "--version, as helm and kubectl", args: []string{"--version"}, want: "upgrade-repo " + bi.Main.Version + "\n"},
		{name: "stray argument", args: []string{"version", "x"}, usage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tt.args, &stdout, &stderr)
			if tt.usage {
				require.ErrorIs(t, err, errUsage)
				require.Empty(t, stdout.String())
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, stdout.String())
		})
	}
}
