package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/cmd/internal/cli"
	"github.com/upgrade-repo/upgrade-repo/nodestep"
)

// A failed step leaves its error as the pod's termination message; one that running it again
// would repeat exits nodestep.ExitPermanent, on which its Job fails at once.
func TestStepExit(t *testing.T) {
	t.Parallel()
	a := &app{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	tests := []struct {
		name     string
		err      error
		wantCode int
		wantMsg  string
	}{
		{name: "success", err: nil, wantCode: 0},
		{name: "a failure worth running again", err: errors.New("etcd not healthy after 30m0s"), wantCode: 1, wantMsg: "etcd not healthy after 30m0s"},
		{name: "a release that does not come up", err: fmt.Errorf("node cp1: the release's kube-apiserver did not come up within 5m0s (%w): exit status 1", nodestep.ErrPermanent),
			wantCode: nodestep.ExitPermanent, wantMsg: "node cp1: the release's kube-apiserver did not come up within 5m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "termination-log")
			err := stepExit(a, tt.err, path)
			require.Equal(t, tt.wantCode, cli.ExitStatus(err))
			b, rerr := os.ReadFile(path)
			if tt.wantMsg == "" {
				require.ErrorIs(t, rerr, os.ErrNotExist)
				return
			}
			require.NoError(t, rerr)
			require.Contains(t, string(b), tt.wantMsg)
		})
	}
}
