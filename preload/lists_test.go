package preload_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload"
)

func TestListArchive(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		release string
		refs    []string
		// file, when set, is written as the release's list instead of saving refs.
		file    string
		want    []string
		wantErr string
	}{
		{name: "sorted without repeats", release: "v1.5.2", refs: []string{"docker.io/b:1", "docker.io/a:1", "docker.io/b:1"}, want: []string{"docker.io/a:1", "docker.io/b:1"}},
		{name: "empty list", release: "v1.5.2", refs: nil, want: nil},
		{name: "path separator in release", release: "../etc", refs: []string{"a"}, wantErr: `release name "../etc"`},
		{name: "dot release", release: "..", refs: []string{"a"}, wantErr: `release name ".."`},
		{name: "empty release", release: "", refs: []string{"a"}, wantErr: `release name ""`},
		{name: "white space in a reference", release: "v1", refs: []string{"docker.io/a:1 x"}, wantErr: `"docker.io/a:1 x": contains white space`},
		{name: "comments and blank lines are skipped", release: "v1", file: "# list\n\ndocker.io/a:1\n  docker.io/b:1  \n", want: []string{"docker.io/a:1", "docker.io/b:1"}},
		{name: "two words on a line", release: "v1", file: "docker.io/a:1\ndocker.io/b:1 docker.io/c:1\n", wantErr: `image_list_all.txt:2: "docker.io/b:1 docker.io/c:1" is not one image reference`},
		{name: "a line too long", release: "v1", file: strings.Repeat("x", 5000) + "\n", wantErr: "token too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			a := preload.NewListArchive(dir)
			var err error
			if tt.file != "" {
				require.NoError(t, os.MkdirAll(filepath.Join(dir, tt.release), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(dir, tt.release, preload.ListFile), []byte(tt.file), 0o644))
			} else {
				err = a.Save(tt.release, tt.refs)
			}
			var got []string
			if err == nil {
				got, err = a.Load(tt.release)
			}
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			rs, err := a.Releases()
			require.NoError(t, err)
			require.Equal(t, []string{tt.release}, rs)
		})
	}
}

func TestListArchiveReleasesAndDrop(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "images-lists-archive")
	a := preload.NewListArchive(dir)
	rs, err := a.Releases()
	require.NoError(t, err)
	require.Empty(t, rs, "an archive never written holds nothing")
	require.NoError(t, a.Save("v2", []string{"docker.io/a:2"}))
	require.NoError(t, a.Save("v1", []string{"docker.io/a:1"}))
	require.NoError(t, a.Save("v1", []string{"docker.io/a:1", "docker.io/b:1"}))
	// A folder without a list (a save cut short before its rename) is no release.
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "v0"), 0o755))
	rs, err = a.Releases()
	require.NoError(t, err)
	require.Equal(t, []string{"v1", "v2"}, rs)
	got, err := a.Load("v1")
	require.NoError(t, err)
	require.Equal(t, []string{"docker.io/a:1", "docker.io/b:1"}, got)
	ents, err := os.ReadDir(filepath.Join(dir, "v1"))
	require.NoError(t, err)
	require.Len(t, ents, 1, "no temporary file stays behind")

	require.NoError(t, a.Drop("v1"))
	require.NoError(t, a.Drop("v1"))
	_, err = a.Load("v1")
	require.ErrorIs(t, err, os.ErrNotExist)
	rs, err = a.Releases()
	require.NoError(t, err)
	require.Equal(t, []string{"v2"}, rs)
}
