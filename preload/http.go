package preload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
	"github.com/upgrade-repo/upgrade-repo/internal/idle"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
)

// maxMetadataBytes bounds the metadata files HTTPSource reads into memory as an fs.FS.
const maxMetadataBytes = 8 << 20

// HTTPSource reads archives and metadata from the repo Service over HTTP: a file at path in the
// release is GET base/path. Reopening at an offset uses a Range request guarded by If-Range with
// the ETag first seen, so a resumed stream never mixes two versions of a file.
type HTTPSource struct {
	base   *url.URL
	client *http.Client
	// metaTimeout bounds each metadata request, since fs.FS.Open takes no context.
	metaTimeout time.Duration
	// idle is how long the answer, or a read of its body, may wait for a byte before the stream
	// counts as broken (package idle).
	idle time.Duration

	mu    sync.Mutex
	etags map[string]string
}

var _ Source = (*HTTPSource)(nil)

// HTTPOption configures an HTTPSource.
type HTTPOption func(*HTTPSource)

// WithIdleTimeout sets how long a read of an archive may go without a byte before the stream is
// dropped (and then resumed by preload); the default is 30s, zero waits forever. A connection that
// stalls without being closed, as across a network partition, is thus detected.
func WithIdleTimeout(d time.Duration) HTTPOption { return func(s *HTTPSource) { s.idle = d } }

// NewHTTPSource returns a source for the release served at base (such as http://repo:8080 or
// http://repo/harvester-iso). client may be nil for http.DefaultClient.
func NewHTTPSource(base string, client *http.Client, opts ...HTTPOption) (*HTTPSource, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("repo url %s: %w", redact.URL(base), redact.Error(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("repo url %s: scheme must be http or https", redact.URL(base))
	}
	if client == nil {
		client = http.DefaultClient
	}
	s := &HTTPSource{base: u, client: client, metaTimeout: time.Minute, idle: 30 * time.Second, etags: map[string]string{}}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Name implements Source.
func (s *HTTPSource) Name() string { return "repo" }

func (s *HTTPSource) url(p string) string {
	u := *s.base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + strings.TrimPrefix(path.Clean("/"+p), "/")
	u.RawPath = ""
	return u.String()
}

// Open implements Source. Connection failures and 5xx answers match ErrTransient; 404 matches
// ErrNotFound.
func (s *HTTPSource) Open(ctx context.Context, p string, offset int64) (rc io.ReadCloser, size int64, err error) {
	parent := ctx
	ctx, wd := idle.Watch(ctx, s.idle)
	defer func() {
		if err != nil {
			wd.Stop()
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url(p), nil)
	if err != nil {
		return nil, 0, redact.Error(err)
	}
	where := redact.URL(req.URL.String())
	s.mu.Lock()
	etag := s.etags[p]
	s.mu.Unlock()
	if offset > 0 {
		req.Header.Set("Range", httprange.Request(offset, -1))
		if etag != "" {
			req.Header.Set("If-Range", etag)
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		err = wd.Cause(redact.Error(err))
		if parent.Err() != nil {
			return nil, 0, err
		}
		return nil, 0, fmt.Errorf("get %s: %w: %w", where, ErrTransient, err)
	}
	fail := func(err error) (io.ReadCloser, int64, error) {
		_ = resp.Body.Close()
		return nil, 0, fmt.Errorf("get %s: %w", where, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fail(ErrNotFound)
	case backoff.RetryableStatus(resp.StatusCode):
		return fail(fmt.Errorf("%w: %s", ErrTransient, resp.Status))
	case offset > 0 && resp.StatusCode == http.StatusOK:
		return fail(fmt.Errorf("asked for bytes from %d, got the whole file (changed on the server, or no range support)", offset))
	case offset > 0 && resp.StatusCode != http.StatusPartialContent:
		return fail(errors.New(resp.Status))
	case offset == 0 && resp.StatusCode != http.StatusOK:
		return fail(errors.New(resp.Status))
	}
	size = resp.ContentLength
	if offset > 0 {
		cr, err := httprange.ParseContentRange(resp.Header.Get("Content-Range"))
		if err != nil || cr.Start != offset {
			return fail(fmt.Errorf("asked for bytes from %d, got Content-Range %q", offset, resp.Header.Get("Content-Range")))
		}
		size = cr.Size
	}
	if offset == 0 {
		if e := resp.Header.Get("ETag"); e != "" && !strings.HasPrefix(e, "W/") {
			s.mu.Lock()
			s.etags[p] = e
			s.mu.Unlock()
		}
	}
	return wd.Body(resp.Body), size, nil
}

// FS returns the release's small metadata files (the bundle index and the image lists) as an
// fs.FS, each read whole into memory, at most 8 MiB. Each request is bounded by a minute, since
// fs.FS.Open takes no context.
func (s *HTTPSource) FS() fs.FS { return httpFS{s} }

type httpFS struct{ s *HTTPSource }

func (h httpFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.s.metaTimeout)
	defer cancel()
	rc, _, err := h.s.Open(ctx, name, 0)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			err = fmt.Errorf("%w: %w", fs.ErrNotExist, err)
		}
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxMetadataBytes+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	if len(data) > maxMetadataBytes {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("larger than %d bytes", maxMetadataBytes)}
	}
	return &memFile{name: path.Base(name), Reader: bytes.NewReader(data), size: int64(len(data))}, nil
}

// memFile is a metadata file read whole.
type memFile struct {
	*bytes.Reader
	name string
	size int64
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f, nil }
func (f *memFile) Close() error               { return nil }
func (f *memFile) Name() string               { return f.name }
func (f *memFile) Size() int64                { return f.size }
func (f *memFile) Mode() fs.FileMode          { return 0o444 }
func (f *memFile) ModTime() time.Time         { return time.Time{} }
func (f *memFile) IsDir() bool                { return false }
func (f *memFile) Sys() any                   { return nil }
