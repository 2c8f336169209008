package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
	"github.com/upgrade-repo/upgrade-repo/release/pack"
)

// TestUpgradeRepoServeRunsTheLeanBinary builds both commands into one directory, as `make build`
// and the image lay them out, and runs `upgrade-repo serve`: the process becomes
// upgrade-repo-serve (same pid), serves the release, and stops cleanly on SIGTERM. Without the
// lean binary beside it, upgrade-repo serves by itself.
func TestUpgradeRepoServeRunsTheLeanBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries")
	}
	isotest.RequireXorriso(t)
	iso := filepath.Join(t.TempDir(), "release.iso")
	_, err := pack.Build(t.Context(), pack.Demo("v1.5.2", 2, 4096, 1<<20), iso)
	require.NoError(t, err)
	bin := t.TempDir()
	out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin+"/", "../upgrade-repo", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)

	t.Run("lean binary beside it", func(t *testing.T) {
		exe, _ := serveOnce(t, filepath.Join(bin, "upgrade-repo"), iso)
		require.Equal(t, filepath.Join(bin, "upgrade-repo-serve"), exe)
	})
	t.Run("alone", func(t *testing.T) {
		alone := t.TempDir()
		require.NoError(t, os.Link(filepath.Join(bin, "upgrade-repo"), filepath.Join(alone, "upgrade-repo")))
		exe, _ := serveOnce(t, filepath.Join(alone, "upgrade-repo"), iso)
		require.Equal(t, filepath.Join(alone, "upgrade-repo"), exe)
	})
	// As after an upgrade that replaced upgrade-repo and left an older upgrade-repo-serve: built
	// with another version stamp, which the build information records (-ldflags) unless the
	// build trims paths, as images are built; the lean binary then tells by itself.
	for _, tt := range []struct {
		name  string
		flags []string
		says  string
	}{
		{"lean binary of another version beside it", nil, `from another build (-ldflags "", "-X main.version=v0.0.1-old")`},
		{"lean binary of another version beside it, paths trimmed", []string{"-trimpath"}, `built as version "v0.0.1-old" and upgrade-repo as ""`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mixed := t.TempDir()
			require.NoError(t, os.Link(filepath.Join(bin, "upgrade-repo"), filepath.Join(mixed, "upgrade-repo")))
			args := append(append([]string{"build"}, tt.flags...), "-ldflags", "-X main.version=v0.0.1-old", "-o", mixed+"/", ".")
			out, err := exec.CommandContext(t.Context(), "go", args...).CombinedOutput()
			require.NoError(t, err, "%s", out)
			exe, logs := serveOnce(t, filepath.Join(mixed, "upgrade-repo"), iso)
			require.Equal(t, filepath.Join(mixed, "upgrade-repo"), exe, "serves in upgrade-repo's process")
			require.Contains(t, logs, tt.says)
		})
	}
	t.Run("lean binary started by itself", func(t *testing.T) {
		exe, logs := serveOnce(t, filepath.Join(bin, "upgrade-repo-serve"), iso)
		require.Equal(t, filepath.Join(bin, "upgrade-repo-serve"), exe)
		require.NotContains(t, logs, "built as")
	})
	t.Run("usage error", func(t *testing.T) {
		cmd := exec.CommandContext(t.Context(), filepath.Join(bin, "upgrade-repo"), "serve", "--iso", iso, "extra")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, 2, ee.ExitCode())
		require.Contains(t, string(out), "serve takes no arguments")
	})
}

// serveOnce runs `upgrade-repo serve` (or upgrade-repo-serve) on iso, checks that it serves the
// release, stops it with SIGTERM and returns the executable the process ran when it served, and
// what it wrote to stderr.
func serveOnce(t *testing.T, upgradeRepo, iso string) (string, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	args := []string{"serve", "--iso", iso, "--listen", addr}
	if filepath.Base(upgradeRepo) == "upgrade-repo-serve" {
		args = args[1:] // the serve command itself
	}
	cmd := exec.Command(upgradeRepo, args...)
	var logs strings.Builder
	cmd.Stderr = &logs
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	base := "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 50*time.Millisecond, "not ready: %s", &logs)
	exe, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe")
	require.NoError(t, err)

	resp, err := http.Get(base + "/harvester-release.yaml")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "v1.5.2")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done:
		require.NoError(t, err, "exit after SIGTERM: %s", &logs)
	case <-time.After(20 * time.Second):
		t.Fatalf("still running 20s after SIGTERM: %s", &logs)
	}
	return exe, logs.String()
}

// TestLinksNoClusterPackage keeps the lean binary lean: none of the packages the other
// subcommands need (the Kubernetes client, containerd, gossip) is linked into it, so its process
// does not touch their pages when it starts.
func TestLinksNoClusterPackage(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/upgrade-repo/upgrade-repo/repo", "the list names the packages linked")
	for _, d := range deps {
		for _, heavy := range []string{"k8s.io/client-go", "k8s.io/api/", "sigs.k8s.io/controller-runtime", "github.com/containerd/containerd", "github.com/hashicorp/memberlist", "google.golang.org/grpc"} {
			require.False(t, strings.HasPrefix(d, heavy), "upgrade-repo-serve links %s", d)
		}
	}
}
