package registry

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sync"
)

// Media types of manifests and indexes, docker's and OCI's.
const (
	mediaOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	mediaOCIIndex       = "application/vnd.oci.image.index.v1+json"
	mediaDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	mediaDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
)

// maxManifest bounds the size of a manifest or index the registry reads into memory.
const maxManifest = 4 << 20

// maxDepth bounds index nesting, so that a cyclic or absurd index cannot recurse forever.
const maxDepth = 4

var digestRE = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// entry is what the scope knows of one digest it admits.
type entry struct {
	mediaType string
	manifest  bool
	// ref is the listed image the digest was reached from.
	ref string
}

// scope is the set of digests that belong to listed images: only those are served. It is safe
// for concurrent use.
type scope struct {
	mu      sync.Mutex
	digests map[string]entry
	// rebuild serializes rebuilds, so that a burst of misses walks the store once.
	rebuild sync.Mutex
}

func (s *scope) get(dgst string) (entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.digests[dgst]
	return e, ok
}

func (s *scope) put(dgst string, e entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.digests == nil {
		s.digests = map[string]entry{}
	}
	if old, ok := s.digests[dgst]; ok && old.manifest && !e.manifest {
		return
	}
	s.digests[dgst] = e
}

// manifestDoc is what the registry reads of a manifest or an index.
type manifestDoc struct {
	MediaType string      `json:"mediaType"`
	Config    *childDesc  `json:"config"`
	Layers    []childDesc `json:"layers"`
	Manifests []childDesc `json:"manifests"`
}

type childDesc struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

// parseManifest decodes body and returns its media type (mediaType when given, else what the body
// says or its shape implies) and its children: the manifests of an index, or the config and
// layers of a manifest.
func parseManifest(body []byte, mediaType string) (string, []childDesc, bool, error) {
	var doc manifestDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		return "", nil, false, fmt.Errorf("decode manifest: %w", err)
	}
	if mediaType == "" {
		mediaType = doc.MediaType
	}
	index := doc.Manifests != nil || mediaType == mediaOCIIndex || mediaType == mediaDockerList
	if mediaType == "" {
		mediaType = mediaOCIManifest
		if index {
			mediaType = mediaOCIIndex
		}
	}
	if index {
		return mediaType, doc.Manifests, true, nil
	}
	children := doc.Layers
	if doc.Config != nil {
		children = append([]childDesc{*doc.Config}, children...)
	}
	return mediaType, children, false, nil
}

// admit puts the manifest dgst of image ref and its children into the scope.
func (s *scope) admit(ref, dgst, mediaType string, body []byte) error {
	mt, children, index, err := parseManifest(body, mediaType)
	if err != nil {
		return fmt.Errorf("manifest %s of %s: %w", dgst, ref, err)
	}
	s.put(dgst, entry{mediaType: mt, manifest: true, ref: ref})
	for _, c := range children {
		if !digestRE.MatchString(c.Digest) {
			return fmt.Errorf("manifest %s of %s: child digest %q: want sha256:<64 hex digits>", dgst, ref, c.Digest)
		}
		s.put(c.Digest, entry{mediaType: c.MediaType, manifest: index, ref: ref})
	}
	return nil
}

// refresh rebuilds the scope from the listed images the store holds, walking each one's index and
// manifests; digests admitted earlier for images still listed (those served from peers) are kept.
func (s *scope) refresh(ctx context.Context, c Content, refs []string) error {
	s.rebuild.Lock()
	defer s.rebuild.Unlock()
	fresh := &scope{}
	listed := make(map[string]bool, len(refs))
	for _, ref := range refs {
		listed[ref] = true
		d, err := c.Resolve(ctx, ref)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("resolve %s: %w", ref, err)
		}
		if err := fresh.walk(ctx, c, ref, d.Digest, d.MediaType, 0); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for d, e := range s.digests {
		if _, ok := fresh.digests[d]; !ok && listed[e.ref] {
			fresh.put(d, e)
		}
	}
	s.digests = fresh.digests
	return nil
}

func (s *scope) walk(ctx context.Context, c Content, ref, dgst, mediaType string, depth int) error {
	if depth > maxDepth {
		return nil
	}
	body, err := readManifest(ctx, c, dgst)
	if errors.Is(err, ErrNotFound) {
		return nil // this platform's manifest is not on the node: nothing of it is served from here
	}
	if err != nil {
		return err
	}
	if err := s.admit(ref, dgst, mediaType, body); err != nil {
		return err
	}
	e, _ := s.get(dgst)
	_, children, index, _ := parseManifest(body, e.mediaType)
	if !index {
		return nil
	}
	for _, m := range children {
		if err := s.walk(ctx, c, ref, m.Digest, m.MediaType, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// readManifest reads the manifest dgst from c whole, checking its size and its digest.
func readManifest(ctx context.Context, c Content, dgst string) ([]byte, error) {
	b, err := c.Open(ctx, dgst)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	if b.Size() > maxManifest {
		return nil, fmt.Errorf("manifest %s: %d bytes, over the %d a manifest may have", dgst, b.Size(), maxManifest)
	}
	body := make([]byte, b.Size())
	if n, err := b.ReadAt(body, 0); n < len(body) {
		return nil, fmt.Errorf("read manifest %s: %w", dgst, cmp.Or(err, io.ErrUnexpectedEOF))
	}
	if got := digestOf(body); got != dgst {
		return nil, fmt.Errorf("manifest %s: the store's bytes have digest %s", dgst, got)
	}
	return body, nil
}
