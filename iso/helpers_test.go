package iso_test

import (
	"bytes"
	"crypto/sha256"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
)

// longName is a file name of 230 bytes: Rock Ridge splits it over NM entries and a continuation
// area.
var longName = strings.Repeat("long-name-", 22) + "0123456789.bin"

// fixtureTime is the modification time of every fixture file.
var fixtureTime = time.Date(2024, 3, 5, 7, 9, 11, 0, time.UTC)

// writeFixture writes the standard fixture tree under dir: nested directories, a name over 200
// characters, symbolic links (relative, absolute, to a directory, dangling when dangling is set),
// a directory deeper than 8 levels, empty files and directories, modes and times.
func writeFixture(t *testing.T, dir string, dangling bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	file := func(name string, size int, mode os.FileMode) {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		require.NoError(t, os.WriteFile(p, data, mode))
		require.NoError(t, os.Chmod(p, mode))
	}
	file("harvester-release.yaml", 321, 0o644)
	file("bundle/metadata.yaml", 99, 0o644)
	file("bundle/harvester/images/a.tar.zst", 3*2048+17, 0o644)
	file("bundle/harvester/images-lists/a.txt", 2048, 0o600)
	file("bin/tool", 4096, 0o755)
	file("MixedCase.Name.With.Dots", 10, 0o644)
	file("empty-file", 0, 0o644)
	file(longName, 777, 0o640)
	file("d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/deep.txt", 55, 0o644)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "empty-dir"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/d11"), 0o700))
	require.NoError(t, os.Symlink("harvester-release.yaml", filepath.Join(dir, "rel-link")))
	require.NoError(t, os.Symlink("/bundle/harvester", filepath.Join(dir, "abs-link")))
	require.NoError(t, os.Symlink("../../bundle/metadata.yaml", filepath.Join(dir, "bin/up-link")))
	require.NoError(t, os.Symlink("d1/d2/d3/d4/d5/d6/d7/d8/d9", filepath.Join(dir, "deep-link")))
	if dangling {
		require.NoError(t, os.Symlink("does/not/exist", filepath.Join(dir, "dangling")))
		require.NoError(t, os.Symlink(strings.Repeat("very-long-target/", 20)+"x", filepath.Join(dir, "long-target")))
	}
	// Directories last, so that creating files did not touch their times.
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		return os.Chtimes(p, fixtureTime, fixtureTime)
	}))
}

// lsEntry is one line of `xorriso -find / -exec lsdl`, or the same facts from an FS.
type lsEntry struct {
	Mode   string
	UID    string
	GID    string
	Size   int64 // regular files only
	Target string
}

// xorrisoListing lists the image the way xorriso sees it.
func xorrisoListing(t *testing.T, image string) map[string]lsEntry {
	t.Helper()
	out, err := exec.Command("xorriso", "-indev", image, "-find", "/", "-exec", "lsdl").Output()
	require.NoError(t, err)
	got := map[string]lsEntry{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		q := strings.Index(line, " '/")
		require.Positive(t, q, "line %q", line)
		fields := strings.Fields(line[:q])
		require.GreaterOrEqual(t, len(fields), 8, "line %q", line)
		name := line[q+2:]
		var target string
		if i := strings.Index(name, "' -> '"); i >= 0 {
			name, target = name[:i+1], strings.TrimSuffix(name[i+6:], "'")
		}
		name = strings.TrimSuffix(strings.TrimPrefix(name, "'"), "'")
		name = strings.ReplaceAll(name, `'"'"'`, "'")
		e := lsEntry{Mode: fields[0], UID: fields[2], GID: fields[3], Target: target}
		if e.Mode[0] == '-' {
			e.Size, err = strconv.ParseInt(fields[4], 10, 64)
			require.NoError(t, err)
		}
		got[name] = e
	}
	return got
}

// fsListing lists fsys with the same facts as xorrisoListing.
func fsListing(t *testing.T, fsys *iso.FS) map[string]lsEntry {
	t.Helper()
	got := map[string]lsEntry{}
	require.NoError(t, fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		info, err := d.Info()
		require.NoError(t, err)
		st := info.Sys().(*iso.Stat)
		e := lsEntry{Mode: lsMode(info.Mode()), UID: strconv.Itoa(int(st.UID)), GID: strconv.Itoa(int(st.GID))}
		if info.Mode().IsRegular() {
			e.Size = info.Size()
		}
		if info.Mode().Type() == fs.ModeSymlink {
			e.Target, err = fsys.ReadLink(p)
			require.NoError(t, err)
		}
		name := "/" + p
		if p == "." {
			name = "/"
		}
		got[name] = e
		return nil
	}))
	return got
}

// lsMode formats a mode the way ls -l (and xorriso) do.
func lsMode(m fs.FileMode) string {
	b := []byte("----------")
	switch {
	case m.IsDir():
		b[0] = 'd'
	case m&fs.ModeSymlink != 0:
		b[0] = 'l'
	case m&fs.ModeCharDevice != 0:
		b[0] = 'c'
	case m&fs.ModeDevice != 0:
		b[0] = 'b'
	case m&fs.ModeNamedPipe != 0:
		b[0] = 'p'
	case m&fs.ModeSocket != 0:
		b[0] = 's'
	}
	const rwx = "rwxrwxrwx"
	for i := 0; i < 9; i++ {
		if m&(1<<(8-i)) != 0 {
			b[i+1] = rwx[i]
		}
	}
	special := func(pos int, set bool, lower, upper byte) {
		if !set {
			return
		}
		if b[pos] == '-' {
			b[pos] = upper
		} else {
			b[pos] = lower
		}
	}
	special(3, m&fs.ModeSetuid != 0, 's', 'S')
	special(6, m&fs.ModeSetgid != 0, 's', 'S')
	special(9, m&fs.ModeSticky != 0, 't', 'T')
	return string(b)
}

// xorrisoExtract extracts the whole image with xorriso into a new directory.
func xorrisoExtract(t *testing.T, image string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "x")
	out, err := exec.Command("xorriso", "-osirrox", "on", "-indev", image, "-extract", "/", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return dir
}

// requireSameFiles checks that every regular file of fsys reads, through ReadFile, Read and
// ReadAt, exactly the bytes of the file of the same name under dir, and that dir holds no more
// regular files than fsys.
func requireSameFiles(t *testing.T, fsys *iso.FS, dir string) {
	t.Helper()
	seen := 0
	require.NoError(t, fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		if !d.Type().IsRegular() {
			return nil
		}
		seen++
		want, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		require.NoError(t, err, "%s", p)
		got, err := fsys.ReadFile(p)
		require.NoError(t, err, "%s", p)
		require.Equal(t, sha256.Sum256(want), sha256.Sum256(got), "%s", p)
		f, err := fsys.Open(p)
		require.NoError(t, err)
		defer f.Close()
		all, err := io.ReadAll(f)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, all), "%s read", p)
		if len(want) > 3 {
			ra := f.(io.ReaderAt)
			buf := make([]byte, len(want)-3)
			n, err := ra.ReadAt(buf, 3)
			require.NoError(t, err)
			require.Equal(t, len(buf), n)
			require.True(t, bytes.Equal(want[3:], buf), "%s readat", p)
		}
		return nil
	}))
	onDisk := 0
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			onDisk++
		}
		return err
	}))
	require.Equal(t, onDisk, seen, "regular files on disk and in the image")
}

// openImage opens the image file at p.
func openImage(t testing.TB, p string, opts ...iso.Option) *iso.FS {
	t.Helper()
	f, size := openFile(t, p)
	fsys, err := iso.Open(f, size, opts...)
	require.NoError(t, err)
	return fsys
}

// openFile opens the file p for the rest of the test and returns its size.
func openFile(t testing.TB, p string) (*os.File, int64) {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	require.NoError(t, err)
	return f, st.Size()
}

// fixtureImage builds the standard fixture with xorriso and the given arguments (no defaults).
func fixtureImage(t *testing.T, dangling bool, args ...string) (src, image string) {
	t.Helper()
	isotest.RequireXorriso(t)
	src = t.TempDir()
	writeFixture(t, src, dangling)
	return src, isotest.BuildArgs(t, src, args...)
}
