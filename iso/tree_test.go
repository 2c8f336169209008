package iso_test

import (
	"cmp"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso"
)

// TestWithTree opens each tree an image carries: every tree indexes the same files with the same
// bytes (the same extents), under the names that tree spells (xorriso leaves symbolic links out
// of the Joliet tree); asking for a tree the image lacks is ErrNoTree.
func TestWithTree(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		tree iso.Tree
		// want is the tree Open reads; empty when it must fail with ErrNoTree.
		want string
		// names must exist in the tree read.
		names []string
	}{
		{name: "auto prefers rock ridge", args: []string{"-R", "-J"}, tree: iso.TreeAuto, want: "rockridge",
			names: []string{longName, "MixedCase.Name.With.Dots", "rel-link"}},
		{name: "rock ridge", args: []string{"-R", "-J"}, tree: iso.TreeRockRidge, want: "rockridge",
			names: []string{longName, "MixedCase.Name.With.Dots"}},
		{name: "joliet beside rock ridge", args: []string{"-R", "-J"}, tree: iso.TreeJoliet, want: "joliet",
			names: []string{"MixedCase.Name.With.Dots", "bundle/harvester/images/a.tar.zst"}},
		{name: "primary beside rock ridge and joliet", args: []string{"-R", "-J"}, tree: iso.TreePrimary, want: "primary",
			names: []string{"BUNDLE/HARVESTE/IMAGES/A_TAR.ZST", "MIXEDCAS.DOT"}},
		{name: "auto prefers joliet to primary", args: []string{"--norock", "-J"}, tree: iso.TreeAuto, want: "joliet",
			names: []string{"MixedCase.Name.With.Dots"}},
		{name: "no rock ridge", args: []string{"--norock", "-J"}, tree: iso.TreeRockRidge},
		{name: "no joliet", args: []string{"--norock"}, tree: iso.TreeJoliet},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, image := fixtureImage(t, false, tt.args...)
			f, size := openFile(t, image)
			fsys, err := iso.Open(f, size, iso.WithTree(tt.tree))
			if tt.want == "" {
				require.ErrorIs(t, err, iso.ErrNoTree)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, fsys.Info().Tree)
			for _, n := range tt.names {
				_, err := fsys.Lstat(n)
				require.NoError(t, err, n)
			}
			// The default tree of the same image indexes the same entries and the same bytes.
			def := openImage(t, image)
			defExtents, defLinks := dataExtents(t, def)
			got, links := dataExtents(t, fsys)
			require.Equal(t, defExtents, got)
			if tt.want == "joliet" {
				require.Zero(t, links)
				require.Equal(t, def.Entries()-defLinks, fsys.Entries())
			} else {
				require.Equal(t, def.Entries(), fsys.Entries())
			}
			if tt.want == "primary" {
				_, err := fsys.Stat("MixedCase.Name.With.Dots")
				require.ErrorIs(t, err, fs.ErrNotExist, "primary names are ISO 9660 d-characters")
				require.NoError(t, fs.WalkDir(fsys, ".", func(p string, _ fs.DirEntry, err error) error {
					require.Equal(t, strings.ToUpper(p), p, "primary name %s", p)
					return err
				}))
			}
		})
	}
}

// dataExtents lists the extents of every regular file of fsys, sorted by offset, and counts the
// symbolic links.
func dataExtents(t *testing.T, fsys *iso.FS) (extents []iso.Extent, links int) {
	t.Helper()
	require.NoError(t, fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			links++
		}
		if !d.Type().IsRegular() {
			return nil
		}
		ext, err := fsys.Extents(p)
		extents = append(extents, ext...)
		return err
	}))
	slices.SortFunc(extents, func(a, b iso.Extent) int { return cmp.Compare(a.Offset, b.Offset) })
	return extents, links
}
