package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

// version is set at link time (-X main.version=...); otherwise the module build info is used.
var version = ""

func runVersion(_ context.Context, a *app, _ []string) error {
	v := version
	if v == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			v = bi.Main.Version
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					v += " " + s.Value
				}
			}
		}
	}
	_, err := fmt.Fprintln(a.stdout, "upgrade-repo", v)
	return err
}
