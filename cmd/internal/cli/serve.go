package cli

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// The environment through which upgrade-repo hands its serve command to upgrade-repo-serve and
// that binary hands it back when it is of another version: the version upgrade-repo was built
// as, the path to go back to, and the mark that says to serve in place.
const (
	serveVersionEnv = "UPGRADE_REPO_SERVE_VERSION"
	serveFromEnv    = "UPGRADE_REPO_SERVE_FROM"
	serveHereEnv    = "UPGRADE_REPO_SERVE_HERE"
)

// ExecServe replaces the process with the serve-only binary lean, running the serve command's
// args, and tells it version (this binary's link-time version) and self (this binary's path),
// for ReturnServe to compare and go back to. It returns only when the exec fails, or when this
// process is one that ReturnServe handed back: then serve runs here.
func ExecServe(lean, self, version string, args []string) error {
	if os.Getenv(serveHereEnv) != "" {
		return os.Unsetenv(serveHereEnv)
	}
	env := append(os.Environ(), serveVersionEnv+"="+version, serveFromEnv+"="+self)
	return syscall.Exec(lean, append([]string{lean}, args...), env)
}

// ReturnServe is called first by the serve-only binary, built as version: when upgrade-repo of
// another version started it (an upgrade replaced one binary and not the other), it says so on
// w and replaces the process with that upgrade-repo's serve command, which then serves in its
// own process. It returns when the versions agree, when the binary was started by itself, or
// when going back fails (this binary serves then).
func ReturnServe(w io.Writer, version string, args []string) {
	from, ok := os.LookupEnv(serveFromEnv)
	if !ok {
		return
	}
	want := os.Getenv(serveVersionEnv)
	_ = os.Unsetenv(serveFromEnv)    // not passed on, whatever happens
	_ = os.Unsetenv(serveVersionEnv) // likewise
	if want == version || from == "" {
		return
	}
	fmt.Fprintf(w, "upgrade-repo-serve: built as version %q and upgrade-repo as %q: serving in upgrade-repo's process\n", version, want)
	env := append(os.Environ(), serveHereEnv+"=1")
	err := syscall.Exec(from, append([]string{from, "serve"}, args...), env)
	fmt.Fprintf(w, "upgrade-repo-serve: run %s: %v; serving here\n", from, err)
}
