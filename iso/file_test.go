package iso_test

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso"
)

// CheckFile says what a name that cannot be an ISO image file is instead, before anything is read.
func TestCheckFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "release.iso")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	wd, err := os.Getwd()
	require.NoError(t, err)
	tests := []struct {
		name    string
		path    string
		notFile bool   // the error wraps iso.ErrNotFile
		missing bool   // the error wraps fs.ErrNotExist
		want    string // what the error says; "" for none
	}{
		{name: "a regular file", path: file},
		{name: "a directory", path: dir, notFile: true, want: dir + " is a directory, not an ISO image file"},
		{name: "an ftp URL", path: "ftp://host/release.iso", notFile: true, want: "ftp://host/release.iso is a URL (ftp://), not an ISO image file"},
		{name: "an http URL", path: "https://host/release.iso", notFile: true, want: "is a URL (https://)"},
		{name: "a socket", path: sock, notFile: true, want: sock + " is a special file (a device, a socket or a pipe; mode S"},
		{name: "a device", path: "/dev/null", notFile: true, want: "/dev/null is a special file (a device, a socket or a pipe; mode D"},
		{name: "nothing", path: "", notFile: true, want: "no file named"},
		{name: "missing, absolute", path: filepath.Join(dir, "nope.iso"), missing: true, want: "stat " + filepath.Join(dir, "nope.iso") + ": no such file or directory"},
		{name: "missing, relative", path: "nope.iso", missing: true, want: "(a relative path, looked up in " + wd + ")"},
		{name: "a file path with :// inside", path: filepath.Join(dir, "a://b"), missing: true, want: "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := iso.CheckFile(tc.path)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, tc.notFile, errors.Is(err, iso.ErrNotFile), err.Error())
			require.Equal(t, tc.missing, errors.Is(err, fs.ErrNotExist), err.Error())
		})
	}
}

// OpenFile refuses a directory with CheckFile's words, not with the image's size.
func TestOpenFileDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, _, err := iso.OpenFile(dir)
	require.ErrorIs(t, err, iso.ErrNotFile)
	require.EqualError(t, err, dir+" is a directory, not an ISO image file")
}
