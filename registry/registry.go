package registry

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
)

// ErrNotFound is returned by a Content for an image or a blob it does not hold.
var ErrNotFound = errors.New("not found")

// Descriptor names a manifest or a blob: its media type, digest ("sha256:<hex>") and size.
type Descriptor struct {
	MediaType string
	Digest    string
	Size      int64
}

// Blob is one blob of a Content, open for reading. Its methods are those of containerd's content
// readers; Close releases it.
type Blob interface {
	io.ReaderAt
	io.Closer
	// Size is the blob's length in bytes.
	Size() int64
}

// Content is the node's image store as the registry reads it. Its methods are safe for concurrent
// use and do not modify the store.
type Content interface {
	// Resolve returns the descriptor of the image named ref (fully qualified, such as
	// docker.io/library/x:v1): its manifest or index. It returns an error wrapping ErrNotFound when
	// the store has no such image.
	Resolve(ctx context.Context, ref string) (Descriptor, error)
	// Open opens the blob of digest dgst. It returns an error wrapping ErrNotFound when the store
	// does not hold it. The caller closes the Blob.
	Open(ctx context.Context, dgst string) (Blob, error)
}

// Catalog says which image references the registry serves: those of the releases' own image lists.
type Catalog interface {
	// Refs returns the served references, fully qualified; the caller owns the slice. It is safe
	// for concurrent use and does not block.
	Refs() []string
}

// Pin is what a verified release says one of its images is, as read from the release's own
// image archive: the digest of its manifest or index where the archive names one (an OCI image
// layout), else the digest of its config (docker save's older layout, whose manifest each
// node's import writes for itself). A manifest is served for a pinned tag only when it is one of
// the tag's manifest pins, or when the config it names is one of the tag's config pins.
type Pin struct {
	// Manifest is the digest ("sha256:<hex>") of the image's manifest or index; empty when the
	// release does not name one.
	Manifest string
	// Config is the digest ("sha256:<hex>") of the image's config; empty when unknown. It
	// counts only for a pin without a Manifest: a manifest's digest already fixes its config.
	Config string
}

// Pinned is an optional capability of a Catalog, found by type assertion: what the verified
// releases say their references are (see Pin). A pinned reference is served only as one of its
// pins, whatever the node's store or a peer holds under its tag; a listed reference with no pin
// is served from the node's own store only, never from a peer.
type Pinned interface {
	// Pins returns the pins of ref, sorted, or none; the caller owns the slice. It is safe for
	// concurrent use and does not block.
	Pins(ref string) []Pin
}

// Versioned is an optional capability of a Catalog, found by type assertion: a number that
// changes whenever the catalog's references or pins do, so that the registry walks the store
// again only then. Without it the registry compares the references themselves.
type Versioned interface {
	// Generation returns the catalog's current generation. It is safe for concurrent use and
	// does not block.
	Generation() uint64
}

// Lists is a Catalog made of the image lists of releases, set and dropped as the node acquires and
// drops them. The zero value is empty and ready; it is safe for concurrent use.
type Lists struct {
	mu    sync.Mutex
	lists map[string][]string
	gen   uint64
}

var (
	_ Catalog   = (*Lists)(nil)
	_ Pinned    = (*Lists)(nil)
	_ Versioned = (*Lists)(nil)
)

// Set sets the image list of release, replacing an earlier one. An entry is a reference
// (docker.io/library/x:v1), optionally pinned (see Entry): docker.io/library/x:v1@sha256:<hex>
// pins its manifest or index, and a following " config=sha256:<hex>" its config.
func (l *Lists) Set(release string, refs []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lists == nil {
		l.lists = map[string][]string{}
	}
	if old, ok := l.lists[release]; ok && slices.Equal(old, refs) {
		return
	}
	l.lists[release] = slices.Clone(refs)
	l.gen++
}

// Drop forgets the image list of release.
func (l *Lists) Drop(release string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.lists[release]; ok {
		delete(l.lists, release)
		l.gen++
	}
}

// Refs implements Catalog: every reference of every list, without its pin, sorted, without
// duplicates.
func (l *Lists) Refs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, refs := range l.lists {
		for _, r := range refs {
			ref, _ := ParseEntry(r)
			out = append(out, ref)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Pins implements Pinned: the pins every list gives ref.
func (l *Lists) Pins(ref string) []Pin {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Pin
	for _, refs := range l.lists {
		for _, r := range refs {
			if name, p := ParseEntry(r); p != (Pin{}) && name == ref {
				out = append(out, p)
			}
		}
	}
	slices.SortFunc(out, func(a, b Pin) int { return strings.Compare(a.Manifest+" "+a.Config, b.Manifest+" "+b.Config) })
	return slices.Compact(out)
}

// Generation implements Versioned.
func (l *Lists) Generation() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen
}

// configField is how an entry of an image list names the digest of its image's config.
const configField = " config="

// ParseEntry splits an entry of an image list into its reference and its pin: the digest after
// the last @ of the reference, when it is a sha256 digest (else the @ is part of the reference),
// and the digest of a following " config=" field. An entry whose config field is not a sha256
// digest has no config pin.
func ParseEntry(entry string) (ref string, pin Pin) {
	ref, cfg, ok := strings.Cut(entry, configField)
	if ok && digestRE.MatchString(cfg) {
		pin.Config = cfg
	}
	if i := strings.LastIndexByte(ref, '@'); i >= 0 && digestRE.MatchString(ref[i+1:]) {
		ref, pin.Manifest = ref[:i], ref[i+1:]
	}
	return ref, pin
}

// Entry returns the entry of an image list that pins ref to pin (ref alone for no pin).
func Entry(ref string, pin Pin) string {
	if pin.Manifest != "" {
		ref += "@" + pin.Manifest
	}
	if pin.Config != "" {
		ref += configField + pin.Config
	}
	return ref
}
