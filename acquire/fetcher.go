package acquire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/upgrade-repo/upgrade-repo/redact"
)

// Fetcher fills a cache's partial file with the content's bytes.
//
// Fetch writes the bytes of the content from offset from to its end into dst, with WriteAt at
// their offsets in the content, and returns the content's total size. It may write in any order
// and from several goroutines at once (dst is safe for that); bytes before from are already
// present. It returns when the bytes are written, when it fails, or soon after ctx is done.
// An error wrapping ErrPermanent is not retried (the content does not exist at the source); any
// other error is retried with backoff, resuming from the bytes written so far.
type Fetcher interface {
	Fetch(ctx context.Context, dst io.WriterAt, from int64) (size int64, err error)
}

// Sizer is implemented by the dst a Cache gives to Fetch: a Fetcher that learns the content's
// total size before the end (from response headers, from a peer's inventory) reports it with
// SetSize, for progress in logs and metrics. SetSize is safe for concurrent use.
type Sizer interface {
	SetSize(size int64)
}

// ErrPermanent marks a fetch failure that retrying cannot fix.
var ErrPermanent = errors.New("permanent failure")

// HTTPFetcher fetches content from an HTTP(S) URL, resuming with Range requests.
type HTTPFetcher struct {
	// URL is the content's address.
	URL string
	// Client is the HTTP client (default http.DefaultClient).
	Client *http.Client
	// IdleTimeout is how long a request may go without receiving a byte (headers or body)
	// before it is abandoned, to be resumed by the next attempt: a connection that stalls
	// without being closed is otherwise never noticed. Zero means DefaultIdleTimeout, a
	// negative value no limit.
	IdleTimeout time.Duration
}

// DefaultIdleTimeout is the HTTPFetcher's IdleTimeout when none is set.
const DefaultIdleTimeout = time.Minute

var _ Fetcher = (*HTTPFetcher)(nil)

// errIdle is the cause of a request abandoned for want of bytes.
var errIdle = errors.New("no byte received")

// Fetch implements Fetcher.
func (h *HTTPFetcher) Fetch(ctx context.Context, dst io.WriterAt, from int64) (n int64, err error) {
	ctx, body, stop := h.watch(ctx)
	defer func() { err = stop(err) }()
	resp, err := h.get(ctx, from, -1)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	resp.Body = body(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		// The origin ignored the range: the content starts over from its first byte.
		if sz, ok := dst.(Sizer); ok && resp.ContentLength >= 0 {
			sz.SetSize(resp.ContentLength)
		}
		n, err := copyAt(dst, 0, resp.Body)
		if err != nil {
			return 0, fmt.Errorf("fetch %s: %w", redact.URL(h.URL), err)
		}
		if resp.ContentLength >= 0 && n != resp.ContentLength {
			return 0, fmt.Errorf("fetch %s: got %d of %d bytes: %w", redact.URL(h.URL), n, resp.ContentLength, io.ErrUnexpectedEOF)
		}
		return n, nil
	case http.StatusPartialContent:
		start, end, size, err := parseContentRange(resp.Header.Get("Content-Range"))
		if err != nil || start != from || end < start {
			return 0, fmt.Errorf("fetch %s: unexpected Content-Range %q for a request from %d", redact.URL(h.URL), resp.Header.Get("Content-Range"), from)
		}
		if sz, ok := dst.(Sizer); ok && size >= 0 {
			sz.SetSize(size)
		}
		n, err := copyAt(dst, from, resp.Body)
		if err != nil {
			return 0, fmt.Errorf("fetch %s: %w", redact.URL(h.URL), err)
		}
		if n != end-start+1 {
			return 0, fmt.Errorf("fetch %s: got %d of %d bytes: %w", redact.URL(h.URL), n, end-start+1, io.ErrUnexpectedEOF)
		}
		if size < 0 {
			size = end + 1
		}
		return size, nil
	case http.StatusRequestedRangeNotSatisfiable:
		// Asking for the bytes after the last one: the partial file is complete.
		if _, _, size, err := parseContentRange(resp.Header.Get("Content-Range")); err == nil && size == from {
			return size, nil
		}
		return 0, fmt.Errorf("fetch %s: range from %d not satisfiable (%s): %w", redact.URL(h.URL), from, resp.Header.Get("Content-Range"), ErrPermanent)
	}
	err = fmt.Errorf("fetch %s: %s", redact.URL(h.URL), resp.Status)
	if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests {
		err = fmt.Errorf("%w: %w", err, ErrPermanent)
	}
	return 0, err
}

// FetchRange writes the n bytes of the content at offset off into dst at the same offset, for
// fetchers that split the content between several sources.
func (h *HTTPFetcher) FetchRange(ctx context.Context, dst io.WriterAt, off, n int64) (err error) {
	if n <= 0 {
		return nil
	}
	ctx, body, stop := h.watch(ctx)
	defer func() { err = stop(err) }()
	resp, err := h.get(ctx, off, off+n-1)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	resp.Body = body(resp.Body)
	if resp.StatusCode != http.StatusPartialContent {
		return fmt.Errorf("fetch %s: range %d-%d: %s", redact.URL(h.URL), off, off+n-1, resp.Status)
	}
	start, _, _, err := parseContentRange(resp.Header.Get("Content-Range"))
	if err != nil || start != off {
		return fmt.Errorf("fetch %s: unexpected Content-Range %q for range %d-%d", redact.URL(h.URL), resp.Header.Get("Content-Range"), off, off+n-1)
	}
	got, err := copyAt(dst, off, io.LimitReader(resp.Body, n))
	if err != nil {
		return fmt.Errorf("fetch %s: %w", redact.URL(h.URL), err)
	}
	if got != n {
		return fmt.Errorf("fetch %s: range %d-%d: got %d bytes: %w", redact.URL(h.URL), off, off+n-1, got, io.ErrUnexpectedEOF)
	}
	return nil
}

func (h *HTTPFetcher) get(ctx context.Context, from, to int64) (*http.Response, error) {
	if err := CheckURL(h.URL); err != nil {
		return nil, fmt.Errorf("fetch: %w: %w", err, ErrPermanent)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w: %w", redact.URL(h.URL), redact.Error(err), ErrPermanent)
	}
	switch {
	case to >= 0:
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", from, to))
	case from > 0:
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", from))
	}
	c := h.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", redact.URL(h.URL), redact.Error(err))
	}
	return resp, nil
}

// watch returns a context that is cancelled once IdleTimeout passes without a byte (the timer
// runs from now, through the response headers, and restarts at each read of a body wrapped by
// body), and stop, which ends the watch and names the stall in err when it was the cause.
func (h *HTTPFetcher) watch(ctx context.Context) (context.Context, func(io.ReadCloser) io.ReadCloser, func(error) error) {
	d := h.IdleTimeout
	if d == 0 {
		d = DefaultIdleTimeout
	}
	if d < 0 {
		return ctx, func(rc io.ReadCloser) io.ReadCloser { return rc }, func(err error) error { return err }
	}
	ctx, cancel := context.WithCancelCause(ctx)
	t := time.AfterFunc(d, func() { cancel(errIdle) })
	body := func(rc io.ReadCloser) io.ReadCloser { return &idleBody{ReadCloser: rc, t: t, d: d} }
	stop := func(err error) error {
		t.Stop()
		cancel(nil)
		if err != nil && errors.Is(context.Cause(ctx), errIdle) {
			return fmt.Errorf("fetch %s: %w for %s", redact.URL(h.URL), errIdle, d)
		}
		return err
	}
	return ctx, body, stop
}

// idleBody restarts the idle timer at every read that brings bytes.
type idleBody struct {
	io.ReadCloser
	t *time.Timer
	d time.Duration
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.t.Reset(b.d)
	}
	return n, err
}

// parseContentRange parses "bytes START-END/SIZE" or "bytes */SIZE"; unknown parts are -1.
func parseContentRange(s string) (start, end, size int64, err error) {
	rest, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return 0, 0, 0, fmt.Errorf("invalid Content-Range %q", s)
	}
	rng, total, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, 0, fmt.Errorf("invalid Content-Range %q", s)
	}
	size = -1
	if total != "*" {
		if size, err = strconv.ParseInt(total, 10, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("invalid Content-Range %q", s)
		}
	}
	start, end = -1, -1
	if rng != "*" {
		a, b, ok := strings.Cut(rng, "-")
		if !ok {
			return 0, 0, 0, fmt.Errorf("invalid Content-Range %q", s)
		}
		if start, err = strconv.ParseInt(a, 10, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("invalid Content-Range %q", s)
		}
		if end, err = strconv.ParseInt(b, 10, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("invalid Content-Range %q", s)
		}
	}
	return start, end, size, nil
}

// copyAt copies r into dst from offset off.
func copyAt(dst io.WriterAt, off int64, r io.Reader) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		m, err := r.Read(buf)
		if m > 0 {
			if _, werr := dst.WriteAt(buf[:m], off+n); werr != nil {
				return n, werr
			}
			n += int64(m)
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
