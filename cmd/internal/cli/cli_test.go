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
		help, err := ParseFlags(fset, tt.args)
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

func TestParseFlagsHelpShowsLongFlags(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	fset := flag.NewFlagSet("t", flag.ContinueOnError)
	fset.SetOutput(&out)
	fset.String("kubeconfig", "", "kubeconfig `file`")
	fset.String("n", "", "namespace")
	help, err := ParseFlags(fset, []string{"--help"})
	require.NoError(t, err)
	require.True(t, help)
	require.Contains(t, out.String(), "  --kubeconfig file\n")
	require.Contains(t, out.String(), "  -n string\n")
	require.Equal(t, &out, fset.Output(), "the output is given back")
}

func TestExitStatusHelp(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0, ExitStatus(fmt.Errorf("iso ls: %w", flag.ErrHelp)))
}
