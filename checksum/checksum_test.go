package checksum_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/checksum"
)

var lower = strings.Repeat("0123456789abcdef", 8)

// Parse reads every form people write and names the same digest; Pattern accepts exactly what
// Parse accepts.
func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		ok       bool
	}{
		{name: "prefixed", in: "sha512:" + lower, ok: true},
		{name: "bare", in: lower, ok: true},
		{name: "upper case", in: "SHA512:" + strings.ToUpper(lower), ok: true},
		{name: "mixed case algorithm", in: "Sha512:" + lower, ok: true},
		{name: "blanks around", in: "  sha512:" + lower + "\n", ok: true},
		{name: "blank inside", in: "sha512: " + lower},
		{name: "other algorithm", in: "sha256:" + lower[:64]},
		{name: "short", in: "sha512:" + lower[:126]},
		{name: "long", in: lower + "0"},
		{name: "not hex", in: "sha512:" + strings.Repeat("z", 128)},
		{name: "prefix twice", in: "sha512:sha512:" + lower},
		{name: "empty", in: ""},
	}
	re := regexp.MustCompile(checksum.Pattern)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.ok, re.MatchString(tt.in), "Pattern and Parse must agree")
			got, err := checksum.Parse(tt.in)
			if !tt.ok {
				require.ErrorIs(t, err, checksum.ErrSyntax)
				require.True(t, got.IsZero())
				return
			}
			require.NoError(t, err)
			require.Equal(t, lower, got.Hex())
			require.Equal(t, "sha512:"+lower, got.String())
			require.True(t, checksum.IsHex(got.Hex()))
		})
	}
}

func TestParseNamesTheAlgorithm(t *testing.T) {
	t.Parallel()
	_, err := checksum.Parse("md5:" + lower[:32])
	require.ErrorContains(t, err, `algorithm "md5" is not supported`)
}

func TestSum(t *testing.T) {
	t.Parallel()
	var zero checksum.Sum
	require.True(t, zero.IsZero())
	require.Empty(t, zero.Hex())
	require.Empty(t, zero.String())
	require.False(t, checksum.IsHex(strings.ToUpper(lower)), "only the lower-case form is the canonical one")
	a, b := checksum.MustParse(lower), checksum.MustParse("SHA512:"+strings.ToUpper(lower))
	require.True(t, a.Equal(b))
	require.False(t, a.Equal(checksum.MustParse(strings.Repeat("f", 128))))
	require.Panics(t, func() { checksum.MustParse("sha512:") })
}

func TestSame(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, a, b string
		want       bool
	}{
		{name: "prefixed and bare", a: "sha512:" + lower, b: lower, want: true},
		{name: "upper and lower case", a: "SHA512:" + strings.ToUpper(lower), b: lower, want: true},
		{name: "different digests", a: lower, b: strings.Repeat("f", 128)},
		{name: "one unusable", a: "md5:1234", b: lower},
		{name: "the same unusable text", a: "md5:1234", b: "md5:1234", want: true},
		{name: "both empty", a: "", b: "", want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, checksum.Same(tt.a, tt.b))
			require.Equal(t, tt.want, checksum.Same(tt.b, tt.a))
		})
	}
}

func TestParseFile(t *testing.T) {
	t.Parallel()
	other := strings.Repeat("f", 128)
	tests := []struct {
		name, file, want, err string
	}{
		{name: "sha512sum, one line", file: lower + "  harvester.iso\n", want: lower},
		{name: "only the digest", file: lower + "\n", want: lower},
		{name: "sha512sum, binary mode", file: other + "  a.iso\n" + lower + " *harvester.iso\n", want: lower},
		{name: "BSD form", file: "SHA512 (harvester.iso) = " + lower + "\n", want: lower},
		{name: "comments and blanks", file: "# release v1\n\n" + lower + "  harvester.iso\n", want: lower},
		{name: "several, none named", file: other + "  a.iso\n" + lower + "  b.iso\n", err: "no line for harvester.iso among 2"},
		{name: "BSD form broken", file: "SHA512 (harvester.iso) " + lower + "\n", err: "want SHA512 (NAME) = HEX"},
		{name: "not a checksum", file: "<html>not found</html>\n", err: "want 128 hex digits"},
		{name: "empty", file: "", err: "no line for harvester.iso among 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := checksum.ParseFile(strings.NewReader(tt.file), "harvester.iso")
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got.Hex())
		})
	}
}

// The Version CRD validates isoChecksum with Pattern itself, so a Version the API server accepts
// is one every part of the product accepts.
func TestCRDUsesPattern(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		"../charts/upgrade-repo/crds/management.harvesterhci.io_versions.yaml",
		"../manifests/crd/management.harvesterhci.io_versions.yaml",
	} {
		b, err := os.ReadFile(filepath.FromSlash(p))
		require.NoError(t, err)
		require.Contains(t, string(b), "pattern: "+checksum.Pattern, p)
	}
}
