package checksum_test

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/checksum"
)

func TestDigest(t *testing.T) {
	t.Parallel()
	data := []byte("an image")
	s512, s256 := sha512.Sum512(data), sha256.Sum256(data)
	hex512, hex256 := hex.EncodeToString(s512[:]), hex.EncodeToString(s256[:])
	tests := []struct {
		name, in string
		wantErr  bool
		// want is the digest as String writes it.
		want string
	}{
		{name: "sha512 prefixed", in: "sha512:" + hex512, want: "sha512:" + hex512},
		{name: "sha512 bare, upper case", in: strings.ToUpper(hex512), want: "sha512:" + hex512},
		{name: "sha256", in: "SHA256:" + hex256, want: "sha256:" + hex256},
		{name: "another algorithm", in: "md5:00", wantErr: true},
		{name: "too short", in: "sha512:00", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := checksum.ParseDigest(tt.in)
			if tt.wantErr {
				require.ErrorContains(t, err, "want sha512:HEX (or its 128 hex digits alone) or sha256:HEX")
				require.True(t, d.IsZero())
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, d.String())
			h := d.NewHash()
			h.Write(data)
			got, ok, err := d.Matches(h.Sum(nil))
			require.NoError(t, err)
			require.True(t, ok, "the image's own sum matches")
			require.Equal(t, tt.want, got)
			h = d.NewHash()
			h.Write([]byte("another image"))
			_, ok, err = d.Matches(h.Sum(nil))
			require.NoError(t, err)
			require.False(t, ok, "another image's sum does not")
		})
	}
	require.True(t, checksum.Digest{}.IsZero())
}
