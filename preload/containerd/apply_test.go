package containerd

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/platforms"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/image-spec/identity"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
)

// aclXattr encodes a POSIX ACL as the kernel's system.posix_acl_* xattrs hold it: the owner
// rwx, user 1000 rw-, the group and others r-x.
func aclXattr() string {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, uint32(2))
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{0x01, 7, ^uint32(0)}, {0x02, 6, 1000}, {0x04, 5, ^uint32(0)}, {0x10, 7, ^uint32(0)}, {0x20, 5, ^uint32(0)}} {
		_ = binary.Write(&b, binary.LittleEndian, e)
	}
	return b.String()
}

// TestApplyAheadMatchesContainerd applies layers with containerd's applier and with the files of
// at least 1000 bytes written ahead, and compares the two trees file for file.
func TestApplyAheadMatchesContainerd(t *testing.T) {
	big := func(s string) string { return strings.Repeat(s, 3000/len(s)+1) }
	when := time.Unix(1_600_000_000, 987_654_321)
	cases := []struct {
		name    string
		entries []layerEntry
		ahead   int
	}{{
		name: "owners, modes, xattrs, times and a hard link",
		entries: []layerEntry{
			{name: "bin/", typ: tar.TypeDir, mode: 0o755, mtime: when},
			{name: "bin/tool", typ: tar.TypeReg, mode: 0o6755, uid: 1000, gid: 1000, body: big("tool "), mtime: when,
				pax: map[string]string{"SCHILY.xattr.user.origin": "ahead", "SCHILY.xattr.security.capability": "\x00\x00\x00\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"}},
			{name: "bin/tool2", typ: tar.TypeLink, link: "bin/tool", mode: 0o6755, uid: 1000, gid: 1000, mtime: when,
				pax: map[string]string{"SCHILY.xattr.user.origin": "ahead"}},
			{name: "bin/small", typ: tar.TypeReg, mode: 0o755, body: "small", mtime: when},
			{name: "bin/sh", typ: tar.TypeSymlink, link: "tool", mtime: when},
			{name: "data/blob", typ: tar.TypeReg, mode: 0o400, uid: 33, gid: 33, body: big("blob "), mtime: when},
		},
		ahead: 2,
	}, {
		name: "an entry replaced in its layer, an entry through a symbolic link",
		entries: []layerEntry{
			{name: "usr/lib/", typ: tar.TypeDir, mode: 0o755},
			{name: "lib", typ: tar.TypeSymlink, link: "usr/lib"},
			{name: "lib/libc.so", typ: tar.TypeReg, mode: 0o755, body: big("libc ")},
			{name: "etc/conf", typ: tar.TypeReg, mode: 0o644, body: big("one ")},
			{name: "etc/conf.old", typ: tar.TypeLink, link: "etc/conf", mode: 0o644},
			{name: "etc/conf", typ: tar.TypeReg, mode: 0o600, body: big("two ")},
			{name: "etc/conf", typ: tar.TypeDir, mode: 0o700},
		},
		ahead: 3,
	}, {
		name: "whiteouts and an opaque directory, never written ahead",
		entries: []layerEntry{
			{name: "var/", typ: tar.TypeDir, mode: 0o755},
			{name: "var/.wh.cache", typ: tar.TypeReg, mode: 0o644},
			{name: "var/.wh.big", typ: tar.TypeReg, mode: 0o644, body: big("whiteout ")},
			{name: "opt/", typ: tar.TypeDir, mode: 0o755},
			{name: "opt/.wh..wh..opq", typ: tar.TypeReg, mode: 0o644},
			{name: "opt/new", typ: tar.TypeReg, mode: 0o644, body: big("new ")},
		},
		ahead: 1,
	}, {
		name: "a directory with a default ACL: nothing from there on is written ahead",
		entries: []layerEntry{
			{name: "first", typ: tar.TypeReg, mode: 0o644, body: big("first ")},
			{name: "shared/", typ: tar.TypeDir, mode: 0o775, pax: map[string]string{
				"SCHILY.xattr.system.posix_acl_default": aclXattr(), "SCHILY.xattr.system.posix_acl_access": aclXattr()}},
			{name: "shared/file", typ: tar.TypeReg, mode: 0o664, body: big("inherits ")},
			{name: "after", typ: tar.TypeReg, mode: 0o644, body: big("after ")},
		},
		ahead: 1,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			layer := layerTar(t, tc.entries...)
			want := t.TempDir()
			_, err := archive.Apply(t.Context(), want, bytes.NewReader(layer), archive.WithConvertWhiteout(archive.OverlayConvertWhiteout))
			require.NoError(t, err)
			got := t.TempDir()
			n, err := applyAhead(t.Context(), got, bytes.NewReader(layer), 1000)
			require.NoError(t, err)
			require.Equal(t, tree(t, want), tree(t, got))
			require.Equal(t, tc.ahead, n, "files written ahead")
		})
	}
}

// TestApplyAheadFails: a layer cut short, a damaged header and an entry the applier refuses fail
// as they fail containerd's applier, without hanging, and leave no file written ahead behind.
func TestApplyAheadFails(t *testing.T) {
	body := strings.Repeat("content ", 1000)
	whole := layerTar(t,
		layerEntry{name: "a", typ: tar.TypeReg, mode: 0o644, body: body},
		layerEntry{name: "b", typ: tar.TypeReg, mode: 0o644, body: body},
	)
	// The second header's checksum, damaged.
	damaged := bytes.Clone(whole)
	second := bytes.Index(damaged, append([]byte("b"), make([]byte, 99)...))
	require.Zero(t, second%512, "the second header's offset")
	copy(damaged[second+148:], "1234567")
	cases := []struct {
		name  string
		layer []byte
		err   string
	}{
		{"cut in a file written ahead", whole[:len(whole)-2048-2000], "unexpected EOF"},
		{"a damaged header", damaged, "invalid tar header"},
		{"a hard link to nothing, then a file to write ahead", layerTar(t,
			layerEntry{name: "link", typ: tar.TypeLink, link: "nothing"},
			layerEntry{name: "c", typ: tar.TypeReg, mode: 0o644, body: body + body},
		), "no such file"},
		{"an invalid whiteout", layerTar(t,
			layerEntry{name: "d", typ: tar.TypeReg, mode: 0o644, body: body},
			layerEntry{name: ".wh..", typ: tar.TypeReg, mode: 0o644},
		), "invalid whiteout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, cerr := archive.Apply(t.Context(), t.TempDir(), bytes.NewReader(tc.layer), archive.WithConvertWhiteout(archive.OverlayConvertWhiteout))
			dir := t.TempDir()
			_, err := applyAhead(t.Context(), dir, bytes.NewReader(tc.layer), 1000)
			require.ErrorContains(t, cerr, tc.err, "containerd's applier")
			require.ErrorContains(t, err, tc.err)
			ents, rerr := os.ReadDir(dir)
			require.NoError(t, rerr)
			for _, e := range ents {
				require.False(t, strings.HasPrefix(e.Name(), aheadPrefix), e.Name())
			}
		})
	}
}

// TestApplyAheadMatchesContainerdOnGNUTar compares the two appliers on layers GNU tar wrote, in
// PAX and in its own format: a name longer than a header holds, a hard link, access times. A
// sparse file, whose holes would be written before its blob's digest is checked, is refused
// (and left to containerd's unpack, which checks first).
func TestApplyAheadMatchesContainerdOnGNUTar(t *testing.T) {
	gnuTar := lookTar(t)
	src := t.TempDir()
	sparse := sparseFile(t, src)
	require.NoError(t, os.Link(sparse, sparse+".link"))
	long := filepath.Join(src, strings.Repeat("d", 80), strings.Repeat("e", 90))
	require.NoError(t, os.MkdirAll(long, 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(long, "file"), bytes.Repeat([]byte("long name "), 200), 0o644))
	require.NoError(t, os.Chtimes(filepath.Join(long, "file"), time.Unix(1_500_000_000, 0), time.Unix(1_400_000_000, 0)))
	for _, format := range []string{"gnu", "posix"} {
		for _, sparse := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s sparse %t", format, sparse), func(t *testing.T) {
				args := []string{"--format=" + format, "--atime-preserve", "-C", src, "-cf", "-", "."}
				if sparse {
					args = append(args, "--sparse")
				}
				out, err := exec.Command(gnuTar, args...).Output()
				require.NoError(t, err)
				got := t.TempDir()
				n, err := applyAhead(t.Context(), got, bytes.NewReader(out), 1000)
				if sparse {
					require.ErrorContains(t, err, "sparse: a sparse file")
					return
				}
				require.NoError(t, err)
				want := t.TempDir()
				_, err = archive.Apply(t.Context(), want, bytes.NewReader(out), archive.WithConvertWhiteout(archive.OverlayConvertWhiteout))
				require.NoError(t, err)
				require.Equal(t, tree(t, want), tree(t, got))
				require.Equal(t, 2, n, "files written ahead")
			})
		}
	}
}

// FuzzApplyAhead applies layers with containerd's applier and with files written ahead. A tar's
// checksums keep mutated bytes from reaching an applier, so the fuzzer's bytes are read two ways:
// as a script of entries (type, a path from a few names, the same or another parent, mode, owner,
// size, xattr, link target) written into a well-formed tar, whose two trees must be the same;
// and as a tar as they are, which must fail where containerd's applier fails. Either way
// applyAhead returns, never panics, and leaves no file written ahead behind.
func FuzzApplyAhead(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Add([]byte{1, 0, 0x6d, 1, 2, 0, 0x24, 0, 0, 1, 0, 0x6d, 1, 1, 3, 4, 1, 2, 3, 5, 0, 0})
	f.Add(layerTar(f,
		layerEntry{name: "a/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "a/big", typ: tar.TypeReg, mode: 0o4755, uid: 3, body: strings.Repeat("fuzz ", 300)},
		layerEntry{name: "a/link", typ: tar.TypeLink, link: "a/big", mode: 0o4755, uid: 3},
	))
	f.Fuzz(func(t *testing.T, data []byte) {
		compareAppliers(t, layerTar(t, scriptedEntries(data)...), true)
		compareAppliers(t, data, false)
	})
}

// scriptedEntries reads data as a script of tar entries, five bytes each.
func scriptedEntries(data []byte) []layerEntry {
	names := []string{"a", "b", "q", "a/b", "b/a", "q/q/q", ".wh.a", "a/.wh.b", "a/.wh..wh..opq", "../a", "/b", "."}
	types := []byte{tar.TypeReg, tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo}
	var out []layerEntry
	for len(data) >= 5 && len(out) < 24 {
		op, name, mode, size, extra := data[0], data[1], data[2], data[3], data[4]
		data = data[5:]
		e := layerEntry{
			name: names[int(name)%len(names)],
			typ:  types[int(op)%len(types)],
			mode: int64(mode)<<3 | int64(op>>5),
			uid:  int(extra % 3),
			gid:  int(extra>>2) % 3,
			link: names[int(extra>>4)%len(names)],
		}
		if e.typ == tar.TypeReg {
			e.body = strings.Repeat(string(rune('a'+size%26)), []int{0, 10, 999, 1000, 1500}[int(size>>5)%5])
		}
		if extra&0x08 != 0 {
			e.pax = map[string]string{"SCHILY.xattr.user.fuzz": e.name}
		}
		if op&0x08 != 0 {
			e.mtime = time.Unix(int64(size)<<20, int64(mode)<<10)
		}
		out = append(out, e)
	}
	return out
}

// compareAppliers applies layer with both appliers: applyAhead must fail where containerd's
// applier fails, and where both succeed build the same tree. With wellFormed, it must succeed
// where containerd's applier does (a layer as it comes may hold what applyAhead refuses and
// leaves to containerd's unpack).
func compareAppliers(t *testing.T, layer []byte, wellFormed bool) {
	t.Helper()
	if expands(layer) {
		// containerd's applier would write the holes of a sparse file, as many as claimed.
		_, err := applyAhead(t.Context(), t.TempDir(), bytes.NewReader(layer), 1000)
		require.Error(t, err)
		return
	}
	want := t.TempDir()
	_, cerr := archive.Apply(t.Context(), want, bytes.NewReader(layer), archive.WithConvertWhiteout(archive.OverlayConvertWhiteout))
	got := t.TempDir()
	_, err := applyAhead(t.Context(), got, bytes.NewReader(layer), 1000)
	ents, rerr := os.ReadDir(got)
	require.NoError(t, rerr)
	for _, e := range ents {
		require.False(t, strings.HasPrefix(e.Name(), aheadPrefix), e.Name())
	}
	if cerr != nil {
		require.Error(t, err, "containerd's applier failed: %v", cerr)
		return
	}
	if err != nil && !wellFormed {
		return
	}
	require.NoError(t, err)
	require.Equal(t, tree(t, want), tree(t, got))
}

// expands reports whether the tar data holds a sparse file.
func expands(data []byte) bool {
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err != nil {
			return false
		}
		if sparse(hdr) {
			return true
		}
	}
}

// TestOnePassLeavesASparseFileToContainerd imports an image whose layer holds a sparse file (GNU
// tar's, in PAX): one pass does not extract that layer, whose holes it would write before the
// blob's digest is checked, and containerd unpacks the image, the file whole.
func TestOnePassLeavesASparseFileToContainerd(t *testing.T) {
	gnuTar := lookTar(t)
	src := t.TempDir()
	sparseFile(t, src)
	layer, err := exec.Command(gnuTar, "--format=posix", "--sparse", "-C", src, "-cf", "-", ".").Output()
	require.NoError(t, err)
	img := preloadtest.NewImage(t, "docker.io/library/sparse:v1", preloadtest.ImageOptions{OS: "linux", Arch: "amd64",
		Shared: []v1.Layer{static.NewLayer(layer, types.DockerUncompressedLayer)}})

	d := containerdtest.Start(t)
	s, err := New(t.Context(), d.Socket, WithUnpack(DefaultSnapshotter), WithNamespace("sparse"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.True(t, s.OnePass())
	_, err = s.Import(t.Context(), bytes.NewReader(preloadtest.DockerArchive(t, img)))
	require.NoError(t, err)
	layers, byContainerd := s.UnpackCounts()
	require.Zero(t, layers, "layers unpacked in one pass")
	require.Equal(t, int64(1), byContainerd, "images unpacked by containerd")

	ctx := namespaces.WithNamespace(t.Context(), s.ns)
	cs := s.client.ContentStore()
	stored, err := s.client.ImageService().Get(ctx, img.Ref)
	require.NoError(t, err)
	m, err := images.Manifest(ctx, cs, stored.Target, platforms.Default())
	require.NoError(t, err)
	diffIDs, err := images.RootFS(ctx, cs, m.Config)
	require.NoError(t, err)
	mounts, err := s.client.SnapshotService(DefaultSnapshotter).View(ctx, "view-sparse", identity.ChainID(diffIDs).String())
	require.NoError(t, err)
	require.NoError(t, mount.WithReadonlyTempMount(ctx, mounts, func(root string) error {
		b, err := os.ReadFile(filepath.Join(root, "sparse"))
		require.NoError(t, err)
		require.Len(t, b, 3<<20)
		require.Equal(t, "data in a hole", string(b[1<<20:1<<20+14]))
		return nil
	}))
	ents, err := os.ReadDir(s.onepass.tmp)
	require.NoError(t, err)
	require.Empty(t, ents, "staged layers")
}

// lookTar returns GNU tar's path, or skips t.
func lookTar(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("no tar:", err)
	}
	return p
}

// sparseFile writes dir/sparse, 3 MiB holding "data in a hole" at 1 MiB and holes around it,
// and returns its path.
func sparseFile(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "sparse")
	require.NoError(t, os.WriteFile(p, nil, 0o640))
	require.NoError(t, os.Truncate(p, 3<<20))
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("data in a hole"), 1<<20)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return p
}
