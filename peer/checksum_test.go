package peer_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer"
)

// ParseChecksum is the one reader of an ISO checksum (--iso-checksum, a Version's, a plan's):
// the forms people write are accepted and name the same lower-case digest.
func TestParseChecksum(t *testing.T) {
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
			got, err := peer.ParseChecksum(tt.in)
			if !tt.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, lower, got)
		})
	}
}
