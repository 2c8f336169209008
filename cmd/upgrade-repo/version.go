package main

import (
	"context"
	"flag"
	"fmt"
	"runtime/debug"
)

// version is set at link time (-X main.version=...); otherwise the module build info is used.
var version = ""

// runVersion prints the version of this binary: the link-time version, else the module version
// and VCS revision the Go toolchain recorded.
func runVersion(_ context.Context, a *app, args []string) error {
	fset := flag.NewFlagSet("version", flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	fset.Usage = func() {
		fmt.Fprintln(fset.Output(), "usage: upgrade-repo version (or upgrade-repo --version)\n  prints the version of this binary")
	}
	if help, err := parseFlags(a.stdout, fset, args); help || err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return fmt.Errorf("%w: version takes no arguments, got %q", errUsage, fset.Args())
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
