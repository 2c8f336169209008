package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSequencerBadInput(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(bad, []byte("not: [a kubeconfig"), 0o600))
	tests := []struct {
		name    string
		args    []string
		usage   bool
		wantErr string
	}{
		{name: "unknown flag", args: []string{"--nope"}, usage: true},
		{name: "stray argument", args: []string{"x"}, usage: true},
		{name: "missing kubeconfig", args: []string{"--kubeconfig", "/nonexistent/kubeconfig"}, wantErr: "load kubeconfig /nonexistent/kubeconfig"},
		{name: "broken kubeconfig", args: []string{"--kubeconfig", bad}, wantErr: "load kubeconfig " + bad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			a := &app{stdout: &out, stderr: &out, log: slog.New(slog.NewTextHandler(&out, nil))}
			err := runSequencer(t.Context(), a, tt.args)
			require.Error(t, err)
			if tt.usage {
				require.ErrorIs(t, err, errUsage)
			}
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
			}
		})
	}
}
