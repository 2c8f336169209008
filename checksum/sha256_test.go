package checksum_test

import (
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/checksum"
)

var lower256 = lower[:64]

func TestParseSHA256(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		ok       bool
	}{
		{name: "prefixed", in: "sha256:" + lower256, ok: true},
		{name: "bare", in: lower256, ok: true},
		{name: "upper case", in: "SHA256:" + strings.ToUpper(lower256), ok: true},
		{name: "blanks around", in: " " + lower256 + "\n", ok: true},
		{name: "sha512", in: "sha512:" + lower},
		{name: "short", in: lower256[:63]},
		{name: "not hex", in: strings.Repeat("z", 64)},
		{name: "empty", in: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := checksum.ParseSHA256(tt.in)
			if !tt.ok {
				require.ErrorIs(t, err, checksum.ErrSyntax)
				require.True(t, got.IsZero())
				return
			}
			require.NoError(t, err)
			require.Equal(t, lower256, got.Hex())
			require.Equal(t, "sha256:"+lower256, got.String())
			require.True(t, got.Equal(checksum.MustParseSHA256(lower256)))
		})
	}
}

func TestSHA256Of(t *testing.T) {
	t.Parallel()
	got, err := checksum.SHA256Of(strings.NewReader("kubeadm"))
	require.NoError(t, err)
	want := sha256.Sum256([]byte("kubeadm"))
	n, err := checksum.NewSHA256(want[:])
	require.NoError(t, err)
	require.True(t, got.Equal(n))
	_, err = checksum.NewSHA256(want[:31])
	require.ErrorIs(t, err, checksum.ErrSyntax)
	var zero checksum.SHA256
	require.Empty(t, zero.Hex())
	require.Empty(t, zero.String())
}

func TestParseSHA256List(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, err string
		want            map[string]string
	}{
		{name: "sha256sum output", body: strings.Repeat("a", 64) + "  kubeadm\n" + strings.Repeat("B", 64) + " *kubelet\n",
			want: map[string]string{"kubeadm": strings.Repeat("a", 64), "kubelet": strings.Repeat("b", 64)}},
		{name: "BSD form and comments", body: "# v1.33\n\nSHA256 (kubeadm) = " + lower256 + "\n", want: map[string]string{"kubeadm": lower256}},
		{name: "short digest", body: "abc  kubeadm\n", err: "line 1"},
		{name: "not hex", body: "\n" + strings.Repeat("z", 64) + "  kubeadm\n", err: "line 2"},
		{name: "no name", body: lower256 + "\n", err: "line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := checksum.ParseSHA256List(strings.NewReader(tt.body))
			if tt.err != "" {
				require.ErrorIs(t, err, checksum.ErrSyntax)
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			hexes := map[string]string{}
			for k, v := range got {
				hexes[k] = v.Hex()
			}
			require.Equal(t, tt.want, hexes)
		})
	}
}
