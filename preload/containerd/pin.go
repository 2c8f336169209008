package containerd

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"

	"github.com/upgrade-repo/upgrade-repo/preload"
)

// Pinning, and what honours it.
//
// The CRI plugin reports an image whose label PinnedLabel is "pinned" as pinned (ImageStatus and
// ListImages), and the kubelet's image garbage collection skips pinned images. containerd honours
// the label from 1.7.3 (and in 2.x); the kubelet passes the runtime's pinned flag on from 1.28
// (and 1.25.13, 1.26.8, 1.27.5). containerd 1.6, Debian 12's 1.6.20 and the kind node image
// built on it included, ignores the label: there the images still carry it (so they are
// protected the day the runtime is upgraded) but the kubelet may collect them, and what keeps a
// release's images on the node is preload.Guard, which imports them again from the ISO.
//
// The store owns the pins it makes: a claim of a release is a label ClaimLabelPrefix+release,
// and PinnedLabel is removed only from images whose every claim was withdrawn and that were not
// pinned before the first claim (pinnedBeforeLabel records that).
const (
	// PinnedLabel is the CRI plugin's label of pinned images; its value is "pinned".
	PinnedLabel = "io.cri-containerd.pinned"
	// ClaimLabelPrefix, followed by a release's name, marks the images that release claims.
	ClaimLabelPrefix = "pin.upgrade-repo.harvesterhci.io/"

	pinnedValue       = "pinned"
	pinnedBeforeLabel = "upgrade-repo.harvesterhci.io/pinned-before"
)

var _ preload.Pinner = (*Store)(nil)

// Pin implements preload.Pinner.
func (s *Store) Pin(ctx context.Context, release string, refs []string) (int, error) {
	if err := checkRelease(release); err != nil {
		return 0, err
	}
	ctx = s.nsctx(ctx)
	is := s.client.ImageService()
	changed := 0
	for _, ref := range refs {
		img, err := is.Get(ctx, ref)
		if errdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			return changed, fmt.Errorf("get image %s: %w", ref, classify(err))
		}
		claim := ClaimLabelPrefix + release
		if img.Labels[claim] != "" && img.Labels[PinnedLabel] == pinnedValue {
			continue
		}
		up := images.Image{Name: img.Name, Labels: map[string]string{claim: "true", PinnedLabel: pinnedValue}}
		fields := []string{"labels." + claim, "labels." + PinnedLabel}
		if img.Labels[PinnedLabel] == pinnedValue && len(claims(img.Labels)) == 0 {
			up.Labels[pinnedBeforeLabel] = "true"
			fields = append(fields, "labels."+pinnedBeforeLabel)
		}
		if _, err := is.Update(ctx, up, fields...); err != nil {
			if errdefs.IsNotFound(err) {
				continue // removed in between: Missing reports it
			}
			return changed, fmt.Errorf("pin image %s: %w", ref, classify(err))
		}
		changed++
	}
	return changed, nil
}

// Unpin implements preload.Pinner.
func (s *Store) Unpin(ctx context.Context, drop func(release string) bool) (int, error) {
	ctx = s.nsctx(ctx)
	is := s.client.ImageService()
	imgs, err := is.List(ctx)
	if err != nil {
		return 0, fmt.Errorf("list images: %w", classify(err))
	}
	changed := 0
	for _, img := range imgs {
		held := claims(img.Labels)
		var fields []string
		kept := 0
		for _, rel := range held {
			if drop(rel) {
				fields = append(fields, "labels."+ClaimLabelPrefix+rel)
			} else {
				kept++
			}
		}
		if len(fields) == 0 {
			continue
		}
		// Labels named in fields but absent from up are removed.
		up := images.Image{Name: img.Name, Labels: map[string]string{}}
		if kept == 0 {
			fields = append(fields, "labels."+pinnedBeforeLabel)
			if img.Labels[pinnedBeforeLabel] == "" {
				fields = append(fields, "labels."+PinnedLabel)
			}
		}
		if _, err := is.Update(ctx, up, fields...); err != nil {
			if errdefs.IsNotFound(err) {
				continue
			}
			return changed, fmt.Errorf("unpin image %s: %w", img.Name, classify(err))
		}
		changed++
	}
	return changed, nil
}

var _ preload.PinCounter = (*Store)(nil)

// Pinned implements preload.PinCounter: the images of refs whose PinnedLabel is "pinned", the
// label the CRI plugin reads, whether this store or an operator set it.
func (s *Store) Pinned(ctx context.Context, refs []string) (int, error) {
	ctx = s.nsctx(ctx)
	imgs, err := s.client.ImageService().List(ctx)
	if err != nil {
		return 0, fmt.Errorf("list images: %w", classify(err))
	}
	pinned := make(map[string]bool, len(imgs))
	for _, img := range imgs {
		if img.Labels[PinnedLabel] == pinnedValue {
			pinned[img.Name] = true
		}
	}
	n := 0
	for _, ref := range slices.Compact(slices.Sorted(slices.Values(refs))) {
		if pinned[ref] {
			n++
		}
	}
	return n, nil
}

// pinFields returns the update fields that remove, from an image with labels, the pins this store
// set: every claim, the record of an earlier pin, and the pinned label unless it was there before
// the first claim (an operator's).
func pinFields(labels map[string]string) []string {
	var fields []string
	for _, rel := range claims(labels) {
		fields = append(fields, "labels."+ClaimLabelPrefix+rel)
	}
	if len(fields) == 0 {
		return nil
	}
	fields = append(fields, "labels."+pinnedBeforeLabel)
	if labels[pinnedBeforeLabel] == "" {
		fields = append(fields, "labels."+PinnedLabel)
	}
	return fields
}

// claims returns the releases that claim an image with labels.
func claims(labels map[string]string) []string {
	var out []string
	for k := range labels {
		if rel, ok := strings.CutPrefix(k, ClaimLabelPrefix); ok && rel != "" {
			out = append(out, rel)
		}
	}
	return out
}

// checkRelease refuses a release name that cannot be part of a label key.
func checkRelease(release string) error {
	switch {
	case release == "":
		return fmt.Errorf("pin: empty release name")
	case len(release) > 128:
		return fmt.Errorf("pin: release name %.20q...: longer than 128 bytes", release)
	case strings.ContainsAny(release, " \t\r\n\"=,"):
		return fmt.Errorf("pin: release name %q: contains a space, quote, comma or '='", release)
	}
	return nil
}
