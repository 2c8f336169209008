package containerd

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/stretchr/testify/require"
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
