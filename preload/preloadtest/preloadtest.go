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
	imports  int
	// MissingErr, when set, is returned by Missing; ImportErr by Import after reading the stream.
	MissingErr error
	ImportErr  error
}

var _ preload.Store = (*Store)(nil)

// NewStore returns a Store holding the present images.
func NewStore(present ...string) *Store {
	s := &Store{present: map[string]bool{}, contents: map[string][]string{}}
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
	}
	return slices.Clone(refs), nil
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
