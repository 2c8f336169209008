package isorelease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/release"
)

// Contents is what a release ISO holds, as far as judging an upgrade needs.
type Contents struct {
	// Release is the ISO's harvester-release.yaml.
	Release *release.Release `json:"release"`
	// Archives are the image archives of its bundle, each with its image list and size; empty
	// when the ISO has no bundle.
	Archives []Archive `json:"archives,omitempty"`
	// Size is the ISO's size in bytes.
	Size int64 `json:"size"`
	// Requests and Bytes are what reading a remote ISO cost (0 for a local one).
	Requests int64 `json:"requests,omitempty"`
	Bytes    int64 `json:"bytes,omitempty"`
}

// Archive is one image archive of the bundle.
type Archive struct {
	release.Archive
	// Images are the references of its image list, normalised.
	Images []string `json:"images"`
	// Size is the archive's size in bytes.
	Size int64 `json:"size"`
	// TarBytes is the size of the archive decompressed, as its zstd frame header says; 0 when
	// it does not say (a stream compressed from a pipe).
	TarBytes int64 `json:"tarBytes,omitempty"`
	// Blobs are, by image reference, the blobs each image brings to a node's containerd, as the
	// ISO's release.BlobsFile records them; nil when it does not (the product's ISOs, older
	// packs).
	Blobs map[string][]Blob `json:"blobs,omitempty"`
}

// Blob is one blob of an image (manifest, config or layer) and its sizes.
type Blob struct {
	// Digest names it.
	Digest string `json:"digest"`
	release.BlobSize
}

// Images returns every image of every archive, without repeats, in archive order.
func (c *Contents) Images() []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range c.Archives {
		for _, ref := range a.Images {
			if !seen[ref] {
				seen[ref] = true
				out = append(out, ref)
			}
		}
	}
	return out
}

// IsISO reports whether src (a file name or a URL) names an ISO image: its path ends in ".iso".
func IsISO(src string) bool {
	p := src
	if u, err := url.Parse(src); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		p = u.Path
	}
	return strings.EqualFold(path.Ext(p), ".iso")
}

// CheckSource checks src, where an ISO is read from, before anything is read: an http or https
// URL with a host (remote is true), or the path of a regular file. Its error says what is wrong
// and what is accepted: "ISO ftp://h/x.iso: not an http or https URL: scheme ftp:// is not
// supported (...): an ISO is read from a file or an http or https URL", "/srv is a directory, not
// an ISO image file: want its path or its http or https URL"; a file that does not exist gets
// os.Stat's error. URLs are named redacted.
func CheckSource(src string) (remote bool, err error) {
	if httprange.CheckURL(src) == nil {
		return true, nil
	}
	if scheme, _, ok := strings.Cut(src, "://"); ok && !strings.Contains(scheme, "/") {
		return true, fmt.Errorf("ISO %s: %w: an ISO is read from a file or an http or https URL", redact.URL(src), httprange.CheckURL(src))
	}
	if err := iso.CheckFile(src); err != nil {
		if errors.Is(err, iso.ErrNotFile) {
			return false, fmt.Errorf("%w: want its path or its http or https URL", err)
		}
		return false, err
	}
	return false, nil
}

// Open reads the release in the ISO at src: an http(s) URL, read through Range requests with hc,
// or a local file (CheckSource says which, and what is wrong with src). Errors name src redacted.
func Open(ctx context.Context, hc *http.Client, src string, opts ...httprange.ReaderOption) (*Contents, error) {
	return open(ctx, hc, src, FromFS, opts...)
}

// OpenBlobs is Open for what a node's measure of the release needs (BlobsFromFS): the release,
// and each archive's images and blobs from the blob index, no archive's own bytes. Against a
// remote ISO it reads the volume's directories, the release's metadata, the bundle's and the
// index, not the headers of the archives nor the image lists of those the index names, and in
// blocks of blobsBlock, blobsWindow at most a miss (opts may say otherwise): the files it reads
// are small and lie apart, and Open's read-ahead of 256 KiB past each is mostly other files'
// bytes. Every node of a cluster makes this read against the origin.
func OpenBlobs(ctx context.Context, hc *http.Client, src string, opts ...httprange.ReaderOption) (*Contents, error) {
	opts = append([]httprange.ReaderOption{httprange.WithBlocks(blobsBlock, blobsWindow, blobsKeep)}, opts...)
	return open(ctx, hc, src, BlobsFromFS, opts...)
}

// The blocks of OpenBlobs' reads: 32 KiB, two at most a miss, 4 MiB kept.
const (
	blobsBlock  = 32 << 10
	blobsWindow = 2
	blobsKeep   = 128
)

// open reads the ISO at src (Open) with read, FromFS or BlobsFromFS.
func open(ctx context.Context, hc *http.Client, src string, read func(fs.FS, int64) (*Contents, error),
	opts ...httprange.ReaderOption) (*Contents, error) {
	remote, err := CheckSource(src)
	if err != nil {
		return nil, err
	}
	if remote {
		r, err := httprange.Open(ctx, hc, src, opts...)
		if err != nil {
			return nil, fmt.Errorf("ISO %s: %w", redact.URL(src), err)
		}
		defer r.Close()
		c, err := readISO(r, r.Size(), read)
		if c != nil {
			c.Requests, c.Bytes = r.Stats()
		}
		if err != nil {
			return c, fmt.Errorf("ISO %s: %w", redact.URL(src), err)
		}
		return c, nil
	}
	f, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	c, err := readISO(f, st.Size(), read)
	if err != nil {
		return nil, fmt.Errorf("ISO %s: %w", src, err)
	}
	return c, nil
}

// Read reads the release in the ISO image r of size bytes.
func Read(r io.ReaderAt, size int64) (*Contents, error) {
	return readISO(r, size, FromFS)
}

// readISO reads the release in the ISO image r of size bytes with read.
func readISO(r io.ReaderAt, size int64, read func(fs.FS, int64) (*Contents, error)) (*Contents, error) {
	fsys, err := iso.Open(r, size)
	if err != nil {
		return nil, err
	}
	return read(fsys, size)
}

// FromFS reads the release in the file system of an ISO (or of an extracted tree) of size bytes.
func FromFS(fsys fs.FS, size int64) (*Contents, error) {
	return fromFS(fsys, size, false)
}

// BlobsFromFS is FromFS for a measure of the release's blobs: an archive the blob index names
// takes its images from the index (sorted) rather than from its image list, and no archive's
// TarBytes is read (the first bytes of each archive, a range of their own against a remote
// ISO). An archive the index does not name has its image list read and no Blobs. Without an
// index (or with one that does not parse) it is FromFS.
func BlobsFromFS(fsys fs.FS, size int64) (*Contents, error) {
	return fromFS(fsys, size, true)
}

// fromFS is FromFS, or BlobsFromFS when lean.
func fromFS(fsys fs.FS, size int64, lean bool) (*Contents, error) {
	rel, err := release.LoadRelease(fsys)
	if err != nil {
		return nil, err
	}
	c := &Contents{Release: rel, Size: size}
	b, err := release.LoadBundle(fsys)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	// The blob index is optional: without it, or unreadable, the archives are only estimated.
	blobs, err := release.LoadBlobs(fsys)
	if err != nil {
		blobs, lean = nil, false
	}
	for _, a := range b.Archives {
		ar := Archive{Archive: a, Blobs: archiveBlobs(blobs, a.Archive)}
		if lean && ar.Blobs != nil {
			ar.Images = slices.Sorted(maps.Keys(ar.Blobs))
		} else if ar.Images, err = release.LoadImageList(fsys, a); err != nil {
			return c, err
		}
		st, err := fs.Stat(fsys, a.Archive)
		if err != nil {
			return c, fmt.Errorf("archive %s: %w", a.Archive, err)
		}
		ar.Size = st.Size()
		if !lean {
			ar.TarBytes = tarBytes(fsys, a.Archive, st.Size())
		}
		c.Archives = append(c.Archives, ar)
	}
	return c, nil
}

// archiveBlobs returns the blobs of the images of the archive at path that b records; nil when b
// is nil or does not know the archive.
func archiveBlobs(b *release.Blobs, path string) map[string][]Blob {
	if b == nil {
		return nil
	}
	ab := b.Archive(path)
	if ab == nil {
		return nil
	}
	out := make(map[string][]Blob, len(ab.Images))
	for ref, digests := range ab.Images {
		norm, err := release.NormalizeRef(ref)
		if err != nil {
			continue
		}
		bs := make([]Blob, 0, len(digests))
		for _, d := range digests {
			bs = append(bs, Blob{Digest: d, BlobSize: b.Sizes[d]})
		}
		out[norm] = bs
	}
	return out
}
