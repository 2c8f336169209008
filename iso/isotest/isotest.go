// Package isotest builds real ISO images with xorriso for tests of packages that read them.
//
// RequireXorriso makes sure xorriso is installed (installing Debian's package when the test runs
// as root) or skips the test; Build turns a directory tree into an image in the test's temporary
// directory.
//
// Imports: the standard library and testify; nothing of this module.
package isotest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	installOnce sync.Once
	installErr  string
)

// RequireXorriso skips t unless xorriso is installed. When it is missing and the test runs as root
// on a system with apt-get, it installs Debian's xorriso package first (once per process).
func RequireXorriso(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("xorriso"); err == nil {
		return
	}
	installOnce.Do(func() {
		if os.Geteuid() != 0 {
			installErr = "xorriso is not installed and the test does not run as root: run `apt-get install xorriso` (or `make deps`)"
			return
		}
		if _, err := exec.LookPath("apt-get"); err != nil {
			installErr = "xorriso is not installed and there is no apt-get to install it"
			return
		}
		for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "xorriso"}} {
			cmd := exec.Command("apt-get", args...)
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			if out, err := cmd.CombinedOutput(); err != nil {
				installErr = "installing xorriso with apt-get failed: " + err.Error() + ": " + string(out)
				return
			}
		}
	})
	if _, err := exec.LookPath("xorriso"); err != nil {
		if installErr == "" {
			installErr = "xorriso is still missing after apt-get install"
		}
		t.Skip(installErr)
	}
}

// DefaultArgs are the xorriso -as mkisofs arguments Build passes before its extra arguments:
// Rock Ridge and Joliet.
var DefaultArgs = []string{"-R", "-J"}

// Build runs `xorriso -as mkisofs` with DefaultArgs and extraArgs on the directory srcDir and
// returns the path of the image, inside t.TempDir(). Extra arguments come after the defaults, so
// "--norock" turns Rock Ridge off. The test fails when xorriso does.
func Build(t testing.TB, srcDir string, extraArgs ...string) string {
	t.Helper()
	return BuildArgs(t, srcDir, append(append([]string(nil), DefaultArgs...), extraArgs...)...)
}

// BuildArgs is Build without the default arguments: args alone select the trees.
func BuildArgs(t testing.TB, srcDir string, args ...string) string {
	t.Helper()
	RequireXorriso(t)
	out := filepath.Join(t.TempDir(), "image.iso")
	full := append([]string{"-abort_on", "FAILURE", "-as", "mkisofs", "-quiet"}, args...)
	full = append(full, "-o", out, srcDir)
	cmd := exec.Command("xorriso", full...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	require.NoError(t, cmd.Run(), "xorriso %q\n%s", full, stderr.String())
	return out
}

// Xorriso runs xorriso with args (native commands, such as "-compliance" before "-as mkisofs")
// and returns its combined output; the test fails when xorriso does.
func Xorriso(t testing.TB, args ...string) string {
	t.Helper()
	RequireXorriso(t)
	out, err := exec.Command("xorriso", args...).CombinedOutput()
	require.NoError(t, err, "xorriso %q\n%s", args, out)
	return string(out)
}
