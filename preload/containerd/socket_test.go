package containerd

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload"
)

// A socket path where no daemon can be fails at once, saying what is there; one that refuses is
// transient (the daemon restarting), so the preload waits for it.
func TestNewChecksTheSocket(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	refused := filepath.Join(dir, "refused.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: refused, Net: "unix"})
	require.NoError(t, err)
	ln.SetUnlinkOnClose(false)
	require.NoError(t, ln.Close()) // the socket file stays, nothing listens
	tests := []struct {
		name      string
		socket    string
		want      string
		transient bool
	}{
		{name: "nothing there", socket: filepath.Join(dir, "nope.sock"),
			want: "containerd socket " + filepath.Join(dir, "nope.sock") + ": no such file: nothing listens there (is containerd running, and is this its socket?)"},
		{name: "nothing there, unix://", socket: "unix://" + filepath.Join(dir, "nope.sock"), want: "no such file: nothing listens there"},
		{name: "a file", socket: file, want: "containerd socket " + file + ": a file, not a socket"},
		{name: "a directory", socket: dir, want: "containerd socket " + dir + ": a directory, not a socket"},
		{name: "refused", socket: refused, want: "connection refused: nothing listens there now (containerd stopped or restarting)", transient: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, err := New(t.Context(), tc.socket)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, tc.transient, errors.Is(err, preload.ErrTransient), err.Error())
			require.Less(t, time.Since(start), socketDialTimeout, "no wait for the client's dial timeout")
		})
	}
}
