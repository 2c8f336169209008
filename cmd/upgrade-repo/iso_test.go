package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/iso/inspect"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
)

var isoTestTime = time.Date(2023, 6, 7, 8, 9, 10, 0, time.UTC)

// isoTestImage builds an image from a small tree and returns the tree and the image.
func isoTestImage(t *testing.T) (string, string) {
	t.Helper()
	isotest.RequireXorriso(t)
	src := t.TempDir()
	files := map[string]string{
		"harvester-release.yaml":              "harvester: v1.5.2\n",
		"bundle/metadata.yaml":                "images: {}\n",
		"bundle/harvester/images/a.tar.zst":   strings.Repeat("zstd", 5000),
		"bundle/harvester/images-lists/a.txt": "docker.io/library/busybox:1\n",
		"deep/1/2/3/4/5/6/7/8/9/file.txt":     "deep\n",
		strings.Repeat("n", 210) + ".txt":     "long\n",
		"empty":                               "",
		"bin/run.sh":                          "#!/bin/sh\n",
	}
	for name, data := range files {
		p := filepath.Join(src, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(data), 0o644))
	}
	require.NoError(t, os.Chmod(filepath.Join(src, "bin/run.sh"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(src, "empty-dir"), 0o750))
	require.NoError(t, os.Symlink("bundle/metadata.yaml", filepath.Join(src, "meta-link")))
	require.NoError(t, os.Symlink("/bundle/harvester", filepath.Join(src, "abs-link")))
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		return os.Chtimes(p, isoTestTime, isoTestTime)
	}))
	return src, isotest.Build(t, src)
}

func runISOTest(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	a := &app{stdout: &stdout, stderr: &stderr, log: slog.New(slog.NewTextHandler(&stderr, nil))}
	err := runISO(t.Context(), a, args)
	return stdout.String(), stderr.String(), err
}

func TestISOCommands(t *testing.T) {
	t.Parallel()
	src, image := isoTestImage(t)
	long := strings.Repeat("n", 210) + ".txt"
	tests := []struct {
		name    string
		args    []string
		want    []string // lines or fragments the output must contain
		exact   string   // the whole output, when set
		wantErr string
		usage   bool
	}{
		{name: "ls root", args: []string{"ls", image},
			exact: strings.Join([]string{"abs-link", "bin", "bundle", "deep", "empty", "empty-dir", "harvester-release.yaml", "meta-link", long}, "\n") + "\n"},
		{name: "ls dir with slashes", args: []string{"ls", image, "/bundle/harvester/"}, exact: "images\nimages-lists\n"},
		{name: "ls long", args: []string{"ls", "-l", image, "bin"},
			exact: "-rwxr-xr-x   1     0     0           10 2023-06-07 08:09:10 run.sh\n"},
		{name: "ls symlink long", args: []string{"ls", image, "-l", "/meta-link"},
			want: []string{"lrwxrwxrwx", "/meta-link -> bundle/metadata.yaml"}},
		{name: "ls recursive", args: []string{"ls", "-R", image, "deep"},
			exact: "/deep/1\n/deep/1/2\n/deep/1/2/3\n/deep/1/2/3/4\n/deep/1/2/3/4/5\n/deep/1/2/3/4/5/6\n/deep/1/2/3/4/5/6/7\n/deep/1/2/3/4/5/6/7/8\n/deep/1/2/3/4/5/6/7/8/9\n/deep/1/2/3/4/5/6/7/8/9/file.txt\n"},
		{name: "ls through symlink", args: []string{"ls", image, "abs-link/images"}, exact: "a.tar.zst\n"},
		{name: "ls missing", args: []string{"ls", image, "nope"}, wantErr: "ls " + image + ": stat nope: file does not exist"},
		{name: "stat missing", args: []string{"stat", image, "/bundle/nope"}, wantErr: "stat " + image + ": lstat bundle/nope: file does not exist"},
		{name: "cat missing", args: []string{"cat", image, "nope"}, wantErr: "cat " + image + ": open nope: file does not exist"},
		{name: "stat", args: []string{"stat", image, "/harvester-release.yaml"},
			want: []string{"type:     file", "size:     18", "mode:     -rw-r--r-- (0644)", "modified: 2023-06-07T08:09:10Z", "extent 0: offset", "span:"}},
		{name: "stat symlink", args: []string{"stat", image, "abs-link"}, want: []string{"type:     symlink", "target:   /bundle/harvester"}},
		{name: "cat", args: []string{"cat", image, "bundle/metadata.yaml"}, exact: "images: {}\n"},
		{name: "cat through link", args: []string{"cat", image, "meta-link"}, exact: "images: {}\n"},
		{name: "cat dir", args: []string{"cat", image, "bundle"}, wantErr: "is a directory"},
		{name: "cat empty", args: []string{"cat", image, "empty"}, exact: ""},
		{name: "info", args: []string{"info", image},
			want: []string{"volume id:   ISOIMAGE", "trees:       primary, joliet, rockridge (reading rockridge)", "rock ridge:  RRIP_1991A", "entries:     26"}},
		{name: "verify", args: []string{"verify", image}, want: []string{"ok: 8 files (20077 bytes in 7 extents), 17 directories, 2 symlinks"}},
		{name: "verify wrong checksum", args: []string{"verify", "--checksum", "sha512:" + strings.Repeat("00", 64), image}, wantErr: "checksum mismatch"},
		{name: "verify bad checksum", args: []string{"verify", "--checksum", "md5:00", image}, wantErr: "want sha512:HEX (or its 128 hex digits alone) or sha256:HEX", usage: true},
		{name: "not an image", args: []string{"info", filepath.Join(src, "bin/run.sh")}, wantErr: "too small"},
		{name: "no image", args: []string{"info", filepath.Join(src, "missing.iso")}, wantErr: "no such file"},
		{name: "a directory", args: []string{"ls", src}, wantErr: src + " is a directory, not an ISO image file: want its path or its http or https URL"},
		{name: "an ftp URL", args: []string{"info", "ftp://host/release.iso"}, wantErr: "scheme ftp:// is not supported (want http://HOST/PATH or https://HOST/PATH): an ISO is read from a file or an http or https URL"},
		{name: "a relative path", args: []string{"info", "missing.iso"}, wantErr: "no such file or directory (a relative path, looked up in "},
		{name: "unknown command", args: []string{"frob", image}, wantErr: "unknown iso command", usage: true},
		{name: "missing argument", args: []string{"stat", image}, wantErr: "wrong number of arguments", usage: true},
		{name: "bad format", args: []string{"info", "-o", "yaml", image}, wantErr: `-o must be text or json, got "yaml"`, usage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, _, err := runISOTest(t, tt.args...)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.Equal(t, tt.usage, errorsIsUsage(err))
				return
			}
			require.NoError(t, err)
			if tt.want == nil {
				require.Equal(t, tt.exact, out)
			}
			for _, w := range tt.want {
				require.Contains(t, out, w)
			}
		})
	}
}

func errorsIsUsage(err error) bool {
	return err != nil && strings.Contains(err.Error(), errUsage.Error()+":")
}

func TestISOJSON(t *testing.T) {
	t.Parallel()
	_, image := isoTestImage(t)

	out, _, err := runISOTest(t, "ls", "-R", "-o", "json", image)
	require.NoError(t, err)
	var list []inspect.Entry
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list, 26)
	byPath := map[string]inspect.Entry{}
	for _, e := range list {
		byPath[e.Path] = e
	}
	require.Equal(t, "symlink", byPath["/abs-link"].Type)
	require.Equal(t, "/bundle/harvester", byPath["/abs-link"].Target)
	require.Equal(t, "dir", byPath["/empty-dir"].Type)
	require.Equal(t, "0750", byPath["/empty-dir"].Perm)
	require.Equal(t, int64(20000), byPath["/bundle/harvester/images/a.tar.zst"].Size)

	out, _, err = runISOTest(t, "stat", "-o", "json", image, "bundle/harvester/images/a.tar.zst")
	require.NoError(t, err)
	var e inspect.Entry
	require.NoError(t, json.Unmarshal([]byte(out), &e))
	require.Len(t, e.Extents, 1)
	require.Equal(t, int64(20000), e.Extents[0].Length)
	f, err := os.Open(image)
	require.NoError(t, err)
	defer f.Close()
	got := make([]byte, 20000)
	_, err = f.ReadAt(got, e.Extents[0].Offset)
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("zstd", 5000), string(got))

	out, _, err = runISOTest(t, "info", "-o", "json", image)
	require.NoError(t, err)
	var info struct {
		iso.VolumeInfo
		Entries int `json:"entries"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &info))
	require.Equal(t, "ISOIMAGE", info.VolumeID)
	require.True(t, info.RockRidge)
	require.True(t, info.Joliet)
	require.Equal(t, 26, info.Entries)

	data, err := os.ReadFile(image)
	require.NoError(t, err)
	sum := sha512.Sum512(data)
	out, _, err = runISOTest(t, "verify", "-o", "json", "--checksum", "sha512:"+hex.EncodeToString(sum[:]), image)
	require.NoError(t, err)
	var rep inspect.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, inspect.Report{Files: 8, Dirs: 17, Links: 2, Bytes: 20077, Extents: 7, Checksum: "sha512:" + hex.EncodeToString(sum[:]), OK: true}, rep)

	// --checksum takes every spelling the checksum package reads, as a Version or a plan does.
	sum256 := sha256.Sum256(data)
	for _, c := range []string{
		hex.EncodeToString(sum[:]),
		strings.ToUpper(hex.EncodeToString(sum[:])),
		"SHA512:" + hex.EncodeToString(sum[:]),
		"sha256:" + hex.EncodeToString(sum256[:]),
	} {
		out, _, err = runISOTest(t, "verify", "--checksum", c, image)
		require.NoError(t, err, c)
		require.Contains(t, out, "checksum ok: ", c)
	}
	_, _, err = runISOTest(t, "verify", "--checksum", "sha256:"+strings.Repeat("00", 32), image)
	require.ErrorContains(t, err, "checksum mismatch")
}

func TestISOExtract(t *testing.T) {
	t.Parallel()
	src, image := isoTestImage(t)

	t.Run("whole tree", func(t *testing.T) {
		t.Parallel()
		dst := filepath.Join(t.TempDir(), "out")
		out, _, err := runISOTest(t, "extract", image, dst)
		require.NoError(t, err)
		require.Contains(t, out, "extracted 8 files (20077 bytes), 17 directories, 2 symlinks")
		requireSameTree(t, src, dst)
	})
	t.Run("some paths", func(t *testing.T) {
		t.Parallel()
		dst := t.TempDir()
		_, _, err := runISOTest(t, "extract", image, dst, "/bundle/harvester/images", "meta-link")
		require.NoError(t, err)
		data, err := os.ReadFile(filepath.Join(dst, "bundle/harvester/images/a.tar.zst"))
		require.NoError(t, err)
		require.Equal(t, strings.Repeat("zstd", 5000), string(data))
		target, err := os.Readlink(filepath.Join(dst, "meta-link"))
		require.NoError(t, err)
		require.Equal(t, "bundle/metadata.yaml", target)
		_, err = os.Stat(filepath.Join(dst, "harvester-release.yaml"))
		require.ErrorIs(t, err, fs.ErrNotExist)
	})
	t.Run("refuses to write outside DIR", func(t *testing.T) {
		t.Parallel()
		outside := t.TempDir()
		dst := t.TempDir()
		// A symbolic link already in DIR must not carry the extraction outside it.
		require.NoError(t, os.Symlink(outside, filepath.Join(dst, "abs-link")))
		_, _, err := runISOTest(t, "extract", image, dst, "abs-link/images")
		require.Error(t, err)
		ents, err := os.ReadDir(outside)
		require.NoError(t, err)
		require.Empty(t, ents)
	})
	t.Run("existing file", func(t *testing.T) {
		t.Parallel()
		dst := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dst, "empty"), []byte("keep"), 0o644))
		_, _, err := runISOTest(t, "extract", image, dst, "empty")
		require.ErrorIs(t, err, fs.ErrExist)
		data, err := os.ReadFile(filepath.Join(dst, "empty"))
		require.NoError(t, err)
		require.Equal(t, "keep", string(data))
	})
}

// requireSameTree checks that dst holds the same names, types, permissions, times, link targets
// and bytes as src.
func requireSameTree(t *testing.T, src, dst string) {
	t.Helper()
	n := 0
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, err := filepath.Rel(src, p)
		require.NoError(t, err)
		want, err := os.Lstat(p)
		require.NoError(t, err)
		got, err := os.Lstat(filepath.Join(dst, rel))
		require.NoError(t, err, rel)
		n++
		require.Equal(t, want.Mode(), got.Mode(), rel)
		switch {
		case want.Mode()&fs.ModeSymlink != 0:
			wt, _ := os.Readlink(p)
			gt, err := os.Readlink(filepath.Join(dst, rel))
			require.NoError(t, err)
			require.Equal(t, wt, gt, rel)
			return nil
		case want.Mode().IsRegular():
			wf, err := os.Open(p)
			require.NoError(t, err)
			defer wf.Close()
			gf, err := os.Open(filepath.Join(dst, rel))
			require.NoError(t, err)
			defer gf.Close()
			wb, _ := io.ReadAll(wf)
			gb, _ := io.ReadAll(gf)
			require.True(t, bytes.Equal(wb, gb), rel)
		}
		if rel != "." {
			require.True(t, want.ModTime().Equal(got.ModTime()), "%s: %v != %v", rel, want.ModTime(), got.ModTime())
		}
		return nil
	}))
	m := 0
	require.NoError(t, filepath.WalkDir(dst, func(string, fs.DirEntry, error) error { m++; return nil }))
	require.Equal(t, n, m)
}

// Every read-only command works on a URL as on the file, reading it through Range requests; an
// origin that ignores ranges is refused with a clear error and the secret of its URL kept.
func TestISOCommandsOnAURL(t *testing.T) {
	t.Parallel()
	_, img := isoTestImage(t)
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.URL.Path == "/plain.iso" {
			r.Header.Del("Range")
		}
		http.ServeFile(w, r, img)
	}))
	t.Cleanup(srv.Close)
	url := srv.URL + "/release.iso?X-Amz-Signature=secret"
	for _, args := range [][]string{
		{"ls", "-R", "-l", "%s"},
		{"stat", "-o", "json", "%s", "/bundle/harvester/images/a.tar.zst"},
		{"cat", "%s", "/harvester-release.yaml"},
		{"info", "%s"},
		{"verify", "%s"},
	} {
		local, remote := slices.Clone(args), slices.Clone(args)
		for i, a := range args {
			if a == "%s" {
				local[i], remote[i] = img, url
			}
		}
		want, _, err := runISOTest(t, local...)
		require.NoError(t, err, local)
		got, _, err := runISOTest(t, remote...)
		require.NoError(t, err, remote)
		require.Equal(t, want, got, "iso %s on the URL reads as on the file", args[0])
	}
	_, _, err := runISOTest(t, "ls", srv.URL+"/plain.iso?X-Amz-Signature=secret")
	require.ErrorContains(t, err, "does not serve ranges")
	require.NotContains(t, err.Error(), "secret")
}
