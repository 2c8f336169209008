package preload

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
)

// Held is what a store holds under one reference, as a DigestReader tells it.
type Held struct {
	// Ref is the reference, fully qualified.
	Ref string `json:"ref"`
	// Target is the digest of the image the name points to, its manifest or index
	// ("sha256:<hex>").
	Target string `json:"target"`
	// Configs are the config digests of the image's manifests whose content is complete: the
	// manifest's own, or those of the complete manifests of an index.
	Configs []string `json:"configs,omitempty"`
}

// DigestReader is an optional capability of a Store, found by type assertion: it tells which
// image the store holds under a name, so that a name that points to another image than the
// release's is not taken for the release's image. A Store without it is judged by name alone.
type DigestReader interface {
	// Held returns what the store holds under each of refs that is present with complete content
	// (as Missing judges it), in the order of refs; references that are not present are left
	// out. It is safe for concurrent use and does not modify the store.
	Held(ctx context.Context, refs []string) ([]Held, error)
}

// Mismatch is a listed image the store holds under the release's reference as another image than
// the release's.
type Mismatch struct {
	// Ref is the reference.
	Ref string `json:"ref"`
	// By is what was compared: "manifest" (the digest the name points to) or "config" (where the
	// release's archive records only its image's config).
	By string `json:"by"`
	// Held is the store's digest; for a config, the configs of the store's image, joined by
	// commas, or "none" when it has no complete manifest.
	Held string `json:"held"`
	// Release is the digest the release records.
	Release string `json:"release"`
}

// String says what is held and what the release names, for people.
func (m Mismatch) String() string {
	if m.By == byConfig {
		return fmt.Sprintf("image %s held with config %s, the release names config %s", m.Ref, m.Held, m.Release)
	}
	return fmt.Sprintf("image %s held at %s, the release names %s", m.Ref, m.Held, m.Release)
}

const (
	byManifest = "manifest"
	byConfig   = "config"
)

// Match decides whether h, what a store holds under d's reference, is the image the release
// records as d: by the manifest digest when d records one (it names the image whole), else by the
// config digest (docker save's classic layout has no manifest of its own; the import writes one),
// which one of h's complete manifests must have. A d that records neither matches: the image is
// judged by name. When h is another image, Match returns false and what differs.
func (d ImageDigest) Match(h Held) (Mismatch, bool) {
	switch {
	case d.Manifest != "":
		if h.Target == d.Manifest {
			return Mismatch{}, true
		}
		return Mismatch{Ref: h.Ref, By: byManifest, Held: h.Target, Release: d.Manifest}, false
	case d.Config != "":
		if slices.Contains(h.Configs, d.Config) {
			return Mismatch{}, true
		}
		held := strings.Join(h.Configs, ",")
		if held == "" {
			held = "none"
		}
		return Mismatch{Ref: h.Ref, By: byConfig, Held: held, Release: d.Config}, false
	}
	return Mismatch{}, true
}

// WithDigests gives the Preloader what the release's archives say its images are, the digests a
// listed image must have to be taken as present (see ImageDigest.Match): f is called when the
// store holds a listed image by name when the plan is made, at most once per Run or Plan, and may
// block until the digests are known. Images f does not name, or all when f fails without any, are judged by
// name. Without it the Preloader reads them from the release itself (ReadDigests on the fs.FS
// given to Run or Plan), under the same condition. The images a Run imports are the release's
// by construction: the check after the imports compares digests only when the plan did.
func WithDigests(f func(ctx context.Context) ([]ImageDigest, error)) Option {
	return func(p *Preloader) { p.digests = f }
}

// releaseDigests returns what the release's digests are read from, at most once: the WithDigests
// function, else the release's archives in meta.
func (p *Preloader) releaseDigests(meta fs.FS) *lazyDigests {
	if p.digests != nil {
		return &lazyDigests{f: p.digests}
	}
	return &lazyDigests{f: func(ctx context.Context) ([]ImageDigest, error) { return ReadDigests(ctx, meta) }}
}

// lazyDigests calls f once, when first asked: its result is kept, but for a failure of its
// context. It is safe for concurrent use.
type lazyDigests struct {
	f func(context.Context) ([]ImageDigest, error)

	mu   sync.Mutex
	done bool
	ds   []ImageDigest
	err  error
}

// get returns f's result.
func (l *lazyDigests) get(ctx context.Context) ([]ImageDigest, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return l.ds, l.err
	}
	ds, err := l.f(ctx)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	l.done, l.ds, l.err = true, ds, err
	return ds, err
}

// asked reports whether f was called and returned.
func (l *lazyDigests) asked() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

// check returns the references of refs the store lacks and, among them, those it holds as another
// image than the release's (when the store is a DigestReader and digests, not nil, names them),
// both in the order of refs. Each image held as another is logged.
func (p *Preloader) check(ctx context.Context, refs []string, digests *lazyDigests) ([]string, []Mismatch, error) {
	missing, err := p.store.Missing(ctx, refs)
	if err != nil {
		return nil, nil, err
	}
	dr, ok := p.store.(DigestReader)
	present := without(refs, missing)
	if !ok || digests == nil || len(present) == 0 {
		return missing, nil, nil
	}
	ds, derr := digests.get(ctx)
	if derr != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		p.log.Warn("the release's image digests could not all be read: images without one are judged by name", "err", derr)
	}
	want := make(map[string]ImageDigest, len(ds))
	for _, d := range ds {
		want[d.Ref] = d
	}
	var known []string
	for _, ref := range present {
		if _, ok := want[ref]; ok && !slices.Contains(known, ref) {
			known = append(known, ref)
		}
	}
	if len(known) < len(present) {
		p.log.Debug("the release records no digest for some images present by name: judged by name", "images", len(present)-len(known))
	}
	if len(known) == 0 {
		return missing, nil, nil
	}
	held, err := dr.Held(ctx, known)
	if err != nil {
		return nil, nil, fmt.Errorf("read the images held: %w", err)
	}
	other := map[string]Mismatch{}
	for _, h := range held {
		if m, same := want[h.Ref].Match(h); !same {
			other[h.Ref] = m
			p.log.Warn("a listed image is held as another image than the release's: importing the release's",
				"image", m.Ref, "by", m.By, "held", m.Held, "release", m.Release)
		}
	}
	if len(other) == 0 {
		return missing, nil, nil
	}
	var (
		all      []string
		replaced []Mismatch
		gone     = map[string]bool{}
	)
	for _, ref := range missing {
		gone[ref] = true
	}
	for _, ref := range refs {
		if m, ok := other[ref]; ok {
			gone[ref] = true
			if !slices.ContainsFunc(replaced, func(x Mismatch) bool { return x.Ref == ref }) {
				replaced = append(replaced, m)
			}
		}
		if gone[ref] {
			all = append(all, ref)
		}
	}
	return all, replaced, nil
}
