package registry

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
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
	// size is the digest's size as the manifest that named it says; -1 when unknown (a pinned
	// manifest, which is bounded by maxManifest instead).
	size int64
	// ref is the listed image the digest was reached from, and root the digest of that image's
	// manifest or index (a pin, or the target the node's store gives the tag).
	ref, root string
	// config is the config pin root was admitted for: empty when root is a manifest pin or the
	// image has no pin.
	config string
}

// Bounds of the scope's work on digests it does not admit (see lookup).
const (
	// rescanAfter is how old the last walk of the store must be before a digest outside the
	// scope (and not a recent miss) makes the scope walk it again: the catalog's changes are
	// what make it walk; this only catches the store's own (an image imported under a listed
	// reference that no pin names).
	rescanAfter = time.Minute
	// missTTL is how long a digest outside the scope is answered as one without a walk.
	missTTL = 5 * time.Minute
	// maxMisses bounds the negative cache; past it, it starts again empty.
	maxMisses = 4096
	// walkTimeout bounds one walk of the store, which its waiters share.
	walkTimeout = 2 * time.Minute
)

// scope is the set of digests that belong to listed images: only those are served. It walks the
// store once per change of the catalog, answers the digests it does not admit from a bounded
// negative cache, and collapses concurrent walks into one. It is safe for concurrent use.
type scope struct {
	mu      sync.Mutex
	digests map[string]entry
	// key is the catalog's version the last walk was made for, walked when it ended (zero:
	// never).
	key    string
	walked time.Time
	// misses are digests found outside the scope since the last walk, with when.
	misses map[string]time.Time
	// flight is the walk in progress, nil when none.
	flight *walkFlight
	// now is the clock (time.Now).
	now func() time.Time
}

// walkFlight is one walk of the store, shared by the lookups that wait for it.
type walkFlight struct {
	done chan struct{}
	err  error
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
	s.putLocked(dgst, e)
}

func (s *scope) putLocked(dgst string, e entry) {
	if s.digests == nil {
		s.digests = map[string]entry{}
	}
	if old, ok := s.digests[dgst]; ok && old.manifest && !e.manifest {
		return
	}
	s.digests[dgst] = e
	delete(s.misses, dgst)
}

func (s *scope) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// catalogKey returns what identifies the catalog's current content: its generation when it has
// one, else its references and pins.
func catalogKey(c Catalog) string {
	if v, ok := c.(Versioned); ok {
		return "g" + strconv.FormatUint(v.Generation(), 10)
	}
	var b strings.Builder
	for _, ref := range c.Refs() {
		b.WriteString(ref)
		for _, p := range pinsOf(c, ref) {
			b.WriteString("@" + p.Manifest + "+" + p.Config)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// pinsOf returns the pins c gives ref, none when c pins nothing.
func pinsOf(c Catalog, ref string) []Pin {
	if p, ok := c.(Pinned); ok {
		return p.Pins(ref)
	}
	return nil
}

// lookup returns the scope's entry of dgst. A digest outside the scope makes the scope walk the
// store (once, whoever else waits for it) only when the catalog changed since the last walk, or
// when that walk is older than rescanAfter and dgst is not a recent miss; otherwise it is
// answered as a miss at once. A walk that fails is logged with log and leaves the scope as it was.
func (s *scope) lookup(ctx context.Context, c Content, cat Catalog, dgst string, log func(error)) (entry, bool) {
	key := catalogKey(cat)
	s.mu.Lock()
	if e, ok := s.digests[dgst]; ok {
		s.mu.Unlock()
		return e, true
	}
	now := s.clock()
	if !s.walked.IsZero() && s.key == key {
		if t, ok := s.misses[dgst]; ok && now.Sub(t) < missTTL {
			s.mu.Unlock()
			return entry{}, false
		}
		if now.Sub(s.walked) < rescanAfter {
			s.missLocked(dgst, now)
			s.mu.Unlock()
			return entry{}, false
		}
	}
	fl := s.flight
	if fl == nil {
		fl = &walkFlight{done: make(chan struct{})}
		s.flight = fl
		// The walk is shared: the request that started it may go away, the others still wait.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), walkTimeout)
		go func() {
			defer cancel()
			err := s.refresh(wctx, c, cat, key)
			s.mu.Lock()
			s.flight = nil
			s.mu.Unlock()
			fl.err = err
			close(fl.done)
		}()
	}
	s.mu.Unlock()
	select {
	case <-fl.done:
	case <-ctx.Done():
		return entry{}, false
	}
	if fl.err != nil && log != nil {
		log(fl.err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.digests[dgst]; ok {
		return e, true
	}
	s.missLocked(dgst, s.clock())
	return entry{}, false
}

func (s *scope) missLocked(dgst string, now time.Time) {
	if s.misses == nil || len(s.misses) >= maxMisses {
		s.misses = map[string]time.Time{}
	}
	s.misses[dgst] = now
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

// pinSets splits pins into the manifests they name and the configs of those that name none.
func pinSets(pins []Pin) (manifests, configs []string) {
	for _, p := range pins {
		switch {
		case p.Manifest != "":
			manifests = append(manifests, p.Manifest)
		case p.Config != "":
			configs = append(configs, p.Config)
		}
	}
	return manifests, configs
}

// manifestConfig returns the digest of the config the image manifest body names; empty for an
// index or what cannot be read as a manifest.
func manifestConfig(body []byte, mediaType string) string {
	_, children, index, err := parseManifest(body, mediaType)
	if err != nil || index || len(children) == 0 {
		return ""
	}
	var doc manifestDoc
	if json.Unmarshal(body, &doc) != nil || doc.Config == nil {
		return ""
	}
	return doc.Config.Digest
}

// admit puts the manifest dgst of image ref (reached from the manifest or index root, admitted
// for the config pin cfg when not empty) and its children into the scope, with the sizes the
// manifest gives them.
func (s *scope) admit(ref, root, cfg, dgst, mediaType string, body []byte) error {
	mt, children, index, err := parseManifest(body, mediaType)
	if err != nil {
		return fmt.Errorf("manifest %s of %s: %w", dgst, ref, err)
	}
	for _, c := range children {
		if !digestRE.MatchString(c.Digest) {
			return fmt.Errorf("manifest %s of %s: child digest %q: want sha256:<64 hex digits>", dgst, ref, c.Digest)
		}
		if c.Size < 0 {
			return fmt.Errorf("manifest %s of %s: child %s has size %d", dgst, ref, c.Digest, c.Size)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putLocked(dgst, entry{mediaType: mt, manifest: true, size: int64(len(body)), ref: ref, root: root, config: cfg})
	for _, c := range children {
		s.putLocked(c.Digest, entry{mediaType: c.MediaType, manifest: index, size: c.Size, ref: ref, root: root, config: cfg})
	}
	return nil
}

// refresh rebuilds the scope for the catalog's version key: the pinned manifests of the listed
// images and what the store holds of them; what the store holds under the tag of an image pinned
// by its config, when its manifest names that config; and, for a listed image with no pin, what
// the store holds under its tag. Digests admitted earlier (those served from peers) are kept
// while their image is listed with the pin they were admitted for.
func (s *scope) refresh(ctx context.Context, c Content, cat Catalog, key string) error {
	fresh := &scope{}
	type listing struct {
		pinned             bool
		manifests, configs []string
	}
	listed := map[string]listing{}
	for _, ref := range cat.Refs() {
		pins := pinsOf(cat, ref)
		manifests, configs := pinSets(pins)
		listed[ref] = listing{pinned: len(pins) > 0, manifests: manifests, configs: configs}
		// The tag resolves only to its pins: what the store holds under it counts only when its
		// config is one the release names.
		for _, p := range manifests {
			fresh.put(p, entry{manifest: true, size: -1, ref: ref, root: p})
			if err := fresh.walk(ctx, c, ref, p, "", p, "", 0); err != nil {
				return err
			}
		}
		if len(pins) > 0 && len(configs) == 0 {
			continue
		}
		d, err := c.Resolve(ctx, ref)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("resolve %s: %w", ref, err)
		}
		cfg := ""
		if len(configs) > 0 {
			body, err := readManifest(ctx, c, d.Digest)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if cfg = manifestConfig(body, d.MediaType); !slices.Contains(configs, cfg) {
				continue // another image under the release's tag
			}
		}
		if err := fresh.walk(ctx, c, ref, d.Digest, cfg, d.Digest, d.MediaType, 0); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for d, e := range s.digests {
		if _, ok := fresh.digests[d]; ok {
			continue
		}
		l, ok := listed[e.ref]
		if ok && (!l.pinned || slices.Contains(l.manifests, e.root) || (e.config != "" && slices.Contains(l.configs, e.config))) {
			fresh.putLocked(d, e)
		}
	}
	s.digests = fresh.digests
	s.key, s.walked, s.misses = key, s.clock(), nil
	return nil
}

func (s *scope) walk(ctx context.Context, c Content, ref, root, cfg, dgst, mediaType string, depth int) error {
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
	if err := s.admit(ref, root, cfg, dgst, mediaType, body); err != nil {
		return err
	}
	e, _ := s.get(dgst)
	_, children, index, _ := parseManifest(body, e.mediaType)
	if !index {
		return nil
	}
	for _, m := range children {
		if err := s.walk(ctx, c, ref, root, cfg, m.Digest, m.MediaType, depth+1); err != nil {
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
