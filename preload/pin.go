package preload

import (
	"context"
	"fmt"
)

// Pinner is an optional capability of a Store, found by type assertion: it marks images so that
// the kubelet's image garbage collection leaves them alone while a release needs them.
//
// A pin is a claim of one release on an image; an image stays protected while any release claims
// it. Releases are named by a string of the caller's choice (the release's version). Both
// methods are safe for concurrent use with each other and with Import; neither removes an image.
type Pinner interface {
	// Pin records release's claim on each of refs and protects them. References that are not in
	// the store are skipped (Missing reports them). It returns how many images it changed.
	Pin(ctx context.Context, release string, refs []string) (int, error)
	// Unpin withdraws the claim of every release for which drop returns true, from every image
	// that carries one; an image no release claims any more loses its protection, unless it was
	// protected before the first claim (an operator's). It returns how many images it changed.
	Unpin(ctx context.Context, drop func(release string) bool) (int, error)
}

// PinCounter is an optional capability of a Store, found by type assertion: it counts the images
// the kubelet's image garbage collection is told to leave alone, whoever pinned them.
type PinCounter interface {
	// Pinned returns how many of refs are in the store and pinned. References that are not in the
	// store count as unpinned. It is safe for concurrent use and does not modify the store.
	Pinned(ctx context.Context, refs []string) (int, error)
}

// WithPin makes the Preloader claim every listed image it finds present or imports for release,
// when its Store is a Pinner (see Pinner). Empty (the default) pins nothing.
func WithPin(release string) Option { return func(p *Preloader) { p.pin = release } }

// pinImages claims refs for the Preloader's release, retrying transient errors. A store that
// cannot pin, or no release to pin for, makes it a no-op.
func (p *Preloader) pinImages(ctx context.Context, refs []string) error {
	pinner, ok := p.store.(Pinner)
	if !ok || p.pin == "" || len(refs) == 0 {
		return nil
	}
	return p.retryTransient(ctx, "pin images", func() error {
		n, err := pinner.Pin(ctx, p.pin, refs)
		if err != nil {
			return fmt.Errorf("pin images of release %s: %w", p.pin, err)
		}
		if n > 0 {
			p.log.Debug("images pinned", "release", p.pin, "changed", n)
		}
		return nil
	})
}

// without returns the references of refs that are not in drop, in the order of refs.
func without(refs, drop []string) []string {
	if len(drop) == 0 {
		return refs
	}
	skip := make(map[string]bool, len(drop))
	for _, r := range drop {
		skip[r] = true
	}
	var out []string
	for _, r := range refs {
		if !skip[r] {
			out = append(out, r)
		}
	}
	return out
}
