package repo

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Prefix is the path prefix under which every path is served as well, as existing upgrade scripts
// expect it.
const Prefix = "/harvester-iso"

// Defaults of the options.
const (
	DefaultSmallFileLimit = 64 << 10
	DefaultMemoryBudget   = 4 << 20
)

// Option configures a Handler.
type Option func(*config)

type config struct {
	backing     string
	identity    string
	volumeID    string
	modTime     time.Time
	log         *slog.Logger
	metrics     *Metrics
	smallLimit  int64
	memoryLimit int64
	check       func(off, n int64) error
}

// WithBackingFile names the file whose byte ranges SpanFS.Span reports (the ISO image). With it,
// large files are sent with sendfile from that file.
func WithBackingFile(path string) Option { return func(c *config) { c.backing = path } }

// WithIdentity sets the identity of the image (such as its checksum, or its volume id, size and
// times) from which, with each file's path and size, the strong ETags derive.
func WithIdentity(id string) Option { return func(c *config) { c.identity = id } }

// WithVolumeID sets the volume id shown in the release info metric.
func WithVolumeID(id string) Option { return func(c *config) { c.volumeID = id } }

// WithModTime sets the Last-Modified time of every file (the image's modification time). Without
// it each file's own modification time is used.
func WithModTime(t time.Time) Option { return func(c *config) { c.modTime = t } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithMetrics sets the metrics the Handler records into (default: none).
func WithMetrics(m *Metrics) Option { return func(c *config) { c.metrics = m } }

// WithSmallFileLimit sets the size up to which files are served from memory (default 64 KiB).
func WithSmallFileLimit(n int64) Option { return func(c *config) { c.smallLimit = n } }

// WithRangeCheck sets a check of the backing file's bytes [off, off+n) before they are sent
// (such as chunks.Verifier.Check): an error refuses them. The first bytes of a response (up to
// 16 MiB) are checked before its headers go out, so that a refusal is a 503; further bytes are
// checked as the response reaches them, and a refusal there cuts the response short. It must be
// safe for concurrent use. Files read through the fs.FS are the file system's to check.
func WithRangeCheck(check func(off, n int64) error) Option {
	return func(c *config) { c.check = check }
}

// WithMemoryBudget bounds the bytes of small files kept in memory (default 4 MiB); files beyond
// the budget are read on each request.
func WithMemoryBudget(n int64) Option { return func(c *config) { c.memoryLimit = n } }

// entry is one indexed file or directory.
type entry struct {
	name     string // fs.FS path; "." for the root
	dir      bool
	size     int64
	modTime  time.Time
	etag     string
	ctype    string
	spanOff  int64
	spanLen  int64
	hasSpan  bool
	children []string // directories: child names, sorted
	// small is a small file's content once read, when the memory budget had room for it.
	small atomic.Pointer[smallFile]
}

// Handler serves one release: its files under / and /harvester-iso/, and its metadata under
// /v1/. It is safe for concurrent use; what it serves does not change once New returns (it only
// keeps copies of small files it read, within its memory budget).
type Handler struct {
	fsys    fs.FS
	cfg     config
	index   map[string]*entry
	meta    metadata
	version string

	mu     sync.Mutex // guards cached
	cached int64      // bytes of the small files kept in memory

	date atomic.Pointer[httpDate] // the Date of the responses of the current second
}

// httpDate is a Date header value and the second (Unix time) it names.
type httpDate struct {
	sec   int64
	value []string
}

// dateHeader returns the Date header value of a response sent now, formatted once a second
// rather than by net/http for each response. It is shared as smallFile's values are.
func (h *Handler) dateHeader() []string {
	now := time.Now()
	if d := h.date.Load(); d != nil && d.sec == now.Unix() {
		return d.value
	}
	d := &httpDate{sec: now.Unix(), value: []string{now.UTC().Format(http.TimeFormat)}}
	h.date.Store(d)
	return d.value
}

// smallFile is a small file's content, read through the file system (which, for an image under
// a range check, checks the bytes before it returns them), with its header values ready to use.
// The values are slices of one string that every response shares: net/http copies the header map
// before it writes it out, and the handlers here replace or delete values, never change them.
// lastMod is nil when the file has no modification time.
type smallFile struct {
	data                         []byte
	ctype, etag, length, lastMod []string
}

// acceptRanges is the Accept-Ranges value of every file, shared as smallFile's values are.
var acceptRanges = []string{"bytes"}

var _ http.Handler = (*Handler)(nil)

// New indexes fsys and parses the release metadata it holds. A release without metadata is
// served too: its /v1/ endpoints answer 404 with a JSON error.
func New(fsys fs.FS, opts ...Option) (*Handler, error) {
	cfg := config{smallLimit: DefaultSmallFileLimit, memoryLimit: DefaultMemoryBudget}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.log == nil {
		cfg.log = slog.New(slog.DiscardHandler)
	}
	// A file system that knows how many entries it has (the ISO reader does) gets an index sized once.
	size := 64
	if c, ok := fsys.(interface{ Entries() int }); ok {
		size = c.Entries() + 1
	}
	h := &Handler{fsys: fsys, cfg: cfg, index: make(map[string]*entry, size)}
	if err := h.buildIndex(); err != nil {
		return nil, err
	}
	h.meta = loadMetadata(fsys, h.index)
	if h.meta.release != nil {
		h.version = h.meta.release.Harvester
	}
	if cfg.metrics != nil {
		cfg.metrics.info.Reset()
		cfg.metrics.info.WithLabelValues(cfg.volumeID, h.version).Set(1)
	}
	for _, e := range h.meta.problems {
		cfg.log.Warn("release metadata unusable", "error", e)
	}
	return h, nil
}

// Version returns the Harvester version of the release, or "" without release metadata.
func (h *Handler) Version() string { return h.version }

// Entries returns the number of files and directories indexed.
func (h *Handler) Entries() int { return len(h.index) }

func (h *Handler) buildIndex() error {
	spans, _ := h.fsys.(SpanFS)
	err := fs.WalkDir(h.fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		e := &entry{name: name, dir: d.IsDir(), size: fi.Size(), modTime: fi.ModTime()}
		if !h.cfg.modTime.IsZero() {
			e.modTime = h.cfg.modTime
		}
		if !e.dir && !fi.Mode().IsRegular() {
			return nil // symlinks and devices are not served
		}
		if e.dir {
			e.size = 0
		} else {
			e.etag = etag(h.cfg.identity, name, e.size)
			e.ctype = contentType(name)
			if spans != nil && e.size > h.cfg.smallLimit {
				e.spanOff, e.spanLen, e.hasSpan = spans.Span(name)
				e.hasSpan = e.hasSpan && e.spanLen == e.size
			}
		}
		h.index[name] = e
		if name != "." {
			parent := h.index[path.Dir(name)]
			parent.children = append(parent.children, path.Base(name))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("index release: %w", err)
	}
	for _, e := range h.index {
		if e.dir {
			sort.Strings(e.children)
		}
	}
	return nil
}

// etag is a strong entity tag from the image identity, the path and the size: FNV-1a, 128 bits,
// the same on every node serving the image, so that a client may resume a download from another.
func etag(identity, name string, size int64) string {
	var buf [256]byte
	b := append(buf[:0], identity...)
	b = append(b, 0)
	b = append(b, name...)
	b = append(b, 0)
	b = strconv.AppendInt(b, size, 10)
	h := fnv.New128a()
	h.Write(b)
	var sum [16]byte
	var out [34]byte
	out[0], out[33] = '"', '"'
	hex.Encode(out[1:33], h.Sum(sum[:0]))
	return string(out[:])
}

// contentType returns the explicit type of the files a release holds; content is never sniffed.
func contentType(name string) string {
	base := strings.ToLower(path.Base(name))
	switch {
	case strings.HasSuffix(base, ".tar.zst"), strings.HasSuffix(base, ".zst"):
		return "application/zstd"
	case strings.HasSuffix(base, ".tar.gz"), strings.HasSuffix(base, ".tgz"), strings.HasSuffix(base, ".gz"):
		return "application/gzip"
	}
	switch path.Ext(base) {
	case ".yaml", ".yml":
		return "application/yaml"
	case ".txt", ".sha512", ".sha256", ".md", ".cfg", ".conf":
		return "text/plain; charset=utf-8"
	case ".json":
		return "application/json"
	case ".html", ".htm":
		return "text/html; charset=utf-8"
	case ".iso":
		return "application/x-iso9660-image"
	case ".tar":
		return "application/x-tar"
	case ".squashfs":
		return "application/vnd.squashfs"
	case ".xz":
		return "application/x-xz"
	case ".qcow2", ".img", ".efi", ".bin":
		return "application/octet-stream"
	}
	return "application/octet-stream"
}

// ServeHTTP answers GET and HEAD for files, directories and the /v1/ metadata endpoints.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed: use GET or HEAD", r.Method))
		return
	}
	p := r.URL.Path
	switch p {
	case "/v1/release":
		h.serveMeta(w, r, h.meta.releaseJSON, h.meta.releaseErr)
		return
	case "/v1/bundle":
		h.serveMeta(w, r, h.meta.bundleJSON, h.meta.bundleErr)
		return
	case "/v1/images":
		h.serveMeta(w, r, h.meta.imagesJSON, h.meta.bundleErr)
		return
	}
	prefix := ""
	if p == Prefix || strings.HasPrefix(p, Prefix+"/") {
		prefix, p = Prefix, strings.TrimPrefix(p, Prefix)
	}
	name, err := fsName(p)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	e := h.index[name]
	if e == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("%s: no such file in the release", cleanURLPath(name)))
		return
	}
	if e.dir {
		h.serveDir(w, r, prefix, e)
		return
	}
	h.serveFile(w, r, e)
}

// fsName turns a URL path into an fs.FS name inside the image. Dot-dot elements are resolved
// against the root (they can never leave it); NUL bytes and backslashes are refused.
func fsName(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 || strings.IndexByte(p, '\\') >= 0 {
		return "", fmt.Errorf("path %q holds a NUL byte or a backslash", p)
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	// path.Clean returns a clean path as it is, without a copy.
	name := strings.TrimPrefix(path.Clean(p), "/")
	if name == "" {
		name = "."
	}
	if !fs.ValidPath(name) {
		return "", fmt.Errorf("path %q is not valid", p)
	}
	return name, nil
}

func cleanURLPath(name string) string {
	if name == "." {
		return "/"
	}
	return "/" + name
}

func (h *Handler) setFileHeaders(w http.ResponseWriter, e *entry) {
	hd := w.Header()
	hd["Content-Type"] = []string{e.ctype}
	hd["Etag"] = []string{e.etag}
	hd["Accept-Ranges"] = acceptRanges
}

func (h *Handler) serveFile(w http.ResponseWriter, r *http.Request, e *entry) {
	r = boundRanges(r, e.size)
	if e.size <= h.cfg.smallLimit {
		sf, err := h.small(e)
		if err != nil {
			h.cfg.log.Error("read file", "path", e.name, "error", err)
			writeError(w, http.StatusInternalServerError, fmt.Sprintf("%s: cannot be read", cleanURLPath(e.name)))
			return
		}
		// The values setFileHeaders sets, without copies.
		hd := w.Header()
		hd["Content-Type"] = sf.ctype
		hd["Etag"] = sf.etag
		hd["Accept-Ranges"] = acceptRanges
		hd["Date"] = h.dateHeader()
		if unconditional(r) {
			// The common case, answered without http.ServeContent's parsing: the whole file.
			if sf.lastMod != nil {
				hd["Last-Modified"] = sf.lastMod
			}
			hd["Content-Length"] = sf.length
			w.WriteHeader(http.StatusOK)
			if r.Method != http.MethodHead {
				w.Write(sf.data)
				h.cfg.metrics.file(modeMemory, int64(len(sf.data)))
			}
			return
		}
		cw := countingSeeker{ReadSeeker: bytes.NewReader(sf.data)}
		http.ServeContent(w, r, "", e.modTime, &cw)
		if cw.n > 0 {
			h.cfg.metrics.file(modeMemory, cw.n)
		}
		return
	}
	if e.hasSpan && h.cfg.backing != "" {
		f, err := os.Open(h.cfg.backing)
		if err != nil {
			h.cfg.log.Error("open backing file", "path", h.cfg.backing, "error", err)
			writeError(w, http.StatusInternalServerError, fmt.Sprintf("%s: the image cannot be opened", cleanURLPath(e.name)))
			return
		}
		defer f.Close()
		h.serveExtent(w, r, e, &extentReader{f: f, base: e.spanOff, size: e.size})
		return
	}
	f, err := h.fsys.Open(e.name)
	if err != nil {
		h.cfg.log.Error("open file", "path", e.name, "error", err)
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("%s: cannot be opened", cleanURLPath(e.name)))
		return
	}
	defer f.Close()
	if osf, ok := f.(*os.File); ok {
		// A file system of real files (os.DirFS): each file is its own extent.
		h.serveExtent(w, r, e, &extentReader{f: osf, size: e.size})
		return
	}
	rs, ok := f.(io.ReadSeeker)
	if !ok {
		ra, ok := f.(io.ReaderAt)
		if !ok {
			writeError(w, http.StatusInternalServerError, fmt.Sprintf("%s: the file system cannot seek in it", cleanURLPath(e.name)))
			return
		}
		rs = io.NewSectionReader(ra, 0, e.size)
	}
	h.setFileHeaders(w, e)
	cw := countingSeeker{ReadSeeker: rs}
	http.ServeContent(w, r, "", e.modTime, &cw)
	if cw.n > 0 {
		h.cfg.metrics.file(modeCopied, cw.n)
	}
}

func (h *Handler) serveExtent(w http.ResponseWriter, r *http.Request, e *entry, x *extentReader) {
	h.setFileHeaders(w, e)
	if h.cfg.check != nil {
		x.check = h.cfg.check
		w = &checkedWriter{ResponseWriter: w, x: x, r: r, h: h, e: e}
	}
	http.ServeContent(w, r, "", e.modTime, x)
	direct := x.sentDirect()
	switch {
	case direct > 0:
		h.cfg.metrics.file(modeZeroCopy, direct)
		if x.copied > 0 && h.cfg.metrics != nil {
			h.cfg.metrics.fileBytesBy[modeCopied].Add(float64(x.copied))
		}
	case x.copied > 0:
		h.cfg.metrics.file(modeCopied, x.copied)
	}
}

// unconditional reports whether a request asks for a whole file with no condition or range.
func unconditional(r *http.Request) bool {
	hd := r.Header
	return len(hd["Range"]) == 0 && len(hd["If-None-Match"]) == 0 && len(hd["If-Modified-Since"]) == 0 &&
		len(hd["If-Match"]) == 0 && len(hd["If-Unmodified-Since"]) == 0 && len(hd["If-Range"]) == 0
}

// small returns a small file: from memory once it was read, or read now (and kept in memory while
// the budget has room). What is kept was read through the file system, so it passed the checks
// the file system makes (the chunk verifier's, for an image): a copy made from damaged bytes
// cannot exist, and bytes damaged on disk afterwards are not the bytes served.
func (h *Handler) small(e *entry) (*smallFile, error) {
	if sf := e.small.Load(); sf != nil {
		return sf, nil
	}
	data, err := fs.ReadFile(h.fsys, e.name)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != e.size {
		return nil, fmt.Errorf("read %d bytes of %d", len(data), e.size)
	}
	sf := &smallFile{data: data, ctype: []string{e.ctype}, etag: []string{e.etag}, length: []string{strconv.Itoa(len(data))}}
	if !e.modTime.IsZero() && !e.modTime.Equal(time.Unix(0, 0)) {
		// As http.ServeContent writes it.
		sf.lastMod = []string{e.modTime.UTC().Format(http.TimeFormat)}
	}
	h.mu.Lock()
	if e.small.Load() == nil && h.cached+e.size <= h.cfg.memoryLimit {
		e.small.Store(sf)
		h.cached += e.size
	}
	h.mu.Unlock()
	return sf, nil
}

// countingSeeker counts the bytes read from a ReadSeeker.
type countingSeeker struct {
	io.ReadSeeker
	n int64
}

func (c *countingSeeker) Read(p []byte) (int, error) {
	n, err := c.ReadSeeker.Read(p)
	c.n += int64(n)
	return n, err
}

// writeError answers with a JSON error body.
func writeError(w http.ResponseWriter, code int, msg string) {
	hd := w.Header()
	hd.Del("Etag")
	hd.Del("Last-Modified")
	hd.Set("Content-Type", "application/json")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintf(w, "{\"error\":%s,\"status\":%d}\n", jsonString(msg), code)
}

// errNotReady is what a Server answers before its Handler is set.
var errNotReady = errors.New("the release is not ready yet")
