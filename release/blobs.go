package release

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
)

// BlobsFile is the index of the bundle's image blobs that `release pack` writes: for each
// archive, the blobs of each of its images, and each blob's sizes. Older ISOs, and the product's
// own, do not have it: a disk forecast then estimates from the archives' sizes.
const BlobsFile = "bundle/blobs.json"

// Blobs is BlobsFile: what each image of each archive brings to a node's containerd, blob by
// blob, before any archive is read.
type Blobs struct {
	// Archives are the bundle's archives by path (fs.FS form, as Archive.Archive).
	Archives []ArchiveBlobs `json:"archives"`
	// Sizes are every blob's sizes, by digest.
	Sizes map[string]BlobSize `json:"sizes"`
}

// ArchiveBlobs is one archive's images and their blobs.
type ArchiveBlobs struct {
	// Archive is the archive's path (fs.FS form).
	Archive string `json:"archive"`
	// Images are, by normalised reference, the digests of each image's blobs: its manifest, its
	// config and its layers, in that order.
	Images map[string][]string `json:"images"`
}

// BlobSize is what one blob takes once imported.
type BlobSize struct {
	// Size is the blob's size as the archive stores it: what containerd's content store holds.
	Size int64 `json:"size"`
	// Unpacked is, for a layer, the size of its uncompressed tar: what its snapshot holds once
	// unpacked. 0 for a manifest or a config.
	Unpacked int64 `json:"unpacked,omitempty"`
}

// Archive returns the blobs of the archive at path, or nil.
func (b *Blobs) Archive(path string) *ArchiveBlobs {
	for i := range b.Archives {
		if b.Archives[i].Archive == path {
			return &b.Archives[i]
		}
	}
	return nil
}

// ParseBlobs parses BlobsFile. Every digest an image names must have its sizes, and no size may
// be negative.
func ParseBlobs(data []byte) (*Blobs, error) {
	var b Blobs
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("parse %s: %w", BlobsFile, err)
	}
	for _, a := range b.Archives {
		for ref, digests := range a.Images {
			for _, d := range digests {
				s, ok := b.Sizes[d]
				if !ok || !strings.HasPrefix(d, "sha256:") {
					return nil, fmt.Errorf("parse %s: archive %s: image %s: blob %q has no sizes", BlobsFile, a.Archive, ref, d)
				}
				if s.Size < 0 || s.Unpacked < 0 {
					return nil, fmt.Errorf("parse %s: blob %s: negative size", BlobsFile, d)
				}
			}
		}
	}
	return &b, nil
}

// LoadBlobs reads and parses BlobsFile from fsys. A release without it returns an error that
// matches fs.ErrNotExist.
func LoadBlobs(fsys fs.FS) (*Blobs, error) {
	data, err := readSmall(fsys, BlobsFile)
	if err != nil {
		return nil, err
	}
	return ParseBlobs(data)
}
