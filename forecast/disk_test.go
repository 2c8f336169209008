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
			Cache: fs("cache", 1, 200*gib), Containerd: fs("ctr", 1, 200*gib)}, missing: 0, estimated: true, uses: []string{"ISO", "images"}},
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

func TestDiskExactWhenEveryArchiveSaysItsSize(t *testing.T) {
	t.Parallel()
	d := Disk(Release{Archives: []Archive{{Images: []string{"x"}, CompressedBytes: 10, TarBytes: 30}}}, Node{Name: "n"})
	require.False(t, d.Estimated)
	require.Equal(t, int64(60), d.AddedBytes())
}
