package containerd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/upgrade-repo/upgrade-repo/preload"
)

// socketDialTimeout bounds checkSocket's one dial: a daemon that accepts answers at once.
const socketDialTimeout = 2 * time.Second

// checkSocket dials the daemon's socket once, before the client does. The client's dial retries
// until its timeout whatever the reason, so a wrong path would take that long and end in "dial
// unix: timeout": here it fails at once, saying what is at the path. Nothing there, something
// that is not a socket or a socket this process may not open is permanent; a socket that refuses
// (the daemon stopped, or restarting) is preload.ErrTransient. An address that is not a unix
// socket's path is left to the client.
func checkSocket(ctx context.Context, socket string) error {
	path := strings.TrimPrefix(socket, "unix://")
	if !strings.HasPrefix(path, "/") {
		return nil
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("containerd socket %s: no such file: nothing listens there (is containerd running, and is this its socket?)", path)
	case err != nil:
		return fmt.Errorf("containerd socket: %w", err)
	case fi.IsDir():
		return fmt.Errorf("containerd socket %s: a directory, not a socket: want the path containerd listens on", path)
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("containerd socket %s: a file, not a socket: want the path containerd listens on", path)
	}
	dctx, cancel := context.WithTimeout(ctx, socketDialTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(dctx, "unix", path)
	switch {
	case err == nil:
		return c.Close()
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w: containerd socket %s: connection refused: nothing listens there now (containerd stopped or restarting)", preload.ErrTransient, path)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("containerd socket %s: permission denied (containerd's socket is root's)", path)
	}
	return fmt.Errorf("containerd socket %s: %w", path, err)
}
