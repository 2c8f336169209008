package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExitStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("boom"), 1},
		{fmt.Errorf("%w: --iso is required", ErrUsage), 2},
		{fmt.Errorf("wait for the plan: %w", ErrTimeout), 3},
		{fmt.Errorf("step: %w", &ExitCodeError{Code: 86, Err: errors.New("kube-apiserver did not come up")}), 86},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, ExitStatus(tt.err), "%v", tt.err)
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args     []string
		wantHelp bool
		wantErr  bool
	}{
		{args: []string{"--n", "3"}},
		{args: []string{"-h"}, wantHelp: true},
		{args: []string{"--help"}, wantHelp: true},
		{args: []string{"--nope"}, wantErr: true},
		{args: []string{"--n", "x"}, wantErr: true},
	}
	for _, tt := range tests {
		fset := flag.NewFlagSet("t", flag.ContinueOnError)
		fset.SetOutput(io.Discard)
		fset.Int("n", 0, "")
		help, err := ParseFlags(io.Discard, fset, tt.args)
		require.Equal(t, tt.wantHelp, help, "%q", tt.args)
		if tt.wantErr {
			require.ErrorIs(t, err, ErrUsage, "%q", tt.args)
		} else {
			require.NoError(t, err, "%q", tt.args)
		}
	}
}

func TestLongFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{name: "long flag", in: "  -kubeconfig file\n    \tkubeconfig file\n", want: "  --kubeconfig file\n    \tkubeconfig file\n"},
		{name: "one letter keeps one dash", in: "  -o format\n    \toutput\n", want: "  -o format\n    \toutput\n"},
		{name: "already two dashes", in: "  --yes\n", want: "  --yes\n"},
		{name: "usage text untouched", in: "usage: x [-n NS] --iso FILE\n", want: "usage: x [-n NS] --iso FILE\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, LongFlags(tt.in))
		})
	}
}

// The usage asked for goes to stdout, with long flags written with two dashes; the usage shown
// beside a usage error goes to the flag set's output (stderr).
func TestParseFlagsHelpShowsLongFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		args     []string
		help     bool
		toStdout bool
	}{
		{name: "--help", args: []string{"--help"}, help: true, toStdout: true},
		{name: "-h", args: []string{"-h"}, help: true, toStdout: true},
		{name: "unknown flag", args: []string{"--nope"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			fset := flag.NewFlagSet("t", flag.ContinueOnError)
			fset.SetOutput(&stderr)
			fset.Usage = func() { fmt.Fprintln(fset.Output(), "usage: t [flags]"); fset.PrintDefaults() }
			fset.String("kubeconfig", "", "kubeconfig `file`")
			fset.String("n", "", "namespace")
			help, err := ParseFlags(&stdout, fset, tt.args)
			require.Equal(t, tt.help, help)
			require.Equal(t, !tt.help, errors.Is(err, ErrUsage))
			shown, quiet := stdout.String(), stderr.String()
			if !tt.toStdout {
				shown, quiet = quiet, shown
			}
			require.Contains(t, shown, "usage: t [flags]\n")
			require.Contains(t, shown, "  --kubeconfig file\n")
			require.Contains(t, shown, "  -n string\n")
			require.Empty(t, quiet)
			require.Equal(t, &stderr, fset.Output(), "the output is given back")
		})
	}
}

func TestExitStatusHelp(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0, ExitStatus(fmt.Errorf("iso ls: %w", flag.ErrHelp)))
}
