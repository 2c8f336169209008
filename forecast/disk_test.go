package forecast

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDisk(t *testing.T) {
	t.Parallel()
	const gib = int64(1) << 30
	rel := Release{ISOBytes: 6 * gib, Archives: []Archive{
		{Name: "common", Images: []string{"a", "b", "c", "d"}, CompressedBytes: 2 * gib, TarBytes: 4 * gib},
		{Name: "rke2", Images: []string{"e", "a"}, CompressedBytes: 1 * gib},
	}}
	fs := func(id string, free, total int64) Filesystem {
		return Filesystem{ID: id, Path: "/" + id, FreeBytes: free, TotalBytes: total}
	}
	heldAB := func(ref string) bool { return ref == "a" || ref == "b" }
	tests := []struct {
		name string
		node Node
		// iso, stored are the bytes expected in the cache and in the content store; archive the
		// compressed bytes the preload reads.
		iso, stored, archive int64
		missing              int
		estimated            bool
		uses                 []string
		problems             []string
	}{
		{name: "nothing held, room everywhere", node: Node{Name: "n", Cache: fs("cache", 100*gib, 200*gib), Containerd: fs("ctr", 100*gib, 200*gib)},
			iso: 6 * gib, stored: 6 * gib, archive: 3 * gib, missing: 5, estimated: true, uses: []string{"ISO", "images"}},
		{name: "ISO held, half the common archive held", node: Node{Name: "n", HoldsISO: true, Held: heldAB,
			Cache: fs("cache", 100*gib, 200*gib), Containerd: fs("ctr", 100*gib, 200*gib)},
			// common: 4 GiB × 2/4; rke2: 2 GiB (1 GiB × UnpackedRatio) × 1/2.
			iso: 0, stored: 3 * gib, archive: 3 * gib, missing: 3, estimated: true, uses: []string{"ISO", "images"}},
		{name: "cache too small for the ISO", node: Node{Name: "n", Cache: fs("cache", 5*gib, 200*gib), Containerd: fs("ctr", 100*gib, 200*gib)},
			iso: 6 * gib, stored: 6 * gib, archive: 3 * gib, missing: 5, estimated: true, uses: []string{"ISO", "images"},
			problems: []string{"ISO needs 6.0 GiB in /cache, 5.0 GiB free"}},
		{name: "images cross the kubelet's GC threshold", node: Node{Name: "n", ImageGCHighPercent: 50,
			Cache: fs("cache", 100*gib, 200*gib), Containerd: fs("ctr", 50*gib, 100*gib)},
			iso: 6 * gib, stored: 6 * gib, archive: 3 * gib, missing: 5, estimated: true, uses: []string{"ISO", "images"},
			problems: []string{"images (12.0 GiB) would fill /ctr to 62.0%, past the kubelet's image GC threshold of 50% (50.0 GiB free of 100.0 GiB)"}},
		{name: "default threshold 85%", node: Node{Name: "n", Cache: fs("cache", 100*gib, 200*gib), Containerd: fs("ctr", 20*gib, 100*gib)},
			iso: 6 * gib, stored: 6 * gib, archive: 3 * gib, missing: 5, estimated: true, uses: []string{"ISO", "images"},
			problems: []string{"images (12.0 GiB) would fill /ctr to 92.0%, past the kubelet's image GC threshold of 85% (20.0 GiB free of 100.0 GiB)"}},
		{name: "one file system for both", node: Node{Name: "n", Cache: fs("root", 20*gib, 100*gib), Containerd: fs("root", 20*gib, 100*gib)},
			iso: 6 * gib, stored: 6 * gib, archive: 3 * gib, missing: 5, estimated: true, uses: []string{"ISO and images"},
			problems: []string{"ISO and images (18.0 GiB) would fill /root to 98.0%, past the kubelet's image GC threshold of 85% (20.0 GiB free of 100.0 GiB)"}},
		{name: "no file system reported", node: Node{Name: "n"}, iso: 6 * gib, stored: 6 * gib, archive: 3 * gib, missing: 5, estimated: true},
		{name: "an archive whose every image is held is not read", node: Node{Name: "n", HoldsISO: true,
			Held: func(ref string) bool { return ref == "e" || ref == "a" }},
			// common: 4 GiB × 3/4 stored, its 2 GiB read whole; rke2: nothing.
			iso: 0, stored: 3 * gib, archive: 2 * gib, missing: 3, estimated: true},
		{name: "everything held", node: Node{Name: "n", HoldsISO: true, Held: func(string) bool { return true },
			Cache: fs("cache", 1, 200*gib), Containerd: fs("ctr", 1, 200*gib)}, missing: 0, uses: []string{"ISO", "images"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := Disk(rel, tt.node)
			require.Equal(t, tt.iso, d.ISOBytes)
			require.Equal(t, tt.stored, d.ImagesStoredBytes)
			require.Equal(t, tt.stored, d.ImagesUnpackedBytes)
			require.Equal(t, tt.archive, d.ArchiveBytes)
			require.Equal(t, tt.iso+2*tt.stored, d.AddedBytes())
			require.Equal(t, tt.missing, d.ImagesMissing)
			require.Equal(t, 5, d.ImagesTotal)
			require.Equal(t, tt.estimated, d.Estimated)
			var uses []string
			for _, u := range d.Filesystems {
				uses = append(uses, u.What)
			}
			require.Equal(t, tt.uses, uses)
			require.Equal(t, tt.problems, d.Problems())
		})
	}
}

func TestDiskImageLevelIsEstimated(t *testing.T) {
	t.Parallel()
	// An archive that says its tar's size but not its blobs is still an estimate: its layers
	// may be shared or compressed.
	d := Disk(Release{Archives: []Archive{{Images: []string{"x"}, CompressedBytes: 10, TarBytes: 30}}}, Node{Name: "n"})
	require.True(t, d.Estimated)
	require.Equal(t, int64(60), d.AddedBytes())
}

func TestDiskLayers(t *testing.T) {
	t.Parallel()
	const (
		ov  = SnapshotOverheadBytes
		mib = int64(1) << 20
	)
	// base is shared by every image of both archives; gz is a layer stored compressed.
	base := Blob{Digest: "sha256:base", Size: 3 * mib, UnpackedSize: 3 * mib}
	own := func(name string, size int64) Blob {
		return Blob{Digest: "sha256:" + name, Size: size, UnpackedSize: size}
	}
	meta := func(name string) []Blob {
		return []Blob{{Digest: "sha256:m-" + name, Size: 500}, {Digest: "sha256:c-" + name, Size: 300}}
	}
	gz := Blob{Digest: "sha256:gz", Size: 3 * mib, UnpackedSize: 7 * mib}
	rel := Release{Archives: []Archive{
		{Name: "common", Images: []string{"a", "b"}, TarBytes: 10 * mib, Blobs: map[string][]Blob{
			"a": append(meta("a"), base, own("a1", 2*mib)),
			"b": append(meta("b"), base, own("b1", 1*mib)),
		}},
		{Name: "extra", Images: []string{"c", "a"}, TarBytes: 7 * mib, Blobs: map[string][]Blob{
			"c": append(meta("c"), base, gz),
			"a": append(meta("a"), base, own("a1", 2*mib)),
		}},
	}}
	tests := []struct {
		name             string
		rel              Release
		node             Node
		stored, unpacked int64
		missing, total   int
		estimated        bool
		cleanup          int64
		cleanupAfter     string
		// basis is the Basis expected; empty: BasisBlobs.
		basis string
	}{
		{name: "nothing held: each blob once, the compressed layer unpacked in full", rel: rel, node: Node{Name: "n"},
			stored: 3*800 + 3*mib + 2*mib + 1*mib + 3*mib, unpacked: 3*mib + 2*mib + 1*mib + 7*mib + 4*ov, missing: 3, total: 3},
		{name: "image a held", rel: rel, node: Node{Name: "n", Held: func(ref string) bool { return ref == "a" }},
			stored: 2*800 + 3*mib + 1*mib + 3*mib, unpacked: 3*mib + 1*mib + 7*mib + 3*ov, missing: 2, total: 3},
		{name: "the base layer held by an older image", rel: rel, node: Node{Name: "n", HeldBlob: func(d string) bool { return d == base.Digest }},
			stored: 3*800 + 2*mib + 1*mib + 3*mib, unpacked: 2*mib + 1*mib + 7*mib + 3*ov, missing: 3, total: 3},
		{name: "an archive without blobs is estimated, the others counted", node: Node{Name: "n"},
			rel:    Release{Archives: []Archive{rel.Archives[0], {Name: "old", Images: []string{"x"}, TarBytes: 5 * mib}}},
			stored: 2*800 + 3*mib + 2*mib + 1*mib + 5*mib, unpacked: 3*mib + 2*mib + 1*mib + 3*ov + 5*mib, missing: 3, total: 3, estimated: true},
		{name: "cleanup after the soak shown, never room", rel: rel, node: Node{Name: "n", CleanupBytes: 9 * mib, CleanupAfter: CleanupAfterSoak},
			stored: 3*800 + 3*mib + 2*mib + 1*mib + 3*mib, unpacked: 3*mib + 2*mib + 1*mib + 7*mib + 4*ov, missing: 3, total: 3,
			cleanup: 9 * mib, cleanupAfter: CleanupAfterSoak},
		{name: "no cleanup bytes: no time either", rel: rel, node: Node{Name: "n", CleanupAfter: CleanupAfterPlan},
			stored: 3*800 + 3*mib + 2*mib + 1*mib + 3*mib, unpacked: 3*mib + 2*mib + 1*mib + 7*mib + 4*ov, missing: 3, total: 3},
		{name: "the node's measure stands for every blob, once", rel: rel,
			node:   Node{Name: "n", Measured: &Measured{StoredBytes: 5 * mib, Layers: 2, UnpackedBytes: 8 * mib}},
			stored: 5 * mib, unpacked: 8*mib + 2*ov, missing: 3, total: 3, basis: BasisMeasured},
		{name: "the node's measure over HeldBlob and Held", rel: rel,
			node: Node{Name: "n", Measured: &Measured{StoredBytes: 1 * mib, Layers: 1, UnpackedBytes: 1 * mib},
				HeldBlob: func(string) bool { return false }, Held: func(ref string) bool { return ref == "a" }},
			stored: 1 * mib, unpacked: 1*mib + ov, missing: 2, total: 3, basis: BasisMeasured},
		{name: "the node's measure with an archive without blobs: that one estimated", node: Node{Name: "n", Measured: &Measured{StoredBytes: 1 * mib}},
			rel:    Release{Archives: []Archive{rel.Archives[0], {Name: "old", Images: []string{"x"}, TarBytes: 5 * mib}}},
			stored: 1*mib + 5*mib, unpacked: 5 * mib, missing: 3, total: 3, estimated: true, basis: BasisMeasured},
		{name: "no archive with blobs: a measure has nothing to stand for", node: Node{Name: "n", Measured: &Measured{StoredBytes: 1 * mib}},
			rel:    Release{Archives: []Archive{{Name: "old", Images: []string{"x"}, TarBytes: 5 * mib}}},
			stored: 5 * mib, unpacked: 5 * mib, missing: 1, total: 1, estimated: true, basis: BasisImages},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := Disk(tt.rel, tt.node)
			require.Equal(t, tt.stored, d.ImagesStoredBytes)
			require.Equal(t, tt.unpacked, d.ImagesUnpackedBytes)
			require.Equal(t, tt.missing, d.ImagesMissing)
			require.Equal(t, tt.total, d.ImagesTotal)
			require.Equal(t, tt.estimated, d.Estimated)
			require.Equal(t, tt.cleanup, d.CleanupBytes)
			require.Equal(t, tt.cleanupAfter, d.CleanupAfter)
			require.Equal(t, tt.stored+tt.unpacked, d.AddedBytes(), "the cleanup makes no room")
			if tt.basis == "" {
				tt.basis = BasisBlobs
			}
			require.Equal(t, tt.basis, d.Basis)
		})
	}
}
