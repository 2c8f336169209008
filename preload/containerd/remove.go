package containerd

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/upgrade-repo/upgrade-repo/preload"
)

var _ preload.Remover = (*Store)(nil)

// RemoveUnused implements preload.Remover over the store's namespace.
//
// A container uses an image when its image field names it, or names content the image is made
// of: the CRI plugin records a container's image by the name the pod gave, which may be a tag,
// a repo digest (name@sha256:...) or the image id (the config's digest). So an image is in use
// when a container names it, or names an image with the same target, or names a manifest,
// index or config digest of it. An image is pinned while PinnedLabel is set: after Unpin, that
// is an image a release still claims or that an operator pinned. Images are deleted
// synchronously (containerd's garbage collection runs before the call returns), so the content
// they alone held is gone when it returns.
//
// A container created between the check and the delete is not seen; its snapshot keeps its
// root file system, and the CRI plugin pulls the image again if it is started anew.
func (s *Store) RemoveUnused(ctx context.Context, refs []string, dryRun bool) (preload.Removal, error) {
	ctx = s.nsctx(ctx)
	var out preload.Removal
	is := s.client.ImageService()
	all, err := is.List(ctx)
	if err != nil {
		return out, fmt.Errorf("list images: %w", classify(err))
	}
	cs := s.client.ContainerService()
	ctrs, err := cs.List(ctx)
	if err != nil {
		return out, fmt.Errorf("list containers: %w", classify(err))
	}
	byName := make(map[string]images.Image, len(all))
	for _, img := range all {
		byName[img.Name] = img
	}
	// users maps what containers name (image names and digests) to the containers.
	users := map[string][]string{}
	for _, c := range ctrs {
		if c.Image == "" {
			continue
		}
		users[c.Image] = append(users[c.Image], c.ID)
		if img, ok := byName[c.Image]; ok {
			users[img.Target.Digest.String()] = append(users[img.Target.Digest.String()], c.ID)
		}
		if _, d, ok := strings.Cut(c.Image, "@"); ok {
			users[d] = append(users[d], c.ID)
		}
	}
	w := &walker{s: s, blobs: map[digest.Digest]blob{}}
	remove := map[string]bool{}
	for _, ref := range refs {
		img, ok := byName[ref]
		if !ok || remove[ref] {
			continue
		}
		own, err := w.walk(ctx, img.Target)
		if err != nil {
			return out, fmt.Errorf("read image %s: %w", ref, classify(err))
		}
		var who []string
		for _, key := range append([]string{ref}, own...) {
			who = append(who, users[key]...)
		}
		switch {
		case len(who) > 0:
			slices.Sort(who)
			out.Kept = append(out.Kept, preload.Kept{Image: ref, Reason: preload.KeptInUse, Users: slices.Compact(who)})
		case img.Labels[PinnedLabel] == pinnedValue:
			out.Kept = append(out.Kept, preload.Kept{Image: ref, Reason: preload.KeptPinned})
		default:
			remove[ref] = true
		}
	}
	withAliases(all, byName, remove, users)
	bytes, err := w.freed(ctx, all, byName, remove, nil)
	if err != nil {
		return out, err
	}
	names := make([]string, 0, len(remove))
	for name := range remove {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !dryRun {
			err := is.Delete(ctx, name, images.SynchronousDelete())
			if err != nil && !errdefs.IsNotFound(err) {
				return out, fmt.Errorf("remove image %s: %w", name, classify(err))
			}
		}
		if slices.Contains(refs, name) {
			out.Removed = append(out.Removed, name)
		}
	}
	out.Bytes = bytes
	return out, nil
}

// withAliases adds to remove the digest-named aliases (isDigestName) of the removed images'
// content that no container names (users) and nothing pinned, unless a kept name shares that
// content. (A listed name whose content a kept name shares goes all the same: only the name is
// removed, and no byte is counted as freed.)
func withAliases(all []images.Image, byName map[string]images.Image, remove map[string]bool, users map[string][]string) {
	targets := map[digest.Digest]bool{}
	for name := range remove {
		targets[byName[name].Target.Digest] = true
	}
	for _, img := range all {
		if !remove[img.Name] && targets[img.Target.Digest] && !isDigestName(img.Name) {
			delete(targets, img.Target.Digest)
		}
	}
	for _, img := range all {
		if targets[img.Target.Digest] && isDigestName(img.Name) && len(users[img.Name]) == 0 && img.Labels[PinnedLabel] != pinnedValue {
			remove[img.Name] = true
		}
	}
}

// freed returns the size of the blobs of the images remove names that no other image of all
// references, nor needed names (nil: none): what removing them frees in the content store.
func (w *walker) freed(ctx context.Context, all []images.Image, byName map[string]images.Image, remove map[string]bool, needed func(string) bool) (int64, error) {
	freed := map[digest.Digest]bool{}
	for name := range remove {
		if err := w.mark(ctx, byName[name].Target, freed, true); err != nil {
			return 0, fmt.Errorf("read image %s: %w", name, classify(err))
		}
	}
	for _, img := range all {
		if !remove[img.Name] {
			if err := w.mark(ctx, img.Target, freed, false); err != nil {
				return 0, fmt.Errorf("read image %s: %w", img.Name, classify(err))
			}
		}
	}
	var bytes int64
	for d := range freed {
		if needed == nil || !needed(d.String()) {
			bytes += w.blobs[d].size
		}
	}
	return bytes, nil
}

// isDigestName reports whether name is a digest form the CRI plugin gives images: an image id
// (sha256:...) or a repo digest (name@sha256:...).
func isDigestName(name string) bool {
	if strings.Contains(name, "@") {
		return true
	}
	_, err := digest.Parse(name)
	return err == nil
}

// blob is one blob of content met by a walker.
type blob struct {
	size     int64
	children []ocispec.Descriptor
	// named is true for a manifest, index or config: content a container may name an image by.
	named bool
}

// walker reads the content graph of images, each blob once per call.
type walker struct {
	s     *Store
	blobs map[digest.Digest]blob
}

// visit returns what the content store knows of desc; content it lacks (the other platforms
// of an index, say) has no size and no children.
func (w *walker) visit(ctx context.Context, desc ocispec.Descriptor) (blob, error) {
	if b, ok := w.blobs[desc.Digest]; ok {
		return b, nil
	}
	cs := w.s.client.ContentStore()
	var b blob
	info, err := cs.Info(ctx, desc.Digest)
	switch {
	case errdefs.IsNotFound(err):
		w.blobs[desc.Digest] = b
		return b, nil
	case err != nil:
		return b, err
	}
	b.size = info.Size
	b.named = images.IsManifestType(desc.MediaType) || images.IsIndexType(desc.MediaType) || images.IsConfigType(desc.MediaType)
	if images.IsManifestType(desc.MediaType) || images.IsIndexType(desc.MediaType) {
		if b.children, err = images.Children(ctx, cs, desc); err != nil && !errdefs.IsNotFound(err) {
			return b, err
		}
	}
	w.blobs[desc.Digest] = b
	return b, nil
}

// each calls fn once for every blob under target (target included), depth first, with its depth;
// a blob seen before and nesting past maxDepth are skipped.
func (w *walker) each(ctx context.Context, target ocispec.Descriptor, fn func(ocispec.Descriptor, blob, int)) error {
	seen := map[digest.Digest]bool{}
	var rec func(ocispec.Descriptor, int) error
	rec = func(d ocispec.Descriptor, depth int) error {
		if seen[d.Digest] || depth > maxDepth {
			return nil
		}
		seen[d.Digest] = true
		b, err := w.visit(ctx, d)
		if err != nil {
			return err
		}
		fn(d, b, depth)
		for _, c := range b.children {
			if err := rec(c, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return rec(target, 0)
}

// walk returns the digests of the manifests, indexes and configs under target.
func (w *walker) walk(ctx context.Context, target ocispec.Descriptor) ([]string, error) {
	var out []string
	err := w.each(ctx, target, func(d ocispec.Descriptor, b blob, depth int) {
		if b.named || depth == 0 {
			out = append(out, d.Digest.String())
		}
	})
	return out, err
}

// mark sets (set true) or clears (set false) in freed every blob under target.
func (w *walker) mark(ctx context.Context, target ocispec.Descriptor, freed map[digest.Digest]bool, set bool) error {
	return w.each(ctx, target, func(d ocispec.Descriptor, b blob, _ int) {
		if set && b.size > 0 {
			freed[d.Digest] = true
		} else if !set {
			delete(freed, d.Digest)
		}
	})
}
