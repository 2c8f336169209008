package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/upgrade-repo/upgrade-repo/acquire"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/servecmd"
)

// leanServe is the file name of the serve-only binary installed beside upgrade-repo.
const leanServe = "upgrade-repo-serve"

// runServe serves one release ISO until the process is signalled (package servecmd).
func runServe(ctx context.Context, a *app, args []string) error {
	return servecmd.Run(ctx, a.log, a.stderr, args)
}

// serve serves the release of src on ln until ctx is done (servecmd.Serve).
func serve(ctx context.Context, a *app, src acquire.Source, ln net.Listener, grace time.Duration, ready func()) error {
	return servecmd.Serve(ctx, a.log, src, ln, grace, ready)
}

// execLeanServe replaces the process with upgrade-repo-serve, given the serve command's
// arguments, when that binary lies beside this one (the image and `make build` put it there):
// the same command, linked without the cluster's packages, so its process holds a third of the
// memory. It returns only when there is no such binary or it cannot be run; serve then runs here.
func execLeanServe(args []string) {
	self, err := os.Executable()
	if err != nil {
		return
	}
	lean := filepath.Join(filepath.Dir(self), leanServe)
	fi, err := os.Stat(lean)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return
	}
	_ = syscall.Exec(lean, append([]string{lean}, args...), os.Environ()) // returns only on failure: serve in this process
}
