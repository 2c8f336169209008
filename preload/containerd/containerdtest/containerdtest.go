// Package containerdtest starts a real containerd daemon for tests: Debian's containerd binary
// with its own root, state, configuration and socket in a temporary directory, so that tests
// import and inspect images against the real thing without touching the node's daemon.
//
// The daemon runs with the CRI plugin and the unusable snapshotters disabled, so it starts in well
// under a second; everything it writes stays under its directory. When the binary is missing and
// the test runs as root, Debian's containerd package is installed first. Tests that are not run as
// root, or on a machine still without the binary, are skipped with a message that says why.
//
// Imports: the standard library and testify; it runs Debian's containerd binary, not its Go client.
package containerdtest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// DefaultBinary is where Debian's containerd package installs the daemon.
const DefaultBinary = "/usr/bin/containerd"

// startTimeout bounds how long Start waits for the daemon's socket to accept connections.
const startTimeout = 30 * time.Second

var (
	installOnce sync.Once
	installErr  string
)

// install installs Debian's containerd package, once per process, when the binary is missing.
func install() {
	if _, err := exec.LookPath("apt-get"); err != nil {
		installErr = "(and there is no apt-get to install it)"
		return
	}
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "containerd"}} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			installErr = fmt.Sprintf("(apt-get %s failed: %v: %s)", args[0], err, bytes.TrimSpace(out))
			return
		}
	}
}

// Daemon is one running containerd started by Start. Its fields are read-only.
type Daemon struct {
	// Dir holds everything the daemon writes: root/, state/, config.toml, containerd.log and the sockets.
	Dir string
	// Root is the daemon's persistent root (content store, metadata database, snapshots).
	Root string
	// Socket is the path of the daemon's gRPC socket, what a containerd client dials.
	Socket string
	// Log is the path of the file that collects the daemon's stdout and stderr.
	Log string

	binary string
	cmd    *exec.Cmd
	done   chan error
}

type options struct {
	binary string
}

// Option changes how Start runs the daemon.
type Option func(*options)

// WithBinary runs the containerd binary at path instead of DefaultBinary.
func WithBinary(path string) Option { return func(o *options) { o.binary = path } }

// Start runs a fresh containerd for the test and waits until its socket accepts connections. The
// daemon is stopped (SIGTERM, then SIGKILL after a grace period) and its directory removed when the
// test and its subtests finish. When Debian's binary is missing, Start installs the containerd
// package with apt-get (once per process). It skips the test when not run as root or when the
// binary is still missing, and fails it when the daemon does not come up, quoting the end of the daemon's log.
func Start(t testing.TB, opts ...Option) *Daemon {
	t.Helper()
	o := options{binary: DefaultBinary}
	for _, opt := range opts {
		opt(&o)
	}
	if os.Geteuid() != 0 {
		t.Skip("containerdtest: a real containerd needs root; run the tests as root (CI does)")
	}
	if _, err := os.Stat(o.binary); err != nil && o.binary == DefaultBinary {
		installOnce.Do(install)
	}
	if _, err := os.Stat(o.binary); err != nil {
		t.Skipf("containerdtest: no containerd binary at %s (make deps installs it): %v %s", o.binary, err, installErr)
	}
	// A unix socket path must stay under 108 bytes, so the directory is short and not t.TempDir().
	dir, err := os.MkdirTemp("", "ctd-")
	if err != nil {
		t.Fatalf("containerdtest: %v", err)
	}
	d := &Daemon{
		Dir:    dir,
		Root:   filepath.Join(dir, "root"),
		Socket: filepath.Join(dir, "c.sock"),
		Log:    filepath.Join(dir, "containerd.log"),
		binary: o.binary,
	}
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			t.Errorf("containerdtest: stop: %v", err)
		}
		_ = os.RemoveAll(dir)
	})
	if err := os.WriteFile(d.config(), []byte(config(d)), 0o600); err != nil {
		t.Fatalf("containerdtest: %v", err)
	}
	if err := d.launch(); err != nil {
		t.Fatalf("containerdtest: %v", err)
	}
	return d
}

func (d *Daemon) config() string { return filepath.Join(d.Dir, "config.toml") }

// launch starts the daemon process and waits until its socket accepts connections.
func (d *Daemon) launch() error {
	logf, err := os.OpenFile(d.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	d.done = make(chan error, 1)
	d.cmd = exec.Command(d.binary, "--config", d.config(), "--log-level", "warn")
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	// Its own process group, so a signal sent to the test's group does not reach it first.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", d.binary, err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	if err := d.waitReady(); err != nil {
		return fmt.Errorf("%w\n%s", err, d.logTail())
	}
	return nil
}

// Kill ends the daemon at once with SIGKILL, as a crash or an out-of-memory kill would, and
// waits for it to exit. Its clients see the connection drop; Restart brings it back.
func (d *Daemon) Kill() error {
	select {
	case err := <-d.done:
		d.done <- err
		return nil // already gone
	default:
	}
	if err := d.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("containerdtest: kill: %w", err)
	}
	d.done <- <-d.done
	return nil
}

// Restart starts a daemon that Kill stopped again, on the same root, state and socket, and
// waits until it accepts connections. Kill and Restart must not be called concurrently.
func (d *Daemon) Restart() error {
	select {
	case <-d.done:
	default:
		return errors.New("containerdtest: restart: the daemon is still running")
	}
	// A killed daemon leaves its socket file behind; the new one replaces it.
	if err := d.launch(); err != nil {
		return fmt.Errorf("containerdtest: restart: %w", err)
	}
	return nil
}

// config is the daemon's configuration: without the CRI and the snapshotters it cannot load
// here, except aufs, which stays listed (failed to load) before overlayfs as on real nodes, so
// that a client asking for one plugin is shown to get that one.
func config(d *Daemon) string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.internal.v1.tracing",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.service.v1.diff-service"]
  default = ["walking"]

[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, d.Root, filepath.Join(d.Dir, "state"), d.Socket, d.Socket+".ttrpc", filepath.Join(d.Dir, "opt"))
}

func (d *Daemon) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case err := <-d.done:
			d.done <- err
			if err == nil {
				return errors.New("containerd exited before it was ready")
			}
			return fmt.Errorf("containerd exited before it was ready: %w", err)
		default:
		}
		conn, err := net.DialTimeout("unix", d.Socket, time.Second)
		if err == nil {
			_ = conn.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd socket %s not ready after %s: %w", d.Socket, startTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the daemon, gracefully if it can.
func (d *Daemon) stop() error {
	if d.cmd == nil || d.cmd.Process == nil {
		return nil
	}
	select {
	case err := <-d.done:
		d.done <- err
		return nil // already gone
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
		return errors.New("containerd did not stop within 10s of SIGTERM; killed")
	}
}

func (d *Daemon) logTail() string {
	b, err := os.ReadFile(d.Log)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(bytes.TrimSpace(b))
}
