package containerd

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/forecast"
	"github.com/upgrade-repo/upgrade-repo/isorelease"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
	"github.com/upgrade-repo/upgrade-repo/release/pack"
)

// TestDiskForecastRealContainerd checks the disk forecast against a real containerd: a release
// packed by release pack (its blob index read back as a plan reads it) whose images share a base
// layer with an image the node already holds, and one of whose layers is stored gzip-compressed,
// is predicted (forecast.Disk, the held blobs asked of containerd) within 10% of what importing
// it with unpacking adds to containerd's content store and snapshots, counted as the kind e2e
// counts them (du -sb).
func TestDiskForecastRealContainerd(t *testing.T) {
	d := containerdtest.Start(t)
	dir := t.TempDir()
	// A layer of text, stored gzip-compressed: it unpacks to many times its stored bytes.
	var lt bytes.Buffer
	tw := tar.NewWriter(&lt)
	text := []byte(strings.Repeat("the release's own binary, compressible\n", 100_000))
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/tool", Mode: 0o755, Size: int64(len(text))}))
	_, err := tw.Write(text)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	gz, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(lt.Bytes())), nil })
	require.NoError(t, err)
	tool := preloadtest.NewImage(t, "docker.io/rancher/tool:v2", preloadtest.ImageOptions{OS: "linux", Arch: "amd64", Shared: []v1.Layer{gz}})
	tb := filepath.Join(t.TempDir(), "tool.tar")
	require.NoError(t, os.WriteFile(tb, preloadtest.DockerArchive(t, tool), 0o600))

	spec := pack.Spec{Seed: 7, NoBoot: true, SharedLayers: map[string]pack.Size{"base": 3 << 20},
		Archives: []pack.Archive{
			{Group: "old", Name: "old-images", Images: []pack.Image{{Ref: "rancher/harvester:v1.4.0", Shared: []string{"base"}, Layers: []pack.Size{1 << 20}}}},
			{Group: "common", Name: "harvester-images", Images: []pack.Image{
				{Ref: "rancher/harvester:v1.5.0", Shared: []string{"base"}, Layers: []pack.Size{2 << 20, 512 << 10}},
				{Ref: "rancher/harvester-webhook:v1.5.0", Shared: []string{"base"}, Layers: []pack.Size{1 << 20}},
			}},
			{Group: "rke2", Name: "rke2-images", Images: []pack.Image{{Ref: "rancher/rke2-runtime:v1.32.7", Shared: []string{"base"}, Layers: []pack.Size{1 << 20}}},
				Tarballs: []string{tb}},
		}}
	_, err = pack.BuildTree(t.Context(), spec, dir)
	require.NoError(t, err)
	c, err := isorelease.FromFS(os.DirFS(dir), 0)
	require.NoError(t, err)

	s, err := New(t.Context(), d.Socket, WithUnpack(DefaultSnapshotter), WithNamespace("k8s.io"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	importArchive := func(a isorelease.Archive) {
		f, err := os.Open(filepath.Join(dir, a.Archive.Archive))
		require.NoError(t, err)
		defer f.Close()
		var b bytes.Buffer
		_, err = b.ReadFrom(f)
		require.NoError(t, err)
		_, err = s.Import(t.Context(), zstdReader(t, b.Bytes()))
		require.NoError(t, err)
	}
	// The node holds the previous release's image: the base layer among its blobs.
	var rel forecast.Release
	for _, a := range c.Archives {
		require.NotNil(t, a.Blobs, "archive %s: pack records its blobs", a.Name())
		if a.Group == "old" {
			importArchive(a)
			continue
		}
		rel.Archives = append(rel.Archives, forecast.Archive{Name: a.Name(), Images: a.Images, CompressedBytes: a.Size,
			TarBytes: a.TarBytes, Blobs: forecastBlobs(a.Blobs)})
	}
	cs := s.client.ContentStore()
	held := func(dgst string) bool {
		_, err := cs.Info(s.nsctx(t.Context()), digest.Digest(dgst))
		return err == nil
	}
	predicted := forecast.Disk(rel, forecast.Node{Name: "n", HeldBlob: held})
	estimate := forecast.Disk(forecast.Release{Archives: withoutBlobs(rel.Archives)}, forecast.Node{Name: "n"})
	require.False(t, predicted.Estimated)

	dirs := []string{filepath.Join(d.Root, "io.containerd.content.v1.content"), filepath.Join(d.Root, "io.containerd.snapshotter.v1.overlayfs")}
	storedBefore, unpackedBefore := duBytes(t, dirs[0]), duBytes(t, dirs[1])
	for _, a := range c.Archives {
		if a.Group != "old" {
			importArchive(a)
		}
	}
	stored, unpacked := duBytes(t, dirs[0])-storedBefore, duBytes(t, dirs[1])-unpackedBefore
	actual := stored + unpacked
	t.Logf("predicted %d bytes (%d stored, %d unpacked); actual %d (%d content, %d snapshots): actual / predicted %.3f; the image-level estimate %d (%.3f)",
		predicted.AddedBytes(), predicted.ImagesStoredBytes, predicted.ImagesUnpackedBytes, actual, stored, unpacked,
		float64(actual)/float64(predicted.AddedBytes()), estimate.AddedBytes(), float64(actual)/float64(estimate.AddedBytes()))
	require.InEpsilon(t, predicted.ImagesStoredBytes, stored, 0.10, "content store")
	require.InEpsilon(t, predicted.ImagesUnpackedBytes, unpacked, 0.10, "snapshots")
	require.InEpsilon(t, predicted.AddedBytes(), actual, 0.10, "both")
}

// forecastBlobs is an archive's blob index as the forecast reads it (the sequencer's mapping).
func forecastBlobs(in map[string][]isorelease.Blob) map[string][]forecast.Blob {
	out := map[string][]forecast.Blob{}
	for ref, bs := range in {
		for _, b := range bs {
			out[ref] = append(out[ref], forecast.Blob{Digest: b.Digest, Size: b.Size, UnpackedSize: b.Unpacked})
		}
	}
	return out
}

func withoutBlobs(in []forecast.Archive) []forecast.Archive {
	out := make([]forecast.Archive, len(in))
	for i, a := range in {
		a.Blobs = nil
		out[i] = a
	}
	return out
}

// duBytes is what du -sb counts under dir: the apparent size of every file and directory, a
// file with several links once.
func duBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	seen := map[uint64]bool{}
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // gone while walked (an ingest committed)
		}
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return nil //nolint:nilerr // gone while walked
		}
		if !seen[st.Ino] {
			seen[st.Ino] = true
			n += st.Size
		}
		return nil
	})
	require.NoError(t, err)
	return n
}
