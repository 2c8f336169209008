package repo

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestETag(t *testing.T) {
	t.Parallel()
	a := etag("sha512:aa", "bundle/a.tar.zst", 100)
	require.Equal(t, a, etag("sha512:aa", "bundle/a.tar.zst", 100), "the same on every node")
	require.Regexp(t, `^"[0-9a-f]{32}"$`, a)
	for _, other := range []string{
		etag("sha512:bb", "bundle/a.tar.zst", 100),
		etag("sha512:aa", "bundle/b.tar.zst", 100),
		etag("sha512:aa", "bundle/a.tar.zst", 101),
		etag("sha512:aa", "bundle/a.tar.zst\x00", 100),
	} {
		require.NotEqual(t, a, other)
	}
}

func TestFSName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
		err      bool
	}{
		{"/", ".", false},
		{"", ".", false},
		{"/a/b/", "a/b", false},
		{"/a/../../b", "b", false},
		{"/../../../etc/passwd", "etc/passwd", false},
		{"//a//b", "a/b", false},
		{"/a\\b", "", true},
		{"/a\x00b", "", true},
	}
	for _, tt := range tests {
		got, err := fsName(tt.in)
		if tt.err {
			require.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got, tt.in)
	}
}
