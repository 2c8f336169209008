package preload

import (
	"context"
	"fmt"
)

// Measuring what a release would add to a node, before it is downloaded.
//
// The release's blob index (release.BlobsFile) names every blob of every image; the node's store
// says which of them its content store holds and which layer chains its snapshotter has unpacked.
// What is missing is what an import of the release writes.

// BlobChecker is an optional capability of a Store, found by type assertion: telling which blobs
// and unpacked layers it holds. Its methods only read, return when ctx ends, and are safe for
// concurrent use.
type BlobChecker interface {
	// BlobInfo reports whether the content store holds the blob dgst (sha256:...) and, for a
	// layer, the digest of its uncompressed tar as the store records it (its diff ID: the
	// containerd.io/uncompressed label, or dgst itself for a blob stored uncompressed); diffID
	// is "" when the store records none. A blob the store lacks is (false, "", nil).
	BlobInfo(ctx context.Context, dgst string) (held bool, diffID string, err error)
	// Unpacked reports whether the store's snapshotter holds the committed snapshot of the
	// layers diffIDs, bottom first (their chain). A store that does not unpack says false.
	Unpacked(ctx context.Context, diffIDs []string) (bool, error)
}

// CleanupForecaster is an optional capability of a Store, found by type assertion: what the
// cleanup of the releases a node ran before would free once it runs another. It only reads and
// is safe for concurrent use.
type CleanupForecaster interface {
	// ForecastCleanup returns what the cleanup after the node moves to release target, whose
	// images are keep, would remove: the images that releases other than target claim (and that
	// no operator pinned), that keep does not name, and the content bytes of the blobs only
	// they reference (compressed sizes, as Removal.Bytes counts them), less the blobs needed
	// reports the target's images reference (they stay, under the target's images, once
	// imported); needed may be nil. Containers are not asked: the previous release's are
	// replaced by the upgrade before its cleanup runs.
	ForecastCleanup(ctx context.Context, target string, keep []string, needed func(digest string) bool) (images int, bytes int64, err error)
}

// ImageBlob is one blob of an image as a release's blob index records it.
type ImageBlob struct {
	// Digest names it.
	Digest string
	// Size is its size in the content store; Unpacked, for a layer, its uncompressed tar's (0
	// for a manifest or a config).
	Size, Unpacked int64
}

// Missing is what a store lacks of a release's images.
type Missing struct {
	// Blobs counts the distinct blobs checked, MissingBlobs those the content store lacks.
	Blobs, MissingBlobs int
	// StoredBytes is the size of the blobs the content store lacks.
	StoredBytes int64
	// Layers counts the distinct layer chains the snapshotter lacks, and UnpackedBytes their
	// top layers' uncompressed sizes: what unpacking them adds.
	Layers        int
	UnpackedBytes int64
}

// maxMeasureBlobs bounds the blobs one MeasureMissing asks the store about.
const maxMeasureBlobs = 100_000

// MeasureMissing returns what c lacks of the images: for each image, its blobs as the release
// records them (manifest, config, then layers bottom first). A blob is counted once however many
// images share it. A layer is unpacked when its chain is: the layers under it in the image held
// too, with their diff IDs known, and the snapshot of the chain present; a chain the store lacks
// counts its top layer's uncompressed size once, however many images share it. Blobs are counted
// as stored where the index does not say which are layers (Unpacked 0).
func MeasureMissing(ctx context.Context, c BlobChecker, images [][]ImageBlob) (Missing, error) {
	var m Missing
	type info struct {
		held   bool
		diffID string
	}
	seen := map[string]info{}
	look := func(b ImageBlob) (info, error) {
		if in, ok := seen[b.Digest]; ok {
			return in, nil
		}
		if len(seen) >= maxMeasureBlobs {
			return info{}, fmt.Errorf("more than %d blobs", maxMeasureBlobs)
		}
		held, diffID, err := c.BlobInfo(ctx, b.Digest)
		if err != nil {
			return info{}, fmt.Errorf("blob %s: %w", b.Digest, err)
		}
		in := info{held: held, diffID: diffID}
		seen[b.Digest] = in
		m.Blobs++
		if !held {
			m.MissingBlobs++
			m.StoredBytes += b.Size
		}
		return in, nil
	}
	chains := map[string]bool{}
	for _, blobs := range images {
		// The chain so far, as diff IDs; broken once a layer under the next one is unknown.
		var chain []string
		broken := false
		key := ""
		for _, b := range blobs {
			in, err := look(b)
			if err != nil {
				return m, err
			}
			if b.Unpacked <= 0 {
				continue
			}
			key += b.Digest + " "
			if in.held && in.diffID != "" && !broken {
				chain = append(chain, in.diffID)
			} else {
				broken = true
			}
			if _, done := chains[key]; done {
				continue
			}
			ok := false
			if !broken {
				if ok, err = c.Unpacked(ctx, chain); err != nil {
					return m, fmt.Errorf("layer %s: %w", b.Digest, err)
				}
			}
			chains[key] = ok
			if !ok {
				m.Layers++
				m.UnpackedBytes += b.Unpacked
			}
		}
	}
	return m, nil
}
