package iso_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
)

func TestTreesMatchXorriso(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args      []string // xorriso native arguments before -as mkisofs
		mkisofs   []string
		tree      string
		rr        bool
		joliet    bool
		fromSrc   bool // names, modes, times and bytes equal the source tree
		wantNames []string
	}{
		{name: "rock ridge and joliet", mkisofs: []string{"-R", "-J"}, tree: "rockridge", rr: true, joliet: true, fromSrc: true,
			wantNames: []string{longName, "d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/deep.txt", "abs-link", "empty-dir", "empty-file"}},
		{name: "rock ridge only", mkisofs: []string{"-R"}, tree: "rockridge", rr: true, fromSrc: true,
			wantNames: []string{longName, "MixedCase.Name.With.Dots", "rel-link"}},
		{name: "rock ridge relocated deep directories", args: []string{"-compliance", "deep_paths_off"},
			mkisofs: []string{"-R", "-rr_reloc_dir", "rr_moved"}, tree: "rockridge", rr: true, fromSrc: true,
			wantNames: []string{"d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/d11", "d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/deep.txt"}},
		{name: "rock ridge relocated to the root", args: []string{"-compliance", "deep_paths_off"},
			mkisofs: []string{"-R"}, tree: "rockridge", rr: true, fromSrc: true,
			wantNames: []string{"d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/deep.txt"}},
		{name: "joliet only", mkisofs: []string{"--norock", "-J", "-joliet-long"}, tree: "joliet", joliet: true,
			wantNames: []string{"MixedCase.Name.With.Dots", "d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/deep.txt", "empty-file"}},
		{name: "plain level 1", mkisofs: []string{"--norock", "-iso-level", "1"}, tree: "primary",
			wantNames: []string{"HARVESTE.YAM", "EMPTY_DI", "D1/D2/D3/D4/D5/D6/D7/D8/D9/D10/DEEP.TXT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			isotest.RequireXorriso(t)
			src := t.TempDir()
			writeFixture(t, src, false)
			image := filepath.Join(t.TempDir(), "image.iso")
			args := append(append(append([]string{"-abort_on", "FAILURE"}, tt.args...), "-as", "mkisofs", "-quiet"), tt.mkisofs...)
			isotest.Xorriso(t, append(args, "-o", image, src)...)

			fsys := openImage(t, image)
			info := fsys.Info()
			require.Equal(t, tt.tree, info.Tree)
			require.Equal(t, tt.rr, info.RockRidge)
			require.Equal(t, tt.joliet, info.Joliet)
			require.True(t, info.Primary)
			require.Equal(t, "ISOIMAGE", info.VolumeID)
			st, err := os.Stat(image)
			require.NoError(t, err)
			require.Equal(t, st.Size(), info.ImageSize)
			require.LessOrEqual(t, info.Size, info.ImageSize)

			require.Equal(t, xorrisoListing(t, image), fsListing(t, fsys))
			requireSameFiles(t, fsys, xorrisoExtract(t, image))
			for _, n := range tt.wantNames {
				_, err := fsys.Stat(n)
				require.NoError(t, err, n)
			}
			require.NoError(t, fstest.TestFS(fsys, tt.wantNames...))
			if tt.fromSrc {
				requireSameAsSource(t, fsys, src)
			}
		})
	}
}

// requireSameAsSource checks names, types, permissions, times, link targets and bytes against
// the directory the image was made from.
func requireSameAsSource(t *testing.T, fsys *iso.FS, src string) {
	t.Helper()
	requireSameFiles(t, fsys, src)
	count := 0
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, err := filepath.Rel(src, p)
		require.NoError(t, err)
		rel = filepath.ToSlash(rel)
		want, err := os.Lstat(p)
		require.NoError(t, err)
		got, err := fsys.Lstat(rel)
		require.NoError(t, err, rel)
		count++
		require.Equal(t, want.Mode(), got.Mode(), rel)
		if want.Mode().Type() == fs.ModeSymlink {
			wt, err := os.Readlink(p)
			require.NoError(t, err)
			gt, err := fsys.ReadLink(rel)
			require.NoError(t, err)
			require.Equal(t, wt, gt, rel)
			return nil
		}
		if rel != "." {
			require.True(t, want.ModTime().Equal(got.ModTime()), "%s: %v != %v", rel, want.ModTime(), got.ModTime())
		}
		if want.Mode().IsRegular() {
			require.Equal(t, want.Size(), got.Size(), rel)
		}
		return nil
	}))
	require.Equal(t, count, fsys.Entries()+1, "entries in the source and the image")
}

func TestOpenFile(t *testing.T) {
	t.Parallel()
	src, image := fixtureImage(t, false, "-R", "-J")
	notISO := filepath.Join(t.TempDir(), "not.iso")
	require.NoError(t, os.WriteFile(notISO, make([]byte, 64<<10), 0o644))
	tests := []struct {
		name    string
		path    string
		wantErr string
	}{
		{name: "an image made by xorriso", path: image},
		{name: "no such file", path: filepath.Join(t.TempDir(), "missing.iso"), wantErr: "no such file"},
		{name: "not an image", path: notISO, wantErr: "open " + notISO},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fsys, f, err := iso.OpenFile(tc.path)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.Nil(t, f)
				return
			}
			require.NoError(t, err)
			defer f.Close()
			requireSameFiles(t, fsys, src)
		})
	}
}
