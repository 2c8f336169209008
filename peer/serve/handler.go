package serve

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/cache"
)

// Handler serves this node's content to its peers:
//
//	GET/HEAD /v1/iso/{sha512}          the ISO bytes held (Range requests; a partial download
//	                                   serves only the chunks it holds, 416 otherwise)
//	GET      /v1/iso/{sha512}/chunks   the digest of every held chunk (ChunkList as JSON)
//
// Peers prove that they are members of the ring with a bearer token (see peer.Token); the ISO paths
// ask for it when one is configured (see RequireToken).
type Handler struct {
	log     *slog.Logger
	store   *cache.Store
	metrics *peer.Metrics
	mux     *http.ServeMux
	token   string
}

// Option configures a Handler.
type Option func(*Handler)

// RequireToken makes the Handler serve the ISO paths only to requests that carry
// "Authorization: Bearer <token>" (401 without it, 403 with another). Without a token the ISO
// paths are open: the ISO is the release, public.
func RequireToken(token string) Option { return func(h *Handler) { h.token = token } }

// authorized answers 401 or 403 and returns false unless r carries the token. Without a token
// configured, it lets every request through.
func (h *Handler) authorized(w http.ResponseWriter, r *http.Request) bool {
	if h.token == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="upgrade-repo peers"`)
		http.Error(w, "a peer's bearer token is required", http.StatusUnauthorized)
		return false
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(h.token)) != 1 {
		http.Error(w, "the bearer token is not this ring's", http.StatusForbidden)
		return false
	}
	return true
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns the handler over store. metrics may be nil.
func NewHandler(log *slog.Logger, store *cache.Store, metrics *peer.Metrics, opts ...Option) *Handler {
	h := &Handler{log: log, store: store, metrics: metrics, mux: http.NewServeMux()}
	for _, o := range opts {
		o(h)
	}
	h.mux.HandleFunc("GET /v1/iso/{sha512}", h.serveISO)
	h.mux.HandleFunc("GET /v1/iso/{sha512}/chunks", h.serveChunks)
	return h
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// requested returns the ISO r names, or answers 401 or 403 (see authorized) or 404 and returns
// false.
func (h *Handler) requested(w http.ResponseWriter, r *http.Request) (*cache.LocalISO, bool) {
	if !h.authorized(w, r) {
		return nil, false
	}
	l, ok := h.store.ISO(r.PathValue("sha512"))
	if !ok {
		http.Error(w, "ISO not held", http.StatusNotFound)
	}
	return l, ok
}

func (h *Handler) serveChunks(w http.ResponseWriter, r *http.Request) {
	l, ok := h.requested(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(peer.ChunkList{Size: l.Size(), ChunkSize: l.ChunkSize(), Complete: l.Complete(), Digests: l.ChunkDigests()})
}

func (h *Handler) serveISO(w http.ResponseWriter, r *http.Request) {
	l, ok := h.requested(w, r)
	if !ok {
		return
	}
	size := l.Size()
	off, n := int64(0), size
	status := http.StatusOK
	if rh := r.Header.Get("Range"); rh != "" {
		var err error
		off, n, err = httprange.ParseRange(rh, size)
		if err != nil {
			w.Header().Set("Content-Range", httprange.Unsatisfied(size))
			http.Error(w, err.Error(), http.StatusRequestedRangeNotSatisfiable)
			return
		}
		status = http.StatusPartialContent
		w.Header().Set("Content-Range", httprange.Sent(off, n, size))
	}
	if !l.HasRange(off, n) {
		w.Header().Set("Content-Range", httprange.Unsatisfied(size))
		http.Error(w, "range not held yet", http.StatusRequestedRangeNotSatisfiable)
		return
	}
	if r.Method != http.MethodHead {
		if err := l.Check(off, n); err != nil {
			// The chunk is withdrawn from what this node advertises: the peer turns to another.
			w.Header().Del("Content-Range")
			http.Error(w, fmt.Sprintf("this node's copy is damaged there: %v", err), http.StatusServiceUnavailable)
			return
		}
	}
	w.Header().Set("Accept-Ranges", "bytes")
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	if r.Method == http.MethodHead {
		w.WriteHeader(status)
		return
	}
	sent, err := h.send(w, status, l, off, n)
	l.Release(off, n)
	h.metrics.Served(peer.KindISO, sent)
	if err != nil {
		h.log.Debug("ISO transfer to peer ended early", "remote", r.RemoteAddr, "sent", sent, "err", err)
	}
}

// send answers with status and the n bytes of l at off, checked already. It sends them with
// sendfile: from a handle of its own on the ISO's file (concurrent requests must not share a file
// position), moved to off with Seek and read through an io.LimitedReader, the form net/http hands
// to sendfile; the headers go out first, so that net/http does not read the first bytes itself to
// sniff them. When the file cannot be opened again (moved into place or removed meanwhile), the
// bytes are read from the ISO's open file and copied.
func (h *Handler) send(w http.ResponseWriter, status int, l *cache.LocalISO, off, n int64) (int64, error) {
	f, err := l.Open()
	if err == nil {
		defer f.Close()
		_, err = f.Seek(off, io.SeekStart)
	}
	if err != nil {
		h.log.Debug("sending an ISO range through user space", "sha512", l.SHA512(), "err", err)
		w.WriteHeader(status)
		sent, err := io.Copy(w, io.NewSectionReader(l.File(), off, n))
		h.metrics.SentFile(peer.FileCopied, sent)
		return sent, err
	}
	w.WriteHeader(status)
	_ = http.NewResponseController(w).Flush()
	src := &fileReader{f: f}
	sent, err := io.Copy(w, &io.LimitedReader{R: src, N: n})
	h.metrics.SentFile(peer.FileZeroCopy, sent-src.copied)
	h.metrics.SentFile(peer.FileCopied, src.copied)
	return sent, err
}

// fileReader reads a file and counts the bytes that went through Read, i.e. through user space.
// It exposes the file's SyscallConn, which is what lets net/http send the file with sendfile
// instead of reading it.
type fileReader struct {
	f      *os.File
	copied int64
}

var (
	_ io.Reader    = (*fileReader)(nil)
	_ syscall.Conn = (*fileReader)(nil)
)

// Read reads from the file, counting the bytes.
func (r *fileReader) Read(p []byte) (int, error) {
	n, err := r.f.Read(p)
	r.copied += int64(n)
	return n, err
}

// SyscallConn returns the raw connection of the file, for sendfile.
func (r *fileReader) SyscallConn() (syscall.RawConn, error) { return r.f.SyscallConn() }
