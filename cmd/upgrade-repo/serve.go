package main

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/upgrade-repo/upgrade-repo/acquire"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/cli"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/servecmd"
)

// leanServe is the file name of the serve-only binary installed beside upgrade-repo.
const leanServe = "upgrade-repo-serve"

// runServe serves one release ISO until the process is signalled (package servecmd).
func runServe(ctx context.Context, a *app, args []string) error {
	return servecmd.Run(ctx, a.log, a.stdout, a.stderr, args)
}

// serve serves the release of src on ln until ctx is done (servecmd.Serve).
func serve(ctx context.Context, a *app, src acquire.Source, ln net.Listener, grace time.Duration, ready func()) error {
	return servecmd.Serve(ctx, a.log, src, ln, grace, ready)
}

// execLeanServe replaces the process with upgrade-repo-serve, given the serve command's
// arguments, when that binary lies beside this one (the image and `make build` put it there) and
// comes from the same build: the same command, linked without the cluster's packages, so its
// process holds a third of the memory. It returns only when there is no such binary, it is from
// another build (an upgrade that replaced one binary and not the other: it says so on stderr), or
// it cannot be run; serve then runs here. The toolchain and the modules both link are compared
// here, from the lean binary's build information; the version stamp (-X main.version, which
// the build information does not record) by the lean binary itself (cli.ReturnServe), which
// hands the command back when it differs.
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
	own, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	other, err := buildinfo.ReadFile(lean)
	if err != nil {
		fmt.Fprintf(os.Stderr, "upgrade-repo serve: not running %s: %v; serving in this process\n", lean, err)
		return
	}
	if diff := buildDiff(own, other); diff != "" {
		fmt.Fprintf(os.Stderr, "upgrade-repo serve: not running %s, from another build (%s); serving in this process\n", lean, diff)
		return
	}
	_ = cli.ExecServe(lean, self, version, args) // returns on failure, or when handed back: serve in this process
}

// buildDiff returns what tells two builds apart, or "" when they are of one build: the Go
// version, the main module's version, the build settings that name the source and how it was
// linked (VCS revision, time and state, -ldflags, which carries the version stamp), and the
// version of every module both link.
func buildDiff(a, b *debug.BuildInfo) string {
	if a.GoVersion != b.GoVersion {
		return fmt.Sprintf("Go %s, %s", a.GoVersion, b.GoVersion)
	}
	if a.Main.Version != b.Main.Version || a.Main.Sum != b.Main.Sum {
		return fmt.Sprintf("version %s, %s", a.Main.Version, b.Main.Version)
	}
	for _, key := range []string{"vcs.revision", "vcs.time", "vcs.modified", "-ldflags", "-tags", "GOEXPERIMENT"} {
		if va, vb := setting(a, key), setting(b, key); va != vb {
			return fmt.Sprintf("%s %q, %q", key, va, vb)
		}
	}
	mods := make(map[string]string, len(a.Deps))
	for _, m := range a.Deps {
		mods[m.Path] = m.Version + " " + m.Sum
	}
	for _, m := range b.Deps {
		if v, ok := mods[m.Path]; ok && v != m.Version+" "+m.Sum {
			return fmt.Sprintf("module %s %s, %s", m.Path, v, m.Version)
		}
	}
	return ""
}

// setting returns the value of a build setting, "" when it is not set.
func setting(bi *debug.BuildInfo, key string) string {
	for _, s := range bi.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}
