// Package preloadtest helps test preload and its adapters: a hand-written in-memory Store and
// builders of real image archives (docker save's classic layout and the OCI layout newer docker
// writes, compressed with zstd) and of release bundle trees.
//
// Imports: preload, go-containerregistry and zstd; never containerd.
package preloadtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/upgrade-repo/upgrade-repo/preload"
)

// Store is an in-memory preload.Store for unit tests of preload's logic. Import reads the whole
// stream and marks the images the test registered for that stream's content as present. It is
// safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	present map[string]bool
	// contents maps an archive's uncompressed bytes to the images importing it creates.
	contents map[string][]string
	// held is what the store holds under a name, where a test said; imported is what importing
	// a name makes it hold.
	held, imported map[string]preload.Held
	imports        int
	// MissingErr, when set, is returned by Missing; ImportErr by Import after reading the stream.
	MissingErr error
	ImportErr  error
}

var _ preload.Store = (*Store)(nil)

// NewStore returns a Store holding the present images.
func NewStore(present ...string) *Store {
	s := &Store{present: map[string]bool{}, contents: map[string][]string{}, held: map[string]preload.Held{}, imported: map[string]preload.Held{}}
	for _, r := range present {
		s.present[r] = true
	}
	return s
}

// OnImport declares that importing an archive whose uncompressed bytes are tar creates refs.
func (s *Store) OnImport(tar []byte, refs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.contents[string(tar)] = refs
}

// Missing implements preload.Store.
func (s *Store) Missing(_ context.Context, refs []string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.MissingErr != nil {
		return nil, s.MissingErr
	}
	var out []string
	for _, r := range refs {
		if !s.present[r] {
			out = append(out, r)
		}
	}
	return out, nil
}

// Import implements preload.Store.
func (s *Store) Import(_ context.Context, r io.Reader) ([]string, error) {
	data, err := io.ReadAll(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.imports++
	if err != nil {
		return nil, err
	}
	if s.ImportErr != nil {
		return nil, s.ImportErr
	}
	refs, ok := s.contents[string(data)]
	if !ok {
		return nil, errors.New("unrecognized image format")
	}
	for _, ref := range refs {
		s.present[ref] = true
		if h, ok := s.imported[ref]; ok {
			s.held[ref] = h
		} else {
			delete(s.held, ref)
		}
	}
	return slices.Clone(refs), nil
}

var _ preload.DigestReader = (*Store)(nil)

// Hold makes the store hold h under h.Ref, present.
func (s *Store) Hold(h preload.Held) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.present[h.Ref] = true
	s.held[h.Ref] = h
}

// ImportsAs declares that an import that creates h.Ref makes the store hold h under it; without
// it, the import leaves what the store holds under the name unknown.
func (s *Store) ImportsAs(h preload.Held) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.imported[h.Ref] = h
}

// Held implements preload.DigestReader, for the present images the store was told what it holds
// under (Hold, ImportsAs): unlike a real store's, it leaves the others out, so they are judged by
// name as in a store without the capability.
func (s *Store) Held(_ context.Context, refs []string) ([]preload.Held, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.MissingErr != nil {
		return nil, s.MissingErr
	}
	var out []preload.Held
	for _, r := range refs {
		if h, ok := s.held[r]; ok && s.present[r] {
			out = append(out, h)
		}
	}
	return out, nil
}

// HeldAs returns what the store holds under ref, when it knows.
func (s *Store) HeldAs(ref string) (preload.Held, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.held[ref]
	return h, ok
}

// Imports returns how many times Import was called.
func (s *Store) Imports() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.imports
}

// Present returns whether ref is present.
func (s *Store) Present(ref string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.present[ref]
}

// String lists the present images, for failure messages.
func (s *Store) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b bytes.Buffer
	for r := range s.present {
		fmt.Fprintln(&b, r)
	}
	return b.String()
}
