package inspect_test

import (
	"bytes"
	"crypto/sha512"
	"encoding/hex"
	"hash"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/iso/inspect"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
)

// image builds a small release-like ISO with xorriso and opens it.
func image(t *testing.T) (*iso.FS, *os.File, []byte) {
	t.Helper()
	isotest.RequireXorriso(t)
	src := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(src, "bundle", "images"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "harvester-release.yaml"), []byte("harvester: v1.6.0\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "bundle", "images", "a.tar.zst"), []byte(strings.Repeat("layer", 5000)), 0o600))
	require.NoError(t, os.Symlink("harvester-release.yaml", filepath.Join(src, "release.yaml")))
	path := isotest.Build(t, src)
	fsys, f, err := iso.OpenFile(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return fsys, f, data
}

func TestVerifyAndDigest(t *testing.T) {
	t.Parallel()
	fsys, f, data := image(t)
	rep, err := inspect.Verify(t.Context(), fsys, int64(len(data)))
	require.NoError(t, err)
	require.Equal(t, 2, rep.Files)
	require.Equal(t, 1, rep.Links)
	require.Equal(t, int64(len("harvester: v1.6.0\n")+5*5000), rep.Bytes)
	want := sha512.Sum512(data)
	got, err := inspect.Digest(t.Context(), f, int64(len(data)), sha512.New())
	require.NoError(t, err)
	require.Equal(t, want[:], got)

	// An image cut short: the extents that now lie outside it are named.
	_, err = inspect.Verify(t.Context(), fsys, 40000)
	require.ErrorContains(t, err, "lies outside the image of 40000 bytes")
}

func TestExtract(t *testing.T) {
	t.Parallel()
	fsys, _, _ := image(t)
	dir := filepath.Join(t.TempDir(), "out")
	log := slog.New(slog.DiscardHandler)
	n, err := inspect.Extract(t.Context(), log, fsys, dir, []string{"."})
	require.NoError(t, err)
	require.Equal(t, inspect.Extracted{Files: 2, Dirs: 3, Links: 1, Bytes: int64(len("harvester: v1.6.0\n") + 5*5000)}, n)
	b, err := os.ReadFile(filepath.Join(dir, "release.yaml"))
	require.NoError(t, err)
	require.Equal(t, "harvester: v1.6.0\n", string(b))
	st, err := os.Stat(filepath.Join(dir, "bundle", "images", "a.tar.zst"))
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o600), st.Mode().Perm(), "modes are kept")

	// Nothing is overwritten.
	_, err = inspect.Extract(t.Context(), log, fsys, dir, []string{"harvester-release.yaml"})
	require.ErrorIs(t, err, fs.ErrExist)
}

func TestModeString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		m    fs.FileMode
		want string
		perm uint32
	}{
		{m: 0o644, want: "-rw-r--r--", perm: 0o644},
		{m: fs.ModeDir | 0o755, want: "drwxr-xr-x", perm: 0o755},
		{m: fs.ModeSymlink | 0o777, want: "lrwxrwxrwx", perm: 0o777},
		{m: fs.ModeSetuid | 0o755, want: "-rwsr-xr-x", perm: 0o4755},
		{m: fs.ModeSetgid | 0o644, want: "-rw-r-Sr--", perm: 0o2644},
		{m: fs.ModeDir | fs.ModeSticky | 0o777, want: "drwxrwxrwt", perm: 0o1777},
		{m: fs.ModeDevice | fs.ModeCharDevice | 0o600, want: "crw-------", perm: 0o600},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, inspect.ModeString(tt.m), tt.want)
		require.Equal(t, tt.perm, inspect.PosixPerm(tt.m), tt.want)
	}
	for _, p := range []string{"/", "", "bundle/", "/bundle/../bundle"} {
		c, err := inspect.CleanPath(p)
		require.NoError(t, err)
		require.Contains(t, []string{".", "bundle"}, c)
	}
}

// sha512Want is the SHA-512 sum an image is checked against (checksum.Digest's part here).
type sha512Want struct{ sum []byte }

func (w sha512Want) NewHash() hash.Hash { return sha512.New() }
func (w sha512Want) Matches(raw []byte) (string, bool, error) {
	return "sha512:" + hex.EncodeToString(raw), bytes.Equal(raw, w.sum), nil
}
func (w sha512Want) String() string { return "sha512:" + hex.EncodeToString(w.sum) }

func TestCheck(t *testing.T) {
	t.Parallel()
	fsys, f, data := image(t)
	sum := sha512.Sum512(data)
	tests := []struct {
		name    string
		want    inspect.Want
		wantErr error
		// wantSum is Report.Checksum.
		wantSum string
	}{
		{name: "no digest asked for"},
		{name: "the image's digest", want: sha512Want{sum[:]}, wantSum: "sha512:" + hex.EncodeToString(sum[:])},
		{name: "another digest", want: sha512Want{make([]byte, 64)}, wantErr: inspect.ErrMismatch, wantSum: "sha512:" + hex.EncodeToString(sum[:])},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep, err := inspect.Check(t.Context(), fsys, f, int64(len(data)), tt.want)
			require.ErrorIs(t, err, tt.wantErr)
			require.Equal(t, tt.wantErr == nil, rep.OK)
			require.Equal(t, tt.wantSum, rep.Checksum)
			require.Equal(t, 2, rep.Files, "every file read, whatever the digest")
		})
	}
}
