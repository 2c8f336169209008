package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// ErrBlobNotFound is wrapped by the errors of Open for a blob the content store does not hold.
var ErrBlobNotFound = errors.New("blob not in the content store")

// blobDigestRe is the only digest form served: sha256 in lower-case hex.
var blobDigestRe = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Open returns the committed blob with the given digest ("sha256:" and 64 lower-case hex digits)
// from the namespace's content store, and its size, so that peers can fetch image layers by
// digest. It returns an error wrapping ErrBlobNotFound when the blob is not held (or only being
// written). Open is safe for concurrent use; the caller closes the reader, whose reads use ctx.
func (s *Store) Open(ctx context.Context, dgst string) (io.ReadSeekCloser, int64, error) {
	if !blobDigestRe.MatchString(dgst) {
		return nil, 0, fmt.Errorf("open blob %q: not a sha256 digest: %w", dgst, ErrBlobNotFound)
	}
	ctx = s.nsctx(ctx)
	d := digest.Digest(dgst)
	cs := s.client.ContentStore()
	info, err := cs.Info(ctx, d)
	if errdefs.IsNotFound(err) {
		return nil, 0, fmt.Errorf("open blob %s: %w", dgst, ErrBlobNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("open blob %s: %w", dgst, classify(err))
	}
	ra, err := cs.ReaderAt(ctx, ocispec.Descriptor{Digest: d, Size: info.Size})
	if errdefs.IsNotFound(err) {
		// Removed by the garbage collector between the two calls.
		return nil, 0, fmt.Errorf("open blob %s: %w", dgst, ErrBlobNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("open blob %s: %w", dgst, classify(err))
	}
	return &blobReader{SectionReader: io.NewSectionReader(ra, 0, info.Size), ra: ra}, info.Size, nil
}

// blobReader makes a content.ReaderAt an io.ReadSeekCloser.
type blobReader struct {
	*io.SectionReader
	ra content.ReaderAt
}

func (b *blobReader) Close() error { return b.ra.Close() }

// Blobs returns the sha256 digests of every committed blob in the namespace's content store,
// sorted: what the node can offer its peers.
func (s *Store) Blobs(ctx context.Context) ([]string, error) {
	var out []string
	err := s.client.ContentStore().Walk(s.nsctx(ctx), func(i content.Info) error {
		if d := i.Digest.String(); blobDigestRe.MatchString(d) {
			out = append(out, d)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list blobs: %w", classify(err))
	}
	slices.Sort(out)
	return out, nil
}

// ImageBlobs returns the sha256 digests, sorted, of the blobs of the named images that the
// namespace's content store holds: each image's index or manifest, the manifests of an index that
// are present, their configs and layers. What a node may share with its peers is these, not the
// whole store (which holds the layers of private images too). Names the namespace does not hold
// are skipped. It is safe for concurrent use.
func (s *Store) ImageBlobs(ctx context.Context, refs []string) ([]string, error) {
	ctx = s.nsctx(ctx)
	is := s.client.ImageService()
	c := &checker{cs: s.client.ContentStore(), known: map[digest.Digest]bool{}}
	found := map[digest.Digest]bool{}
	var walk func(desc ocispec.Descriptor, depth int) error
	walk = func(desc ocispec.Descriptor, depth int) error {
		if depth > maxDepth || found[desc.Digest] {
			return nil
		}
		if ok, err := c.has(ctx, desc.Digest); !ok || err != nil {
			return err
		}
		found[desc.Digest] = true
		switch {
		case images.IsIndexType(desc.MediaType):
			var idx ocispec.Index
			if ok, err := c.readJSON(ctx, desc, &idx); !ok || err != nil {
				return err
			}
			for _, m := range idx.Manifests {
				if err := walk(m, depth+1); err != nil {
					return err
				}
			}
		case images.IsManifestType(desc.MediaType):
			var m ocispec.Manifest
			if ok, err := c.readJSON(ctx, desc, &m); !ok || err != nil {
				return err
			}
			for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
				if err := walk(d, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, ref := range refs {
		img, err := is.Get(ctx, ref)
		if errdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("image blobs of %s: %w", ref, classify(err))
		}
		if err := walk(img.Target, 0); err != nil {
			return nil, fmt.Errorf("image blobs of %s: %w", ref, classify(err))
		}
	}
	out := make([]string, 0, len(found))
	for d := range found {
		if blobDigestRe.MatchString(d.String()) {
			out = append(out, d.String())
		}
	}
	slices.Sort(out)
	return out, nil
}
