package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/acquire"
	"github.com/upgrade-repo/upgrade-repo/peer"
)

// TestChecksumParsersAgree keeps the two readers of --iso-checksum in step: serve reads it with
// acquire, the agent with acquire and peer, so both must accept the same inputs and name the same
// digest.
func TestChecksumParsersAgree(t *testing.T) {
	t.Parallel()
	lower := strings.Repeat("0123456789abcdef", 8)
	tests := []struct {
		name, in string
		ok       bool
	}{
		{name: "prefixed", in: "sha512:" + lower, ok: true},
		{name: "bare", in: lower, ok: true},
		{name: "upper case", in: "SHA512:" + strings.ToUpper(lower), ok: true},
		{name: "spaces", in: "  sha512:" + lower + "\n", ok: true},
		{name: "other algorithm", in: "sha256:" + lower[:64]},
		{name: "short", in: "sha512:" + lower[:126]},
		{name: "not hex", in: "sha512:" + strings.Repeat("z", 128)},
		{name: "empty", in: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, aerr := acquire.ParseChecksum(tt.in)
			p, perr := peer.ParseChecksum(tt.in)
			if !tt.ok {
				require.Error(t, aerr)
				require.Error(t, perr)
				return
			}
			require.NoError(t, aerr)
			require.NoError(t, perr)
			require.Equal(t, lower, p)
			require.Equal(t, a.Hex(), p)
		})
	}
}
