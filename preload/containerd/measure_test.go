package containerd

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/isorelease"
	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/release/pack"
)

// TestMeasureMissingRealContainerd checks what a node's agent reports before a download against a
// real containerd: the node holds an older release's image, claimed by that release, that shares
// a base layer with the new release's images. The missing bytes the store reports
// (preload.MeasureMissing over BlobInfo and Unpacked) are within 10% of what importing the new
// release with unpacking adds to the content store and the snapshots (du -sb), and the cleanup it
// forecasts (ForecastCleanup) is what the cleanup then frees (RemoveUnused, once unpinned).
func TestMeasureMissingRealContainerd(t *testing.T) {
	d := containerdtest.Start(t)
	dir := t.TempDir()
	spec := pack.Spec{Seed: 11, NoBoot: true, SharedLayers: map[string]pack.Size{"base": 3 << 20},
		Archives: []pack.Archive{
			{Group: "old", Name: "old-images", Images: []pack.Image{{Ref: "rancher/harvester:v1.4.0", Shared: []string{"base"}, Layers: []pack.Size{1 << 20}}}},
			{Group: "common", Name: "harvester-images", Images: []pack.Image{
				{Ref: "rancher/harvester:v1.5.0", Shared: []string{"base"}, Layers: []pack.Size{2 << 20, 512 << 10}},
				{Ref: "rancher/harvester-webhook:v1.5.0", Shared: []string{"base"}, Layers: []pack.Size{1 << 20}},
			}},
		}}
	_, err := pack.BuildTree(t.Context(), spec, dir)
	require.NoError(t, err)
	c, err := isorelease.FromFS(os.DirFS(dir), 0)
	require.NoError(t, err)

	s, err := New(t.Context(), d.Socket, WithUnpack(DefaultSnapshotter), WithNamespace("k8s.io"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	importArchive := func(a isorelease.Archive) {
		p, err := os.ReadFile(filepath.Join(dir, a.Archive.Archive))
		require.NoError(t, err)
		_, err = s.Import(t.Context(), zstdReader(t, bytes.NewBuffer(p).Bytes()))
		require.NoError(t, err)
	}
	var images [][]preload.ImageBlob
	var keep, old []string
	for _, a := range c.Archives {
		require.NotNil(t, a.Blobs, "archive %s: pack records its blobs", a.Name())
		if a.Group == "old" {
			importArchive(a)
			old = append(old, a.Images...)
			continue
		}
		keep = append(keep, a.Images...)
		for _, ref := range a.Images {
			var bs []preload.ImageBlob
			for _, b := range a.Blobs[ref] {
				bs = append(bs, preload.ImageBlob{Digest: b.Digest, Size: b.Size, Unpacked: b.Unpacked})
			}
			images = append(images, bs)
		}
	}
	_, err = s.Pin(t.Context(), "v1.4.0", old)
	require.NoError(t, err)

	missing, err := preload.MeasureMissing(t.Context(), s, images)
	require.NoError(t, err)
	needed := map[string]bool{}
	for _, bs := range images {
		for _, b := range bs {
			needed[b.Digest] = true
		}
	}
	cleanImages, cleanBytes, err := s.ForecastCleanup(t.Context(), "v1.5.0", keep, func(d string) bool { return needed[d] })
	require.NoError(t, err)
	require.Equal(t, 1, cleanImages, "the older release's image alone")

	dirs := []string{filepath.Join(d.Root, "io.containerd.content.v1.content"), filepath.Join(d.Root, "io.containerd.snapshotter.v1.overlayfs")}
	storedBefore, unpackedBefore := duBytes(t, dirs[0]), duBytes(t, dirs[1])
	for _, a := range c.Archives {
		if a.Group != "old" {
			importArchive(a)
		}
	}
	stored, unpacked := duBytes(t, dirs[0])-storedBefore, duBytes(t, dirs[1])-unpackedBefore
	// Every missing chain's snapshot adds its directories besides its files' bytes
	// (forecast.SnapshotOverheadBytes).
	predicted := missing.StoredBytes + missing.UnpackedBytes + int64(missing.Layers)*(16<<10)
	t.Logf("reported missing %d blobs of %d, %d stored bytes, %d layers, %d unpacked bytes; actual %d content, %d snapshots: actual / reported %.3f; cleanup %d image(s), %d bytes",
		missing.MissingBlobs, missing.Blobs, missing.StoredBytes, missing.Layers, missing.UnpackedBytes, stored, unpacked,
		float64(stored+unpacked)/float64(predicted), cleanImages, cleanBytes)
	require.Less(t, missing.MissingBlobs, missing.Blobs, "the shared base layer is held")
	require.InEpsilon(t, missing.StoredBytes, stored, 0.10, "content store")
	require.InEpsilon(t, missing.UnpackedBytes+int64(missing.Layers)*(16<<10), unpacked, 0.10, "snapshots")
	require.InEpsilon(t, predicted, stored+unpacked, 0.10, "both")

	// Once the new release runs, the older one's claim is withdrawn and its image removed: what it
	// frees is what was forecast.
	_, err = s.Unpin(t.Context(), func(rel string) bool { return rel == "v1.4.0" })
	require.NoError(t, err)
	r, err := s.RemoveUnused(t.Context(), old, true)
	require.NoError(t, err)
	require.Equal(t, old, r.Removed)
	require.Equal(t, r.Bytes, cleanBytes)
	require.Positive(t, cleanBytes)

	// Measured again, the release is held but for its manifests: the importer writes its own for a
	// docker save archive, of other digests than the index records (a few hundred bytes each).
	again, err := preload.MeasureMissing(t.Context(), s, images)
	require.NoError(t, err)
	require.Zero(t, again.Layers)
	require.LessOrEqual(t, again.MissingBlobs, len(images))
	require.Less(t, again.StoredBytes, int64(len(images))<<10)
}
