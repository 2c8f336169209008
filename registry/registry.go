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

// Pinned is an optional capability of a Catalog, found by type assertion: the digests of the
// manifests (or indexes) the verified releases name for their references, as read from the
// releases' own image archives. A pinned reference is served only as one of its pins, whatever
// the node's store or a peer holds under its tag; a listed reference with no pin is served from
// the node's own store only, never from a peer.
type Pinned interface {
	// Pins returns the digests ("sha256:<hex>") pinned for ref, sorted, or none; the caller owns
	// the slice. It is safe for concurrent use and does not block.
	Pins(ref string) []string
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
// (docker.io/library/x:v1), or a reference pinned to the digest of its manifest or index as the
// verified release holds it (docker.io/library/x:v1@sha256:<hex>).
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
			ref, _ := SplitPin(r)
			out = append(out, ref)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Pins implements Pinned: the digests every list pins ref to.
func (l *Lists) Pins(ref string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, refs := range l.lists {
		for _, r := range refs {
			if name, d := SplitPin(r); d != "" && name == ref {
				out = append(out, d)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Generation implements Versioned.
func (l *Lists) Generation() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen
}

// SplitPin splits an entry of an image list into its reference and the digest it is pinned to
// (empty when it has none, or when what follows the last @ is not a sha256 digest: the entry is
// then a reference as a whole).
func SplitPin(entry string) (ref, dgst string) {
	i := strings.LastIndexByte(entry, '@')
	if i < 0 || !digestRE.MatchString(entry[i+1:]) {
		return entry, ""
	}
	return entry[:i], entry[i+1:]
}

// Pin returns the entry of an image list that pins ref to dgst.
func Pin(ref, dgst string) string { return ref + "@" + dgst }
