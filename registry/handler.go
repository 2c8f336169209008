package registry

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
	"github.com/upgrade-repo/upgrade-repo/release"
)

// Handler serves the /v2/ API. Create it with NewHandler; it is safe for concurrent use.
type Handler struct {
	content Content
	catalog Catalog
	peers   *Peers
	token   string
	log     *slog.Logger
	metrics *Metrics
	scope   scope
}

var _ http.Handler = (*Handler)(nil)

// Option configures a Handler.
type Option func(*Handler)

// WithPeers makes the Handler fetch what the node lacks from peers (nil: never).
func WithPeers(p *Peers) Option { return func(h *Handler) { h.peers = p } }

// WithToken sets the ring's bearer token that peers' requests must carry (empty: an open ring).
func WithToken(token string) Option { return func(h *Handler) { h.token = token } }

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(h *Handler) { h.log = l } }

// WithMetrics sets the metrics the Handler counts into (nil: none).
func WithMetrics(m *Metrics) Option { return func(h *Handler) { h.metrics = m } }

// NewHandler returns the /v2/ API over the node's content, serving the images catalog lists.
func NewHandler(content Content, catalog Catalog, opts ...Option) (*Handler, error) {
	if content == nil || catalog == nil {
		return nil, errors.New("registry: a content store and a catalog are required")
	}
	h := &Handler{content: content, catalog: catalog, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(h)
	}
	return h, nil
}

// PeerHeader marks a request one agent sends another: it is answered from the receiving node's
// own store only.
const PeerHeader = "Upgrade-Repo-Peer"

// nameRE is a repository name of the distribution spec, with an optional registry host first.
var nameRE = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)

var tagRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.fail(w, r, "other", http.StatusMethodNotAllowed, "UNSUPPORTED", "this registry is read-only")
		return
	}
	fromPeer, ok := h.authorize(w, r)
	if !ok {
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v2/")
	if !ok && r.URL.Path != "/v2" {
		h.fail(w, r, "other", http.StatusNotFound, "NAME_UNKNOWN", "not a /v2/ path")
		return
	}
	if rest == "" {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
		h.count("base", http.StatusOK)
		_, _ = io.WriteString(w, "{}")
		return
	}
	for _, kind := range []string{"manifests", "blobs"} {
		i := strings.LastIndex(rest, "/"+kind+"/")
		if i < 0 {
			continue
		}
		name, ref := rest[:i], rest[i+len(kind)+2:]
		if !nameRE.MatchString(name) {
			h.fail(w, r, kind, http.StatusNotFound, "NAME_INVALID", fmt.Sprintf("repository name %q is not valid", name))
			return
		}
		req := request{name: name, ref: ref, ns: r.URL.Query().Get("ns"), fromPeer: fromPeer}
		if kind == "manifests" {
			h.serveManifest(w, r, req)
		} else {
			h.serveBlob(w, r, req)
		}
		return
	}
	h.fail(w, r, "other", http.StatusNotFound, "NAME_UNKNOWN", fmt.Sprintf("%s: neither a manifest nor a blob path", r.URL.Path))
}

// request is one manifest or blob request, parsed.
type request struct {
	name, ref, ns string
	fromPeer      bool
}

// image returns the fully qualified image reference a tag request names: ns (containerd's
// mirror parameter, the registry the image was asked of) joined to the name, else the name read
// as a reference.
func (q request) image() (string, error) {
	ref := q.name + ":" + q.ref
	if q.ns != "" {
		ref = q.ns + "/" + ref
	}
	return release.NormalizeRef(ref)
}

// authorize tells a peer's request from the node's: a request with a bearer token or PeerHeader
// is a peer's and must carry the ring's token when there is one. It answers 401 or 403 and
// returns false when that fails.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request) (fromPeer, ok bool) {
	auth := r.Header.Get("Authorization")
	if auth == "" && r.Header.Get(PeerHeader) == "" {
		return false, true
	}
	if h.token == "" {
		return true, true
	}
	got, found := strings.CutPrefix(auth, "Bearer ")
	switch {
	case !found:
		h.fail(w, r, "other", http.StatusUnauthorized, "UNAUTHORIZED", "a peer's request needs the ring's bearer token")
		return true, false
	case subtle.ConstantTimeCompare([]byte(got), []byte(h.token)) != 1:
		h.fail(w, r, "other", http.StatusForbidden, "DENIED", "the bearer token is not this ring's")
		return true, false
	}
	return true, true
}

func (h *Handler) serveManifest(w http.ResponseWriter, r *http.Request, q request) {
	ctx := r.Context()
	var (
		ref, root, cfg, dgst, mediaType string
		body                            []byte
		err                             error
	)
	if digestRE.MatchString(q.ref) {
		dgst = q.ref
		e, ok := h.inScope(r, dgst)
		if !ok || !e.manifest {
			h.fail(w, r, "manifests", http.StatusNotFound, "MANIFEST_UNKNOWN", fmt.Sprintf("manifest %s is not one of a release image", dgst))
			return
		}
		ref, root, cfg = e.ref, e.root, e.config
		body, mediaType, err = h.manifest(ctx, q, dgst, e)
	} else {
		if !tagRE.MatchString(q.ref) {
			h.fail(w, r, "manifests", http.StatusNotFound, "TAG_INVALID", fmt.Sprintf("tag %q is not valid", q.ref))
			return
		}
		if ref, err = q.image(); err != nil || !slices.Contains(h.catalog.Refs(), ref) {
			h.fail(w, r, "manifests", http.StatusNotFound, "MANIFEST_UNKNOWN", fmt.Sprintf("%s:%s is not an image of a release this node serves", q.name, q.ref))
			return
		}
		dgst, body, mediaType, cfg, err = h.resolveTag(ctx, q, ref)
		root = dgst
	}
	if errors.Is(err, ErrNotFound) {
		h.fail(w, r, "manifests", http.StatusNotFound, "MANIFEST_UNKNOWN", fmt.Sprintf("manifest %s of %s is held by neither this node nor a peer", q.ref, q.name))
		return
	}
	if err == nil {
		err = h.scope.admit(ref, root, cfg, dgst, mediaType, body)
	}
	if err != nil {
		h.log.Error("serve manifest", "name", q.name, "reference", q.ref, "err", err)
		h.fail(w, r, "manifests", http.StatusBadGateway, "UNKNOWN", "the manifest could not be read")
		return
	}
	e, _ := h.scope.get(dgst)
	w.Header().Set("Content-Type", e.mediaType)
	w.Header().Set("Docker-Content-Digest", dgst)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	h.count("manifests", http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

// resolveTag returns the manifest the listed image ref is served as, and the config pin it was
// taken for (empty when none). A reference pinned to manifests is one of them, from the node's
// store or, by digest, from a peer. A reference pinned to configs is a manifest that names one of
// them: the one the store holds under the tag, else one a peer holds under it, its bytes checked
// against the digest they hash to. Nothing else the store or a peer holds under the tag counts.
// A reference with no pin is what the node's store holds under the tag, and never a peer's.
func (h *Handler) resolveTag(ctx context.Context, q request, ref string) (dgst string, body []byte, mediaType, cfg string, err error) {
	pins := pinsOf(h.catalog, ref)
	local, lerr := h.content.Resolve(ctx, ref)
	if lerr != nil && !errors.Is(lerr, ErrNotFound) {
		return "", nil, "", "", lerr
	}
	if len(pins) == 0 {
		if lerr != nil {
			return "", nil, "", "", lerr
		}
		body, err = readManifest(ctx, h.content, local.Digest)
		return local.Digest, body, local.MediaType, "", err
	}
	manifests, configs := pinSets(pins)
	if lerr == nil {
		// The pin the store holds under the tag goes first: it needs no peer.
		if i := slices.Index(manifests, local.Digest); i > 0 {
			manifests = slices.Concat(manifests[i:i+1], manifests[:i], manifests[i+1:])
		}
	}
	err = ErrNotFound
	for _, p := range manifests {
		e := entry{manifest: true, size: -1, ref: ref, root: p}
		if lerr == nil && local.Digest == p {
			e.mediaType = local.MediaType
		}
		body, mediaType, err = h.manifest(ctx, q, p, e)
		if err == nil {
			return p, body, mediaType, "", nil
		}
		if ctx.Err() != nil {
			return "", nil, "", "", ctx.Err()
		}
	}
	if len(configs) == 0 {
		return "", nil, "", "", err
	}
	if lerr == nil {
		b, rerr := readManifest(ctx, h.content, local.Digest)
		switch c := manifestConfig(b, local.MediaType); {
		case rerr == nil && slices.Contains(configs, c):
			return local.Digest, b, local.MediaType, c, nil
		case rerr != nil && !errors.Is(rerr, ErrNotFound):
			err = rerr
		}
	}
	if h.peers == nil || q.fromPeer {
		return "", nil, "", "", err
	}
	accept := func(body []byte, mediaType string) (string, bool) {
		c := manifestConfig(body, mediaType)
		return c, slices.Contains(configs, c)
	}
	dgst, body, mediaType, cfg, perr := h.peers.manifestByTag(ctx, q.path("manifests", q.ref), accept)
	if perr == nil || errors.Is(err, ErrNotFound) {
		err = perr
	}
	if perr != nil {
		return "", nil, "", "", err
	}
	return dgst, body, mediaType, cfg, nil
}

// manifest returns the manifest dgst, which the scope knows as e: from the node's store, else,
// for a request that is not a peer's, from the peers, checked against dgst.
func (h *Handler) manifest(ctx context.Context, q request, dgst string, e entry) ([]byte, string, error) {
	body, err := readManifest(ctx, h.content, dgst)
	if errors.Is(err, ErrNotFound) && h.peers != nil && !q.fromPeer {
		return h.peers.manifest(ctx, q.path("manifests", dgst), dgst, e.mediaType, e.size)
	}
	return body, e.mediaType, err
}

// path is the path and query a peer is asked for what q asks: by digest, or by tag for an image
// pinned to its config.
func (q request) path(kind, ref string) string {
	p := "/v2/" + q.name + "/" + kind + "/" + ref
	if q.ns != "" {
		p += "?ns=" + url.QueryEscape(q.ns)
	}
	return p
}

// inScope returns the scope's entry of dgst (see scope.lookup).
func (h *Handler) inScope(r *http.Request, dgst string) (entry, bool) {
	return h.scope.lookup(r.Context(), h.content, h.catalog, dgst, func(err error) {
		h.log.Warn("list the release images' digests", "err", err)
	})
}

func (h *Handler) serveBlob(w http.ResponseWriter, r *http.Request, q request) {
	if !digestRE.MatchString(q.ref) {
		h.fail(w, r, "blobs", http.StatusNotFound, "DIGEST_INVALID", fmt.Sprintf("digest %q: want sha256:<64 hex digits>", q.ref))
		return
	}
	e, ok := h.inScope(r, q.ref)
	if !ok {
		h.fail(w, r, "blobs", http.StatusNotFound, "BLOB_UNKNOWN", fmt.Sprintf("blob %s is not one of a release image", q.ref))
		return
	}
	source := "local"
	b, err := h.content.Open(r.Context(), q.ref)
	var size int64
	switch {
	case err == nil:
		defer b.Close()
		size = b.Size()
	case errors.Is(err, ErrNotFound) && h.peers != nil && !q.fromPeer:
		source = "peer"
		if r.Method == http.MethodHead {
			// Its size is all a HEAD needs: no peer sends the blob for it.
			size, err = h.peers.blobSize(r.Context(), q.path("blobs", q.ref), q.ref, e.size)
			break
		}
		if b, err = h.peers.blob(r.Context(), q.path("blobs", q.ref), q.ref, e.size); err == nil {
			defer b.Close()
			size = b.Size()
		}
	}
	if errors.Is(err, ErrNotFound) {
		h.fail(w, r, "blobs", http.StatusNotFound, "BLOB_UNKNOWN", fmt.Sprintf("blob %s is held by neither this node nor a peer", q.ref))
		return
	}
	if err != nil {
		h.log.Error("serve blob", "digest", q.ref, "source", source, "err", err)
		h.fail(w, r, "blobs", http.StatusBadGateway, "UNKNOWN", "the blob could not be read")
		return
	}
	off, n := int64(0), size
	status := http.StatusOK
	hd := w.Header()
	hd.Set("Docker-Content-Digest", q.ref)
	hd.Set("Accept-Ranges", "bytes")
	hd.Set("Content-Type", "application/octet-stream")
	if rg := r.Header.Get("Range"); rg != "" {
		if off, n, err = httprange.ParseRange(rg, size); err != nil {
			if errors.Is(err, httprange.ErrUnsatisfiable) {
				hd.Set("Content-Range", httprange.Unsatisfied(size))
				h.fail(w, r, "blobs", http.StatusRequestedRangeNotSatisfiable, "BLOB_UNKNOWN", err.Error())
				return
			}
			h.fail(w, r, "blobs", http.StatusBadRequest, "UNSUPPORTED", err.Error())
			return
		}
		status = http.StatusPartialContent
		hd.Set("Content-Range", httprange.Sent(off, n, size))
	}
	hd.Set("Content-Length", strconv.FormatInt(n, 10))
	w.WriteHeader(status)
	h.count("blobs", status)
	if r.Method == http.MethodHead {
		return
	}
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	// The ResponseWriter's own ReadFrom would read in io.Copy's 32 KiB: hidden, the reads are
	// of the buffer's size.
	sent, err := io.CopyBuffer(struct{ io.Writer }{w}, io.NewSectionReader(b, off, n), *buf)
	h.metrics.sent(source, sent)
	if err != nil && r.Context().Err() == nil {
		h.log.Warn("send blob", "digest", q.ref, "source", source, "sent", sent, "err", err)
	}
}

// copySize is the size of each read of a blob being sent. A blob of the node's store is read
// through containerd's content service, one request per read: in io.Copy's reads of 32 KiB a
// large layer moves at about 80 MiB/s, with as much CPU spent in containerd as in the agent; in
// reads of 1 MiB, about five times as fast for a fifth of the CPU.
const copySize = 1 << 20

// copyBufs holds the buffers of blobs being sent, *[]byte of copySize bytes.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, copySize); return &b }}

// fail answers with the distribution API's error body.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, route string, status int, code, msg string) {
	h.count(route, status)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	type apiError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	_ = json.NewEncoder(w).Encode(struct {
		Errors []apiError `json:"errors"`
	}{[]apiError{{Code: code, Message: msg}}})
}

func (h *Handler) count(route string, status int) { h.metrics.request(route, status) }

// digestOf returns the sha256 digest of p as "sha256:<hex>".
func digestOf(p []byte) string {
	sum := sha256.Sum256(p)
	return "sha256:" + hex.EncodeToString(sum[:])
}
