package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBuildDiff(t *testing.T) {
	t.Parallel()
	base := func() *debug.BuildInfo {
		return &debug.BuildInfo{
			GoVersion: "go1.26.8",
			Main:      debug.Module{Path: "github.com/upgrade-repo/upgrade-repo", Version: "(devel)"},
			Deps: []*debug.Module{
				{Path: "golang.org/x/sys", Version: "v0.40.0", Sum: "h1:a"},
				{Path: "k8s.io/client-go", Version: "v0.34.4", Sum: "h1:b"},
			},
			Settings: []debug.BuildSetting{{Key: "-trimpath", Value: "true"}, {Key: "vcs.revision", Value: "abc"}},
		}
	}
	tests := []struct {
		name   string
		change func(b *debug.BuildInfo)
		want   string
	}{
		{"same build", func(*debug.BuildInfo) {}, ""},
		{"a module only one links", func(b *debug.BuildInfo) { b.Deps = b.Deps[:1] }, ""},
		{"a setting not compared", func(b *debug.BuildInfo) { b.Settings[0].Value = "false" }, ""},
		{"another toolchain", func(b *debug.BuildInfo) { b.GoVersion = "go1.25.1" }, "Go go1.26.8, go1.25.1"},
		{"another main version", func(b *debug.BuildInfo) { b.Main.Version = "v1.2.3" }, "version (devel), v1.2.3"},
		{"another revision", func(b *debug.BuildInfo) { b.Settings[1].Value = "def" }, `vcs.revision "abc", "def"`},
		{"a version stamp", func(b *debug.BuildInfo) {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: "-ldflags", Value: "-X main.version=v2"})
		}, `-ldflags "", "-X main.version=v2"`},
		{"a module of another version", func(b *debug.BuildInfo) {
			b.Deps[0] = &debug.Module{Path: "golang.org/x/sys", Version: "v0.39.0", Sum: "h1:c"}
		},
			"module golang.org/x/sys v0.40.0 h1:a, v0.39.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			other := base()
			tt.change(other)
			require.Equal(t, tt.want, buildDiff(base(), other))
		})
	}
}
