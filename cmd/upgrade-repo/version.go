package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

// version is set at link time (-X main.version=...); otherwise the module build info is used.
var version = ""

// runVersion prints the version of this binary: the link-time version, else the module version
// and VCS revision the Go toolchain recorded.
func runVersion(_ context.Context, a *app, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: version takes no arguments, got %q", errUsage, args)
	}
	v := version
	if v == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			v = bi.Main.Version
			if rev := setting(bi, "vcs.revision"); rev != "" {
				v += " " + rev
			}
		}
	}
	_, err := fmt.Fprintln(a.stdout, "upgrade-repo", v)
	return err
}
