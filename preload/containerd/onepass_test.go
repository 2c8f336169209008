package containerd

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/labels"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/platforms"
	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/image-spec/identity"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
)

// layerEntry is one entry of a test layer's tar.
type layerEntry struct {
	name     string
	typ      byte
	mode     int64
	uid, gid int
	body     string
	link     string
	pax      map[string]string
	mtime    time.Time
}

func layerTar(t testing.TB, entries ...layerEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.gid, Linkname: e.link,
			Size: int64(len(e.body)), PAXRecords: e.pax, ModTime: e.mtime, Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		require.NoError(t, tw.WriteHeader(h))
		if e.typ == tar.TypeReg {
			_, err := tw.Write([]byte(e.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return b.Bytes()
}

// trickyImage is an image of two layers holding what an applier must get right: owners, modes
// with setuid, a directory only its owner may enter, symbolic and hard links, a whiteout of a
// file and an opaque directory of the layer below. The lower layer is gzip-compressed as
// registries serve layers, the upper one an uncompressed tar as docker save writes them.
func trickyImage(t *testing.T, ref string, oci bool) preloadtest.Image {
	t.Helper()
	lower := layerTar(t,
		layerEntry{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "etc/passwd", typ: tar.TypeReg, mode: 0o644, body: "root:x:0:0::/root:/bin/sh\n"},
		layerEntry{name: "etc/passwd.hard", typ: tar.TypeLink, link: "etc/passwd"},
		layerEntry{name: "etc/motd", typ: tar.TypeSymlink, link: "/etc/passwd"},
		layerEntry{name: "home/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "home/user/", typ: tar.TypeDir, mode: 0o700, uid: 1000, gid: 1000},
		layerEntry{name: "home/user/secret", typ: tar.TypeReg, mode: 0o600, uid: 1000, gid: 1000, body: "only mine"},
		layerEntry{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "bin/tool", typ: tar.TypeReg, mode: 0o4755, body: "#!/bin/sh\necho tool\n"},
		layerEntry{name: "opt/old/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "opt/old/a", typ: tar.TypeReg, mode: 0o644, body: "a"},
		layerEntry{name: "var/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "var/gone", typ: tar.TypeReg, mode: 0o644, body: "removed above"},
		// Files large enough to be written ahead (apply.go): with a hard link, through a
		// symbolic link, replaced within the layer, removed by the layer above.
		layerEntry{name: "usr/bin/big", typ: tar.TypeReg, mode: 0o4750, gid: 5, body: strings.Repeat("big ", aheadMin/3),
			pax: map[string]string{"SCHILY.xattr.user.origin": "big"}, mtime: time.Unix(1_700_000_000, 123_456_789)},
		// A hard link's header carries its file's metadata, which the applier sets again.
		layerEntry{name: "usr/bin/big.hard", typ: tar.TypeLink, link: "usr/bin/big", mode: 0o4750, gid: 5,
			pax: map[string]string{"SCHILY.xattr.user.origin": "big"}, mtime: time.Unix(1_700_000_000, 123_456_789)},
		layerEntry{name: "usr/lib/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "lib", typ: tar.TypeSymlink, link: "usr/lib"},
		layerEntry{name: "lib/big.so", typ: tar.TypeReg, mode: 0o644, body: strings.Repeat("so ", aheadMin/2)},
		layerEntry{name: "opt/twice", typ: tar.TypeReg, mode: 0o644, body: strings.Repeat("first ", aheadMin/5)},
		layerEntry{name: "opt/twice", typ: tar.TypeReg, mode: 0o600, body: strings.Repeat("second ", aheadMin/6)},
		layerEntry{name: "opt/gone", typ: tar.TypeReg, mode: 0o644, body: strings.Repeat("gone ", aheadMin/4)},
	)
	upper := layerTar(t,
		layerEntry{name: "var/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "var/.wh.gone", typ: tar.TypeReg, mode: 0o644},
		layerEntry{name: "opt/old/", typ: tar.TypeDir, mode: 0o750, gid: 10},
		layerEntry{name: "opt/old/.wh..wh..opq", typ: tar.TypeReg, mode: 0o644},
		layerEntry{name: "opt/old/b", typ: tar.TypeReg, mode: 0o644, body: "b"},
		layerEntry{name: "etc/passwd", typ: tar.TypeReg, mode: 0o644, body: "root:x:0:0::/root:/bin/bash\n"},
		layerEntry{name: "opt/.wh.gone", typ: tar.TypeReg, mode: 0o644},
		layerEntry{name: "srv/data", typ: tar.TypeReg, mode: 0o640, uid: 33, gid: 33, body: "www",
			pax: map[string]string{"SCHILY.xattr.user.origin": "layer2"}},
	)
	top := layerTar(t,
		layerEntry{name: "srv/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "srv/.wh.data", typ: tar.TypeReg, mode: 0o644},
		layerEntry{name: "srv/zstd", typ: tar.TypeReg, mode: 0o600, body: strings.Repeat("zstd ", 4096)},
		layerEntry{name: "srv/zstd-big", typ: tar.TypeReg, mode: 0o640, uid: 7, body: strings.Repeat("zstd ", aheadMin/4)},
	)
	gz, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(lower)), nil })
	require.NoError(t, err)
	mt := types.DockerUncompressedLayer
	if oci {
		mt = types.OCIUncompressedLayer
	}
	layers := []v1.Layer{gz, static.NewLayer(upper, mt)}
	if oci {
		// OCI allows zstd layers too.
		zl, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(top)), nil },
			tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
		require.NoError(t, err)
		layers = append(layers, zl)
	}
	return preloadtest.NewImage(t, ref, preloadtest.ImageOptions{OS: "linux", Arch: "amd64", OCI: oci, Shared: layers})
}

// TestOnePassMatchesContainerd imports the same archives into two namespaces of one daemon,
// unpacking once in one pass and once through containerd, and checks that every image's root as
// a container sees it (the snapshot of its chain ID, mounted) is the same file for file: owner,
// mode, content, link, xattr; and that one pass unpacked every layer itself, labelled as
// containerd labels them.
func TestOnePassMatchesContainerd(t *testing.T) {
	d := containerdtest.Start(t)
	rel := newRelease(t)
	tricky := trickyImage(t, "docker.io/library/tricky:v1", false)
	trickyOCI := trickyImage(t, "docker.io/library/tricky-oci:v1", true)
	archives := [][]byte{
		rel.docker.Data, rel.oci.Data,
		preloadtest.Zstd(t, preloadtest.DockerArchive(t, tricky)),
		preloadtest.Zstd(t, preloadtest.OCIArchive(t, trickyOCI)),
	}
	stores := map[bool]*Store{}
	for _, onePass := range []bool{true, false} {
		s, err := New(t.Context(), d.Socket, WithUnpack(DefaultSnapshotter), WithOnePass(onePass),
			WithNamespace(fmt.Sprintf("onepass-%t", onePass)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		require.Equal(t, onePass, s.OnePass())
		for _, a := range archives {
			_, err := s.Import(t.Context(), zstdReader(t, a))
			require.NoError(t, err)
		}
		stores[onePass] = s
	}
	layers, byContainerd := stores[true].UnpackCounts()
	require.Zero(t, byContainerd, "one pass left images to containerd")
	_, byContainerd = stores[false].UnpackCounts()
	require.Positive(t, byContainerd)
	// One snapshot per layer chain, in both namespaces.
	for onePass, s := range stores {
		n := 0
		ctx := namespaces.WithNamespace(t.Context(), s.ns)
		require.NoError(t, s.client.SnapshotService(DefaultSnapshotter).Walk(ctx, func(context.Context, snapshots.Info) error { n++; return nil }))
		require.Equal(t, int(layers), n, "snapshots, one pass %t", onePass)
	}

	refs := append(append([]string{}, rel.docker.Refs...), rel.oci.Refs...)
	refs = append(refs, tricky.Ref, trickyOCI.Ref)
	runnable := 0
	for _, ref := range refs {
		trees := map[bool]map[string]string{}
		for onePass, s := range stores {
			ctx := namespaces.WithNamespace(t.Context(), s.ns)
			cs := s.client.ContentStore()
			img, err := s.client.ImageService().Get(ctx, ref)
			require.NoError(t, err)
			m, err := images.Manifest(ctx, cs, img.Target, platforms.Default())
			if err != nil {
				continue
			}
			diffIDs, err := images.RootFS(ctx, cs, m.Config)
			require.NoError(t, err)
			chain := identity.ChainID(diffIDs).String()
			for i, l := range m.Layers {
				info, err := cs.Info(ctx, l.Digest)
				require.NoError(t, err)
				require.Equal(t, diffIDs[i].String(), info.Labels[labels.LabelUncompressed], "%s layer %d", ref, i)
			}
			info, err := cs.Info(ctx, m.Config.Digest)
			require.NoError(t, err)
			require.Equal(t, chain, info.Labels["containerd.io/gc.ref.snapshot."+DefaultSnapshotter], ref)
			sn := s.client.SnapshotService(DefaultSnapshotter)
			mounts, err := sn.View(ctx, "view-"+randomID(), chain)
			require.NoError(t, err, "%s: no snapshot %s", ref, chain)
			require.NoError(t, mount.WithReadonlyTempMount(ctx, mounts, func(root string) error {
				trees[onePass] = tree(t, root)
				return nil
			}))
		}
		require.Equal(t, trees[false] == nil, trees[true] == nil, "%s unpacked by one side only", ref)
		if trees[true] == nil {
			continue
		}
		runnable++
		require.Equal(t, trees[false], trees[true], ref)
		if ref == tricky.Ref || ref == trickyOCI.Ref {
			root := trees[true]
			require.NotContains(t, root, "var/gone", "the whiteout")
			require.NotContains(t, root, "opt/old/a", "the opaque directory")
			require.Contains(t, root["opt/old/b"], "-rw-r--r-- 0:0")
			require.Contains(t, root["opt/old"], "drwxr-x--- 0:10")
			require.Contains(t, root["home/user/secret"], "-rw------- 1000:1000")
			require.Contains(t, root["bin/tool"], "urwxr-xr-x 0:0")
			require.Contains(t, root["etc/motd"], "-> /etc/passwd")
			require.Contains(t, root["usr/bin/big"], "urwxr-x--- 0:5 1398100 links=2")
			require.Contains(t, root["usr/bin/big"], "2023-11-14T22:13:20.123456789Z")
			require.Equal(t, root["usr/bin/big"], root["usr/bin/big.hard"])
			require.Contains(t, root["usr/lib/big.so"], "-rw-r--r-- 0:0 1572864 links=1")
			require.Contains(t, root["opt/twice"], "-rw------- 0:0 1223334 links=1")
			require.NotContains(t, root, "opt/gone")
			if ref == tricky.Ref {
				require.Contains(t, root["srv/data"], `user.origin="layer2"`)
			} else {
				require.NotContains(t, root, "srv/data", "the zstd layer's whiteout")
				require.Contains(t, root["srv/zstd"], "-rw------- 0:0 20480")
				require.Contains(t, root["srv/zstd-big"], "-rw-r----- 7:0 1310720")
			}
		}
	}
	require.GreaterOrEqual(t, runnable, 5) // alpha, beta, delta and the tricky two at least

	// Nothing stays staged.
	ents, err := os.ReadDir(stores[true].onepass.tmp)
	require.NoError(t, err)
	require.Empty(t, ents)
}

// tree describes every file below root: type and mode, owner, size, link count and content
// digest, link target, a file's or link's modification time (a directory's changes with its
// entries, a whiteout's is its creation's), xattrs.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		require.NoError(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%s %d:%d", fi.Mode(), st.Uid, st.Gid)
		if fi.Mode()&fs.ModeSetuid != 0 {
			desc = "u" + desc[1:]
		}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			sum := sha256.Sum256(b)
			desc += fmt.Sprintf(" %d links=%d %s", len(b), st.Nlink, hex.EncodeToString(sum[:8]))
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			require.NoError(t, err)
			desc += " -> " + l
		}
		if fi.Mode().IsRegular() || fi.Mode()&fs.ModeSymlink != 0 {
			desc += " " + fi.ModTime().UTC().Format(time.RFC3339Nano)
		}
		out[rel] = desc + xattrs(t, p)
		return nil
	}))
	return out
}

// xattrs lists p's extended attributes, sorted, each as name=value.
func xattrs(t *testing.T, p string) string {
	t.Helper()
	names := make([]byte, 4096)
	n, err := unix.Llistxattr(p, names)
	require.NoError(t, err)
	var out []string
	for _, name := range strings.Split(string(names[:n]), "\x00") {
		if name == "" {
			continue
		}
		v := make([]byte, 4096)
		m, err := unix.Lgetxattr(p, name, v)
		require.NoError(t, err, "%s %s", p, name)
		out = append(out, fmt.Sprintf(" %s=%q", name, v[:m]))
	}
	sort.Strings(out)
	return strings.Join(out, "")
}

// TestOnePassFailureLeavesNothing: an archive cut short after its layers were extracted fails its
// import, and neither a snapshot nor a staged directory is left; an import that follows unpacks
// in one pass again.
func TestOnePassFailureLeavesNothing(t *testing.T) {
	d := containerdtest.Start(t)
	tricky := trickyImage(t, "docker.io/library/tricky:v1", false)
	data := preloadtest.DockerArchive(t, tricky)
	s, err := New(t.Context(), d.Socket, WithUnpack(DefaultSnapshotter), WithNamespace("onepass-fail"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.True(t, s.OnePass())

	// The layers come before the manifest in a docker-save archive: the cut leaves them written
	// and extracted, and no image.
	_, err = s.Import(t.Context(), bytes.NewReader(data[:len(data)-2048]))
	require.Error(t, err)
	ctx := namespaces.WithNamespace(t.Context(), s.ns)
	sn := s.client.SnapshotService(DefaultSnapshotter)
	n := 0
	require.NoError(t, sn.Walk(ctx, func(_ context.Context, _ snapshots.Info) error { n++; return nil }))
	require.Zero(t, n, "snapshots of a failed import")
	imgs, _, _ := leftovers(t, s)
	require.Zero(t, imgs)
	ents, err := os.ReadDir(s.onepass.tmp)
	require.NoError(t, err)
	require.Empty(t, ents, "staged layers of a failed import")

	names, err := s.Import(t.Context(), bytes.NewReader(data))
	require.NoError(t, err)
	require.Equal(t, []string{tricky.Ref}, names)
	layers, byContainerd := s.UnpackCounts()
	require.Equal(t, int64(2), layers)
	require.Zero(t, byContainerd)
}

// TestOnePassLeftoversOfAKilledImport: what a killed import staged is removed when a store is
// made, and without the right to create whiteouts one pass is off and containerd unpacks.
func TestOnePassLeftoversOfAKilledImport(t *testing.T) {
	d := containerdtest.Start(t)
	s, err := New(t.Context(), d.Socket, WithUnpack(DefaultSnapshotter), WithNamespace("onepass-left"))
	require.NoError(t, err)
	// The directory of the snapshotter asked for, not of the first the daemon lists.
	require.Equal(t, filepath.Join(d.Root, "io.containerd.snapshotter.v1.overlayfs"), s.onepass.root)
	left := filepath.Join(s.onepass.tmp, "import-123", "1", "usr")
	require.NoError(t, os.MkdirAll(left, 0o755))
	require.NoError(t, s.Close())

	s, err = New(t.Context(), d.Socket, WithUnpack(DefaultSnapshotter), WithNamespace("onepass-left"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	_, err = os.Stat(filepath.Dir(filepath.Dir(left)))
	require.ErrorIs(t, err, os.ErrNotExist)

	off, err := New(t.Context(), d.Socket, WithNamespace("onepass-none"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = off.Close() })
	require.False(t, off.OnePass(), "one pass without unpacking")
}
