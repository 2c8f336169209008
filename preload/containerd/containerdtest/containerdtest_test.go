package containerdtest

import (
	"net"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStartAndCleanup(t *testing.T) {
	var d *Daemon
	t.Run("start", func(t *testing.T) {
		d = Start(t)
		conn, err := net.Dial("unix", d.Socket)
		require.NoError(t, err)
		require.NoError(t, conn.Close())
		require.DirExists(t, d.Root)
		require.FileExists(t, d.Log)
	})
	if d == nil {
		return // skipped: not root or no containerd
	}
	// The subtest's cleanup stopped the daemon and removed its directory.
	require.NotNil(t, d.cmd.ProcessState, "containerd still running")
	_, err := os.Stat(d.Dir)
	require.ErrorIs(t, err, os.ErrNotExist)
}
