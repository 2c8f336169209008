package cli

import (
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
