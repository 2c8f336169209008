package forecast

import (
	"fmt"
)

// The kubelet's image garbage collection thresholds when its configuration sets none
// (imageGCHighThresholdPercent and imageGCLowThresholdPercent).
const (
	DefaultImageGCHighPercent = 85
	DefaultImageGCLowPercent  = 80
)

// UnpackedRatio is how many bytes an image archive's tar holds for each byte of its zstd
// compression, assumed when the archive's frame header does not say (a stream compressed from
// a pipe). Image layers compress about 2 to 3 times; the lower figure keeps the forecast from
// promising room that is not there only when the archive says nothing.
const UnpackedRatio = 2.0

// Filesystem is a node's file system as its agent measured it (statfs).
type Filesystem struct {
	// ID tells file systems apart: two paths with the same ID share their space. Empty makes
	// the file system distinct from every other.
	ID string
	// Path is where the agent measured it, for the message.
	Path string
	// FreeBytes is the space left to an unprivileged writer; TotalBytes the file system's size.
	FreeBytes, TotalBytes int64
}

// Known reports whether the file system was measured.
func (f Filesystem) Known() bool { return f.TotalBytes > 0 }

// SnapshotOverheadBytes is what an unpacked layer adds to containerd's overlayfs snapshots
// besides its files' bytes: the snapshot's directories (the snapshot, fs, work) and those of
// the layer's tree. Measured against a real containerd (preload/containerd's
// TestDiskForecastRealContainerd): 14 KiB a layer when containerd unpacks, a little more when
// the agent does; 16 KiB is what the forecast adds.
const SnapshotOverheadBytes = 16 << 10

// Blob is one blob of an image as containerd keeps it once imported: its manifest, its config
// or one of its layers.
type Blob struct {
	// Digest names it (sha256:...): a blob the node holds already, or that another image of the
	// release brings, is not written again.
	Digest string
	// Size is its size as the archive stores it, what containerd's content store holds: a layer
	// saved uncompressed (docker save) counts its tar, one saved compressed its compressed bytes.
	Size int64
	// UnpackedSize is, for a layer, the size of its uncompressed tar: what its snapshot holds
	// once unpacked (its files' bytes, within a few KiB). 0 for a manifest or a config.
	UnpackedSize int64
}

// Archive is one image archive of the release.
type Archive struct {
	// Name names it in messages.
	Name string
	// Images are the references its image list names.
	Images []string
	// CompressedBytes is the archive's size in the ISO.
	CompressedBytes int64
	// TarBytes is the size of its tar once decompressed, as its zstd frame header says; 0 when
	// it does not say, and CompressedBytes × UnpackedRatio is assumed.
	TarBytes int64
	// Blobs are, by image reference, the blobs of each image (manifest, config, layers), as
	// the release's ISO records them (release pack writes them); nil for an ISO that does not,
	// whose images are then estimated from TarBytes.
	Blobs map[string][]Blob
}

// layered reports whether a's blobs are known for every image it names (Layered).
func (a Archive) layered() bool { return Layered(a.Images, a.Blobs) }

// Layered reports whether blobs, by image reference, holds the blobs of every one of images:
// an archive so recorded is counted blob by blob, any other is estimated from its size. The
// agent, which measures what a node lacks of the blobs, asks it of the ISO's own records.
func Layered[B any](images []string, blobs map[string][]B) bool {
	if len(images) == 0 || blobs == nil {
		return false
	}
	for _, ref := range images {
		if _, ok := blobs[ref]; !ok {
			return false
		}
	}
	return true
}

// Release is what the plan brings to every node.
type Release struct {
	// ISOBytes is the ISO's size; 0 when unknown.
	ISOBytes int64
	// Archives are its image archives.
	Archives []Archive
}

// Node is what a disk forecast knows of one node.
type Node struct {
	// Name is the node's name.
	Name string
	// Cache is the file system of the agent's ISO cache; Containerd that of containerd's root
	// (where the image content and the unpacked snapshots land).
	Cache, Containerd Filesystem
	// HoldsISO is true when the node's cache already holds the verified ISO.
	HoldsISO bool
	// Held reports whether the node's containerd holds an image of the release already; nil
	// holds none.
	Held func(ref string) bool
	// HeldBlob reports whether the node's containerd holds a blob (by digest) already, content
	// and, for a layer, its snapshot; nil holds none. Only archives whose blobs are known use it.
	HeldBlob func(digest string) bool
	// Measured is what the node's agent measured it lacks of the blobs of the release's archives
	// whose blobs are known; nil when it did not. It stands for them instead of Held and
	// HeldBlob.
	Measured *Measured
	// ImageGCHighPercent and ImageGCLowPercent are the kubelet's image garbage collection
	// thresholds; 0 takes the kubelet's defaults.
	ImageGCHighPercent, ImageGCLowPercent int
	// CleanupBytes is what the cleanup of the previous release frees on the node once it runs
	// (CleanupAfter); 0 when unknown.
	CleanupBytes int64
	// CleanupAfter says when that cleanup runs: CleanupAfterPlan or CleanupAfterSoak; empty
	// when it does not run (a node that keeps earlier releases' images).
	CleanupAfter string
}

// Measured is what a node's agent measured its containerd lacks of a release's blobs, the
// release's blob index checked blob by blob (RepoNode status.forecast).
type Measured struct {
	// StoredBytes is the size of the blobs its content store lacks.
	StoredBytes int64
	// Layers counts the layer chains its snapshotter lacks, UnpackedBytes their uncompressed
	// sizes; each adds SnapshotOverheadBytes besides.
	Layers        int
	UnpackedBytes int64
}

// How a forecast counted the images' bytes (NodeDisk.Basis).
const (
	// BasisMeasured: the node's agent checked the release's blobs against its containerd.
	BasisMeasured = "Measured"
	// BasisBlobs: the release's blob index, each blob counted unless the node held the release
	// (HeldBlob).
	BasisBlobs = "Blobs"
	// BasisImages: the archives' sizes, by image.
	BasisImages = "Images"
)

// When the cleanup of the previous release runs on a node, as the agents do it (docs/operating.md).
const (
	// CleanupAfterPlan: once the plan Succeeded and its ISO is dropped.
	CleanupAfterPlan = "after the plan"
	// CleanupAfterSoak: once the plan's soak ended (upgrade finalize, or its expiry), the
	// previous release kept until then for a rollback.
	CleanupAfterSoak = "after the soak"
)

// FilesystemUse is one file system of a node before and after the plan's bytes land on it.
type FilesystemUse struct {
	Filesystem
	// What names what lands on it ("ISO", "images", "ISO and images").
	What string
	// AddedBytes is what the plan writes to it.
	AddedBytes int64
	// UsedPercentAfter is its use, in percent, once they are written.
	UsedPercentAfter float64
	// ImageGCHighPercent is the kubelet's threshold that applies to it; 0 when the file system
	// holds no images.
	ImageGCHighPercent int
}

// Problem says why the bytes do not fit, or returns "".
func (u FilesystemUse) Problem() string {
	switch {
	case u.AddedBytes > u.FreeBytes:
		return fmt.Sprintf("%s needs %s in %s, %s free", u.What, Bytes(u.AddedBytes), u.where(), Bytes(u.FreeBytes))
	// A file system the plan adds nothing to is not the plan's to judge.
	case u.AddedBytes > 0 && u.ImageGCHighPercent > 0 && u.UsedPercentAfter >= float64(u.ImageGCHighPercent):
		return fmt.Sprintf("%s (%s) would fill %s to %.1f%%, past the kubelet's image GC threshold of %d%% (%s free of %s)", u.What,
			Bytes(u.AddedBytes), u.where(), u.UsedPercentAfter, u.ImageGCHighPercent, Bytes(u.FreeBytes), Bytes(u.TotalBytes))
	}
	return ""
}

func (u FilesystemUse) where() string {
	if u.Path == "" {
		return "its file system"
	}
	return u.Path
}

// NodeDisk is the forecast of one node's disk.
type NodeDisk struct {
	// Node is the node's name.
	Node string `json:"node"`
	// ISOBytes is what the ISO adds to the cache (0 when the node holds it).
	ISOBytes int64 `json:"isoBytes"`
	// ImagesStoredBytes is what the release's images the node lacks add to containerd's
	// content store; ImagesUnpackedBytes what their unpacked snapshots add besides.
	ImagesStoredBytes   int64 `json:"imagesStoredBytes"`
	ImagesUnpackedBytes int64 `json:"imagesUnpackedBytes"`
	// ArchiveBytes is how many compressed archive bytes the node's preload reads: the whole of
	// every archive of which the node lacks an image (it reads an archive in full to import
	// any of its images).
	ArchiveBytes int64 `json:"archiveBytes"`
	// ImagesMissing and ImagesTotal count the release's images the node lacks, of all.
	ImagesMissing int `json:"imagesMissing"`
	ImagesTotal   int `json:"imagesTotal"`
	// CleanupBytes is what the cleanup of the previous release frees once it runs
	// (CleanupAfter): never room for this plan, whose bytes land before it.
	CleanupBytes int64 `json:"cleanupBytes,omitempty"`
	// CleanupAfter says when the cleanup runs (CleanupAfterPlan, CleanupAfterSoak).
	CleanupAfter string `json:"cleanupAfter,omitempty"`
	// Estimated is true when bytes of an archive's images were estimated from its size (an ISO
	// that does not record its images' blobs) rather than counted blob by blob.
	Estimated bool `json:"estimated,omitempty"`
	// Basis says how the images' bytes were counted: BasisMeasured or BasisBlobs for the
	// archives whose blobs are known, BasisImages when no archive's are; empty without
	// archives.
	Basis string `json:"basis,omitempty"`
	// Filesystems are the file systems the bytes land on; empty when the node reported none.
	Filesystems []FilesystemUse `json:"filesystems,omitempty"`
}

// AddedBytes is everything the plan writes to the node.
func (d NodeDisk) AddedBytes() int64 { return d.ISOBytes + d.ImagesStoredBytes + d.ImagesUnpackedBytes }

// Problems say why the plan's bytes do not fit on the node; empty when they do.
func (d NodeDisk) Problems() []string {
	var out []string
	for _, u := range d.Filesystems {
		if p := u.Problem(); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Disk forecasts what the release r adds to node n's disk, file system by file system. The
// images' bytes are counted as containerd keeps them: the blobs in its content store as the
// archive stores them, and the snapshots the layers unpack to. Where the release records its
// images' blobs, each blob the node lacks is counted once, however many images and archives
// share it, and a blob the node holds (HeldBlob) not at all: measured against a real containerd,
// within 1% of what an import writes. An archive that does not record them is estimated
// (Estimated): its tar bytes in proportion to the images the node lacks, once as stored and
// once as unpacked, which errs high where its images share layers with other archives' or with
// the node's and low where its layers are compressed. The cleanup of the previous release frees
// its bytes only after the plan, so it never makes room for it.
func Disk(r Release, n Node) NodeDisk {
	d := NodeDisk{Node: n.Name, CleanupBytes: n.CleanupBytes, CleanupAfter: n.CleanupAfter}
	if n.CleanupBytes <= 0 {
		d.CleanupAfter = ""
	}
	if !n.HoldsISO {
		d.ISOBytes = r.ISOBytes
	}
	held := func(ref string) bool { return n.Held != nil && n.Held(ref) }
	seen := map[string]bool{}
	written := map[string]bool{}
	if len(r.Archives) > 0 {
		d.Basis = BasisImages
	}
	for _, a := range r.Archives {
		missing := 0
		for _, ref := range a.Images {
			h := held(ref)
			if !seen[ref] {
				seen[ref] = true
				d.ImagesTotal++
				if !h {
					d.ImagesMissing++
				}
			}
			if !h {
				missing++
			}
		}
		// The preload reads an archive whole to import any image of it, however its bytes count.
		if missing > 0 {
			d.ArchiveBytes += a.CompressedBytes
		}
		if a.layered() && n.Measured != nil {
			if d.Basis != BasisMeasured {
				// The node measured every layered archive at once: counted once.
				d.Basis = BasisMeasured
				d.ImagesStoredBytes += n.Measured.StoredBytes
				d.ImagesUnpackedBytes += n.Measured.UnpackedBytes + int64(n.Measured.Layers)*SnapshotOverheadBytes
			}
			continue
		}
		if a.layered() {
			d.Basis = BasisBlobs
			for _, ref := range a.Images {
				if held(ref) {
					continue
				}
				for _, b := range a.Blobs[ref] {
					if written[b.Digest] || (n.HeldBlob != nil && n.HeldBlob(b.Digest)) {
						continue
					}
					written[b.Digest] = true
					d.ImagesStoredBytes += b.Size
					if b.UnpackedSize > 0 {
						d.ImagesUnpackedBytes += b.UnpackedSize + SnapshotOverheadBytes
					}
				}
			}
			continue
		}
		tar := a.TarBytes
		if tar <= 0 {
			tar = int64(float64(a.CompressedBytes) * UnpackedRatio)
		}
		var add int64
		switch {
		case len(a.Images) == 0:
			add = tar
		default:
			add = tar * int64(missing) / int64(len(a.Images))
		}
		d.Estimated = d.Estimated || add > 0
		d.ImagesStoredBytes += add
		d.ImagesUnpackedBytes += add
	}
	d.Filesystems = uses(d, n)
	return d
}

// uses places d's bytes on n's file systems: the ISO on the cache's, the images on
// containerd's, both on one when they share it.
func uses(d NodeDisk, n Node) []FilesystemUse {
	high := n.ImageGCHighPercent
	if high <= 0 {
		high = DefaultImageGCHighPercent
	}
	images := d.ImagesStoredBytes + d.ImagesUnpackedBytes
	var out []FilesystemUse
	shared := n.Cache.Known() && n.Containerd.Known() && n.Cache.ID != "" && n.Cache.ID == n.Containerd.ID
	switch {
	case shared:
		out = append(out, use(n.Containerd, "ISO and images", d.ISOBytes+images, high))
	default:
		if n.Cache.Known() {
			out = append(out, use(n.Cache, "ISO", d.ISOBytes, 0))
		}
		if n.Containerd.Known() {
			out = append(out, use(n.Containerd, "images", images, high))
		}
	}
	return out
}

func use(f Filesystem, what string, added int64, high int) FilesystemUse {
	u := FilesystemUse{Filesystem: f, What: what, AddedBytes: added, ImageGCHighPercent: high}
	used := f.TotalBytes - f.FreeBytes + added
	u.UsedPercentAfter = 100 * float64(used) / float64(f.TotalBytes)
	return u
}

// Bytes prints n bytes for humans, in powers of 1024 ("6.0 GiB"): the one form the plan's
// messages, its views and the commands use.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
