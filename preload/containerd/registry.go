package containerd

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/upgrade-repo/upgrade-repo/registry"
)

var _ registry.Content = (*Store)(nil)

// Resolve implements registry.Content: the target of the image named ref in the store's namespace.
func (s *Store) Resolve(ctx context.Context, ref string) (registry.Descriptor, error) {
	img, err := s.client.ImageService().Get(s.nsctx(ctx), ref)
	if errdefs.IsNotFound(err) {
		return registry.Descriptor{}, fmt.Errorf("image %s: %w", ref, registry.ErrNotFound)
	}
	if err != nil {
		return registry.Descriptor{}, fmt.Errorf("get image %s: %w", ref, classify(err))
	}
	return registry.Descriptor{MediaType: img.Target.MediaType, Digest: img.Target.Digest.String(), Size: img.Target.Size}, nil
}

// Open implements registry.Content: a reader of the blob dgst in containerd's content store.
func (s *Store) Open(ctx context.Context, dgst string) (registry.Blob, error) {
	d, err := digest.Parse(dgst)
	if err != nil {
		return nil, fmt.Errorf("blob %q: %w", dgst, err)
	}
	ra, err := s.client.ContentStore().ReaderAt(s.nsctx(ctx), ocispec.Descriptor{Digest: d})
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("blob %s: %w", dgst, registry.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("open blob %s: %w", dgst, classify(err))
	}
	return ra, nil
}
