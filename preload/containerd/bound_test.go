package containerd

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/platforms"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/image-spec/identity"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
)

// zerosLayer returns a zstd-compressed layer tar holding name, size zero bytes: a few KiB that
// expand to size.
func zerosLayer(t *testing.T, name string, size int64) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, err := zstd.NewWriter(&b, zstd.WithEncoderLevel(zstd.SpeedFastest))
	require.NoError(t, err)
	tw := tar.NewWriter(zw)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size, Format: tar.FormatPAX}))
	_, err = io.Copy(tw, io.LimitReader(zeros{}, size))
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	return b.Bytes()
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// withMember returns archive with a file name holding data inserted before its first member.
func withMember(t *testing.T, archive []byte, name string, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}))
	_, err := tw.Write(data)
	require.NoError(t, err)
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.NoError(t, tw.WriteHeader(hdr))
		_, err = io.Copy(tw, tr)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return b.Bytes()
}

// written returns how many bytes this process has passed to write(2) and its kin so far.
func written(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no wchar in /proc/self/io")
	return 0
}

// TestOnePassBoundsExpansion imports, with one pass, an OCI archive holding a zstd member that
// no image references (about 100 KiB that expand to 512 MiB) and an image whose one layer expands past
// the bound of unverified layers (a 96 MiB file of zeros): what the import writes stays within
// the bound (the extractions run in this process, containerd's unpack in the daemon), the image
// is unpacked whole by containerd, and nothing is left of the member. Cut short, the same
// archive fails its import with as little written, and leaves no image, snapshot or staged
// directory. Not parallel: it counts the bytes the whole process writes.
func TestOnePassBoundsExpansion(t *testing.T) {
	bomb := zerosLayer(t, "bomb", 512<<20)
	require.Less(t, len(bomb), 128<<10)
	sum := sha256.Sum256(bomb)
	const zerosSize = 96 << 20
	zl := zerosLayer(t, "zeros", zerosSize)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(zl)), nil },
		tarball.WithMediaType(types.OCILayerZStd))
	require.NoError(t, err)
	img := preloadtest.NewImage(t, "docker.io/library/zeros:v1", preloadtest.ImageOptions{OS: "linux", Arch: "amd64", OCI: true,
		Shared: []v1.Layer{layer}})
	archive := withMember(t, preloadtest.OCIArchive(t, img), "blobs/sha256/"+hex.EncodeToString(sum[:]), bomb)

	d := containerdtest.Start(t)
	tests := []struct {
		name    string
		archive []byte
		fails   bool
	}{
		{"cut short", archive[:len(archive)-4096], true},
		{"whole", archive, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(t.Context(), d.Socket, WithUnpack(DefaultSnapshotter), WithNamespace(fmt.Sprintf("bound-%d", i)))
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			require.True(t, s.OnePass())

			before := written(t)
			names, err := s.Import(t.Context(), bytes.NewReader(tt.archive))
			wrote := written(t) - before
			t.Logf("the import wrote %d MiB", wrote>>20)
			require.Less(t, wrote, int64(expansionFloor+16<<20), "bytes written by the import")

			ctx := namespaces.WithNamespace(t.Context(), s.ns)
			sn := s.client.SnapshotService(DefaultSnapshotter)
			var snaps int
			require.NoError(t, sn.Walk(ctx, func(context.Context, snapshots.Info) error { snaps++; return nil }))
			ents, rerr := os.ReadDir(s.onepass.tmp)
			require.NoError(t, rerr)
			require.Empty(t, ents, "staged layers")
			if tt.fails {
				require.Error(t, err)
				imgs, _, _ := leftovers(t, s)
				require.Zero(t, imgs, "images of a failed import")
				require.Zero(t, snaps, "snapshots of a failed import")
				return
			}
			require.NoError(t, err)
			require.Equal(t, []string{img.Ref}, names)
			require.Equal(t, 1, snaps, "the image's one snapshot, nothing of the member")
			layers, byContainerd := s.UnpackCounts()
			require.Zero(t, layers, "layers unpacked in one pass")
			require.Equal(t, int64(1), byContainerd, "images unpacked by containerd")

			cs := s.client.ContentStore()
			stored, err := s.client.ImageService().Get(ctx, img.Ref)
			require.NoError(t, err)
			m, err := images.Manifest(ctx, cs, stored.Target, platforms.Default())
			require.NoError(t, err)
			diffIDs, err := images.RootFS(ctx, cs, m.Config)
			require.NoError(t, err)
			mounts, err := sn.View(ctx, "view-zeros", identity.ChainID(diffIDs).String())
			require.NoError(t, err)
			require.NoError(t, mount.WithReadonlyTempMount(ctx, mounts, func(root string) error {
				fi, err := os.Stat(filepath.Join(root, "zeros"))
				require.NoError(t, err)
				require.Equal(t, int64(zerosSize), fi.Size())
				return nil
			}))
		})
	}
}

// TestOnePassBaseLayerWhiteouts imports an image whose base layer holds a whiteout and an opaque
// directory's marker, with one pass and without, and requires the same root: containerd's
// applier removes what they hide (nothing, at the bottom) and creates neither a whiteout device
// nor an opaque xattr there. The layer above, whose whiteouts are overlay's, is one pass's.
func TestOnePassBaseLayerWhiteouts(t *testing.T) {
	base := layerTar(t,
		layerEntry{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "etc/.wh.gone", typ: tar.TypeReg, mode: 0o644},
		layerEntry{name: "etc/kept", typ: tar.TypeReg, mode: 0o644, body: "kept"},
		layerEntry{name: "opt/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "opt/a", typ: tar.TypeReg, mode: 0o644, body: "a"},
		layerEntry{name: "opt/.wh..wh..opq", typ: tar.TypeReg, mode: 0o644},
		layerEntry{name: "opt/b", typ: tar.TypeReg, mode: 0o644, body: "b"},
	)
	upper := layerTar(t,
		layerEntry{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "etc/.wh.kept", typ: tar.TypeReg, mode: 0o644},
		layerEntry{name: "srv/c", typ: tar.TypeReg, mode: 0o644, body: "c"},
	)
	img := preloadtest.NewImage(t, "docker.io/library/base-whiteouts:v1", preloadtest.ImageOptions{OS: "linux", Arch: "amd64",
		Shared: []v1.Layer{static.NewLayer(base, types.DockerUncompressedLayer), static.NewLayer(upper, types.DockerUncompressedLayer)}})
	data := preloadtest.DockerArchive(t, img)

	d := containerdtest.Start(t)
	trees := map[bool]map[string]string{}
	for _, onePass := range []bool{true, false} {
		s, err := New(t.Context(), d.Socket, WithUnpack(DefaultSnapshotter), WithOnePass(onePass),
			WithNamespace(fmt.Sprintf("base-whiteouts-%t", onePass)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		_, err = s.Import(t.Context(), bytes.NewReader(data))
		require.NoError(t, err)
		if onePass {
			layers, _ := s.UnpackCounts()
			require.Zero(t, layers, "a base layer with whiteouts is containerd's, and the layers above it")
		}
		ctx := namespaces.WithNamespace(t.Context(), s.ns)
		cs := s.client.ContentStore()
		stored, err := s.client.ImageService().Get(ctx, img.Ref)
		require.NoError(t, err)
		m, err := images.Manifest(ctx, cs, stored.Target, platforms.Default())
		require.NoError(t, err)
		diffIDs, err := images.RootFS(ctx, cs, m.Config)
		require.NoError(t, err)
		// The base layer's own snapshot, as a container's lower directory holds it.
		mounts, err := s.client.SnapshotService(DefaultSnapshotter).View(ctx, "view-base", identity.ChainID(diffIDs[:1]).String())
		require.NoError(t, err)
		require.NoError(t, mount.WithReadonlyTempMount(ctx, mounts, func(root string) error {
			trees[onePass] = tree(t, root)
			return nil
		}))
	}
	require.Equal(t, trees[false], trees[true])
	require.NotContains(t, trees[false], "etc/gone")
	require.Contains(t, trees[false], "opt/a", "an opaque marker in a base layer hides nothing of its own layer")
	ents, err := os.ReadDir(filepath.Join(d.Root, "io.containerd.snapshotter.v1.overlayfs", stageDirName))
	require.NoError(t, err)
	require.Empty(t, ents, "staged layers")
}
