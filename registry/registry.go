package registry

import (
	"context"
	"errors"
	"io"
	"slices"
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

// Lists is a Catalog made of the image lists of releases, set and dropped as the node acquires and
// drops them. The zero value is empty and ready; it is safe for concurrent use.
type Lists struct {
	mu    sync.Mutex
	lists map[string][]string
}

var _ Catalog = (*Lists)(nil)

// Set sets the image list of release, replacing an earlier one.
func (l *Lists) Set(release string, refs []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lists == nil {
		l.lists = map[string][]string{}
	}
	l.lists[release] = slices.Clone(refs)
}

// Drop forgets the image list of release.
func (l *Lists) Drop(release string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.lists, release)
}

// Refs implements Catalog: every reference of every list, sorted, without duplicates.
func (l *Lists) Refs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, refs := range l.lists {
		out = append(out, refs...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
