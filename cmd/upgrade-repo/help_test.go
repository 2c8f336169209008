package main

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/cmd/internal/cli"
)

// commandPaths lists every command and subcommand of upgrade-repo as the words that run it.
func commandPaths() [][]string {
	subs := map[string][]string{
		"iso":     {"ls", "stat", "cat", "info", "extract", "verify"},
		"release": {"pack"},
		"mirror":  {"hosts"},
		"step":    {"kubeadm"},
		"upgrade": slices.Sorted(maps.Keys(upgradeVerbs())),
	}
	paths := [][]string{{}}
	for _, name := range slices.Sorted(maps.Keys(commands())) {
		paths = append(paths, []string{name})
		for _, sub := range subs[name] {
			paths = append(paths, []string{name, sub})
		}
	}
	return paths
}

// The usage asked for (--help, -h; help for the commands with subcommands) goes to stdout with
// exit status 0; the usage beside a usage error goes to stderr with exit status 2, and stdout
// stays empty.
func TestHelpToStdoutUsageErrorsToStderr(t *testing.T) {
	t.Parallel()
	for _, path := range commandPaths() {
		name := strings.Join(append([]string{"upgrade-repo"}, path...), " ")
		asks := [][]string{{"--help"}, {"-h"}}
		if len(path) == 0 || slices.Contains([]string{"iso", "release", "mirror", "step", "upgrade"}, path[len(path)-1]) {
			asks = append(asks, []string{"help"})
		}
		for _, ask := range asks {
			t.Run(name+" "+ask[0], func(t *testing.T) {
				t.Parallel()
				var stdout, stderr bytes.Buffer
				err := run(t.Context(), append(slices.Clone(path), ask...), &stdout, &stderr)
				require.NoError(t, err)
				require.Equal(t, 0, cli.ExitStatus(err))
				require.Contains(t, stdout.String(), "usage: ")
				require.Empty(t, stderr.String())
			})
		}
		t.Run(name+" --no-such-flag", func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), append(slices.Clone(path), "--no-such-flag"), &stdout, &stderr)
			require.ErrorIs(t, err, errUsage)
			require.Equal(t, 2, cli.ExitStatus(err))
			require.Empty(t, stdout.String())
		})
	}
	// A dispatcher given nothing shows its usage on stderr.
	for _, path := range [][]string{{}, {"iso"}, {"release"}, {"upgrade"}, {"mirror"}} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), path, &stdout, &stderr)
		require.ErrorIs(t, err, errUsage, "%q", path)
		require.Empty(t, stdout.String(), "%q", path)
		require.Contains(t, stderr.String(), "usage: ", "%q", path)
	}
	// The serve command alone, as upgrade-repo-serve runs it, takes help too.
	var stdout, stderr bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"serve", "help"}, &stdout, &stderr))
	require.Contains(t, stdout.String(), "usage: upgrade-repo serve")
	require.Empty(t, stderr.String())
}
