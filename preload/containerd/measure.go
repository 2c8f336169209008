package containerd

import (
	"context"
	"fmt"
	"slices"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	digest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"

	"github.com/upgrade-repo/upgrade-repo/preload"
)

var (
	_ preload.BlobChecker       = (*Store)(nil)
	_ preload.CleanupForecaster = (*Store)(nil)
)

// uncompressedLabel is the label containerd gives a compressed layer's content: the digest of its
// uncompressed tar.
const uncompressedLabel = "containerd.io/uncompressed"

// BlobInfo implements preload.BlobChecker over the daemon's content store.
func (s *Store) BlobInfo(ctx context.Context, dgst string) (bool, string, error) {
	d, err := digest.Parse(dgst)
	if err != nil {
		return false, "", fmt.Errorf("blob info: %w", err)
	}
	info, err := s.client.ContentStore().Info(s.nsctx(ctx), d)
	switch {
	case errdefs.IsNotFound(err):
		return false, "", nil
	case err != nil:
		return false, "", fmt.Errorf("blob info %s: %w", dgst, classify(err))
	}
	if u := info.Labels[uncompressedLabel]; u != "" {
		return true, u, nil
	}
	// Without the label the blob is taken for an uncompressed layer (a docker save archive's):
	// its digest is its diff ID. Were it compressed after all, its chain is not found and the
	// layer counts as not unpacked: the figure errs high, never low.
	return true, dgst, nil
}

// Unpacked implements preload.BlobChecker over the store's snapshotter (WithUnpack): a store
// that does not unpack says false.
func (s *Store) Unpacked(ctx context.Context, diffIDs []string) (bool, error) {
	if s.snapshotter == "" || len(diffIDs) == 0 {
		return false, nil
	}
	ds := make([]digest.Digest, 0, len(diffIDs))
	for _, id := range diffIDs {
		d, err := digest.Parse(id)
		if err != nil {
			return false, fmt.Errorf("layer chain: %w", err)
		}
		ds = append(ds, d)
	}
	chain := identity.ChainID(ds).String()
	_, err := s.client.SnapshotService(s.snapshotter).Stat(s.nsctx(ctx), chain)
	switch {
	case errdefs.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("stat snapshot %s: %w", chain, classify(err))
	}
	return true, nil
}

// ForecastCleanup implements preload.CleanupForecaster over the store's namespace: the images
// with a claim (ClaimLabelPrefix) and no claim of target, not pinned before their first claim
// (an operator's pin), not named by keep, with their digest-named aliases as RemoveUnused removes
// them; the bytes are the content only they reference, as RemoveUnused counts it, less what
// needed names. Unpacked snapshots are not counted.
func (s *Store) ForecastCleanup(ctx context.Context, target string, keep []string, needed func(string) bool) (int, int64, error) {
	ctx = s.nsctx(ctx)
	all, err := s.client.ImageService().List(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("forecast cleanup: list images: %w", classify(err))
	}
	kept := map[string]bool{}
	for _, ref := range keep {
		kept[ref] = true
	}
	byName := make(map[string]images.Image, len(all))
	remove := map[string]bool{}
	n := 0
	for _, img := range all {
		byName[img.Name] = img
		held := claims(img.Labels)
		if len(held) == 0 || slices.Contains(held, target) || img.Labels[pinnedBeforeLabel] != "" || kept[img.Name] {
			continue
		}
		remove[img.Name] = true
		n++
	}
	if n == 0 {
		return 0, 0, nil
	}
	withAliases(all, byName, remove, nil)
	w := &walker{s: s, blobs: map[digest.Digest]blob{}}
	bytes, err := w.freed(ctx, all, byName, remove, needed)
	if err != nil {
		return n, 0, fmt.Errorf("forecast cleanup: %w", err)
	}
	return n, bytes, nil
}
