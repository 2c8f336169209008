package httprange

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
	"github.com/upgrade-repo/upgrade-repo/internal/idle"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
)

// ErrNoRanges is wrapped by Open's error when the origin answers a Range request with the whole
// file (200): a remote file cannot be read in parts from it.
var ErrNoRanges = errors.New("the origin does not serve ranges")

// ErrChanged is wrapped by the error of a read whose answer names another size or validator than
// the first answer did, or that the origin refused because its validator no longer matches (412):
// the file changed on the origin, and its bytes would be mixed.
var ErrChanged = errors.New("the remote file changed while it was read")

// ErrNoValidator is wrapped by Open's error when the origin gives neither a strong ETag nor a
// Last-Modified date for a file it cannot send in one answer: nothing would tell the bytes of one
// version of the file from those of the next, so the file is not read in parts.
var ErrNoValidator = errors.New("the origin gives no strong ETag and no Last-Modified date")

// ErrDeadline is wrapped by the error of a read that the Reader's overall deadline (WithDeadline)
// ended.
var ErrDeadline = errors.New("the overall deadline of the remote read passed")

// Reader reads a remote file through HTTP Range requests, as an io.ReaderAt: in blocks, kept in a
// small cache, a miss fetching a window of the blocks that follow it (a directory of an ISO is
// read forward). Its size comes from the first answer's Content-Range, never from a HEAD.
//
// Every read after the first is made conditional on the first answer's validator (If-Match with
// a strong ETag, else If-Unmodified-Since with the Last-Modified date) and its answer checked
// against it, so that the bytes of two versions of the file are never mixed; an origin that gives
// no validator is refused (ErrNoValidator) unless the whole file came in the first answer.
//
// A Reader holds the context it was opened with, since io.ReaderAt takes none: it lives as long
// as the reads of one command or one check, within an overall deadline (WithDeadline), and Close
// releases it. ReadAt is safe for concurrent use.
type Reader struct {
	ctx    context.Context
	cancel context.CancelFunc
	client *http.Client
	url    string
	o      readerOptions
	// info is set by the first answer, in Open, and only read afterwards.
	info Info

	mu     sync.Mutex
	blocks map[int64][]byte // block index → its bytes (the last one may be short)
	order  []int64          // blocks in the order they came, oldest first, for eviction

	requests atomic.Int64
	bytes    atomic.Int64
}

type readerOptions struct {
	block    int64
	window   int
	keep     int
	idle     time.Duration
	retry    backoff.Policy
	deadline time.Duration
}

// DefaultDeadline is how long, by default, all the reads of a Reader may take together.
const DefaultDeadline = 10 * time.Minute

// ReaderOption configures a Reader.
type ReaderOption func(*readerOptions)

// WithBlocks sets the block size (default 64 KiB), the blocks a miss fetches at most (default 4)
// and the blocks kept (default 256, 16 MiB with the default size).
func WithBlocks(size int64, window, keep int) ReaderOption {
	return func(o *readerOptions) {
		o.block, o.window, o.keep = max(size, 512), max(window, 1), max(keep, window, 1)
	}
}

// WithReadTimeouts sets the idle timeout of one request (default 30s, package idle) and the
// retry policy of a failed one (default: 4 attempts, from 250ms).
func WithReadTimeouts(idleFor time.Duration, retry backoff.Policy) ReaderOption {
	return func(o *readerOptions) { o.idle, o.retry = idleFor, retry }
}

// WithDeadline sets how long all the reads of the Reader may take together, from Open on
// (default DefaultDeadline; zero or less: no deadline but the context's). An origin that sends a
// byte now and then defeats the idle timeout of each request, never this one.
func WithDeadline(d time.Duration) ReaderOption {
	return func(o *readerOptions) { o.deadline = d }
}

// Open reads the first window of the file at url, which tells its size and validator. An origin
// that answers with the whole file is given up at once (ErrNoRanges), its body unread; one that
// gives no validator for a file larger than that window is refused (ErrNoValidator). Errors name
// the URL redacted; a refusal is a *StatusError.
func Open(ctx context.Context, client *http.Client, url string, opts ...ReaderOption) (*Reader, error) {
	r := &Reader{client: client, url: url, blocks: map[int64][]byte{},
		o: readerOptions{block: 64 << 10, window: 4, keep: 256, idle: 30 * time.Second,
			retry:    backoff.Policy{Initial: 250 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2, Attempts: 4},
			deadline: DefaultDeadline}}
	for _, o := range opts {
		o(&r.o)
	}
	if r.o.deadline > 0 {
		r.ctx, r.cancel = context.WithTimeoutCause(ctx, r.o.deadline, fmt.Errorf("%w (%s)", ErrDeadline, r.o.deadline))
	} else {
		r.ctx, r.cancel = context.WithCancel(ctx)
	}
	first, err := r.fetch(0, r.o.window)
	if err != nil {
		r.cancel()
		return nil, err
	}
	if r.info.Validator == "" && int64(len(first)) < r.info.Size {
		r.cancel()
		return nil, fmt.Errorf("GET %s: %w: its %d bytes cannot be read in parts without mixing two versions of the file", redact.URL(url), ErrNoValidator, r.info.Size)
	}
	return r, nil
}

// Close ends the Reader's context: reads after it fail. It always returns nil.
func (r *Reader) Close() error {
	r.cancel()
	return nil
}

// Size returns the file's size.
func (r *Reader) Size() int64 { return r.info.Size }

// Validator returns the strong ETag or Last-Modified of the first answer ("" when none).
func (r *Reader) Validator() string { return r.info.Validator }

// Stats returns the requests sent and the body bytes received so far.
func (r *Reader) Stats() (requests, bytes int64) { return r.requests.Load(), r.bytes.Load() }

// ReadAt implements io.ReaderAt.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read at %d: negative offset", off)
	}
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		if pos >= r.info.Size {
			return n, io.EOF
		}
		b := pos / r.o.block
		data, err := r.block(b)
		if err != nil {
			return n, err
		}
		if pos-b*r.o.block >= int64(len(data)) {
			// Only the last block is short, and pos < Size lies inside it: an answer that
			// passed get's checks cannot get here.
			return n, fmt.Errorf("read %s at %d: block %d holds %d bytes: %w", redact.URL(r.url), pos, b, len(data), ErrMalformed)
		}
		n += copy(p[n:], data[pos-b*r.o.block:])
	}
	return n, nil
}

// block returns block b, fetching it and the window after it on a miss. The bytes it returns are
// those of the answer it read or found, never looked up again: another ReadAt may evict the block
// from the cache at any time.
func (r *Reader) block(b int64) ([]byte, error) {
	// The window: b and the blocks after it not held yet, up to the end of the file.
	last := (r.info.Size - 1) / r.o.block
	n := 1
	r.mu.Lock()
	if data, ok := r.blocks[b]; ok {
		r.mu.Unlock()
		return data, nil
	}
	for n < r.o.window && b+int64(n) <= last {
		if _, held := r.blocks[b+int64(n)]; held {
			break
		}
		n++
	}
	r.mu.Unlock()
	body, err := r.fetch(b, n)
	if err != nil {
		return nil, err
	}
	return body[:min(r.o.block, int64(len(body))):min(r.o.block, int64(len(body)))], nil
}

// fetch reads n blocks from block b, retried as the policy says, keeps them and returns their
// bytes.
func (r *Reader) fetch(b int64, n int) ([]byte, error) {
	off, length := b*r.o.block, int64(n)*r.o.block
	if r.info.Size > 0 {
		length = min(length, r.info.Size-off)
	}
	var body []byte
	err := backoff.Retry(r.ctx, r.o.retry, func(ctx context.Context) error {
		var err error
		body, err = r.get(ctx, off, length)
		return err
	})
	if err != nil {
		if cause := context.Cause(r.ctx); errors.Is(cause, ErrDeadline) && !errors.Is(err, ErrDeadline) {
			err = errors.Join(cause, err)
		}
		return nil, fmt.Errorf("read %s at %d: %w", redact.URL(r.url), off, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := int64(0); i*r.o.block < int64(len(body)); i++ {
		end := min((i+1)*r.o.block, int64(len(body)))
		if _, held := r.blocks[b+i]; !held {
			r.blocks[b+i] = body[i*r.o.block : end : end]
			r.order = append(r.order, b+i)
		}
	}
	for len(r.order) > r.o.keep {
		delete(r.blocks, r.order[0])
		r.order = r.order[1:]
	}
	return body, nil
}

// get sends one Range request and checks its answer against the first. Errors that asking again
// cannot change are wrapped by backoff.Permanent.
func (r *Reader) get(ctx context.Context, off, n int64) ([]byte, error) {
	ctx, wd := idle.Watch(ctx, r.o.idle)
	defer wd.Stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return nil, backoff.Permanent(redact.Error(err))
	}
	req.Header.Set("Range", Request(off, n))
	// Reads after the first are conditional on its validator: an origin that keeps to RFC 9110
	// answers 412 once the file changed, and get compares the answer's validator in any case.
	if etag, ok := strings.CutPrefix(r.info.Validator, "etag "); ok {
		req.Header.Set("If-Match", etag)
	} else if lm, ok := strings.CutPrefix(r.info.Validator, "last-modified "); ok {
		req.Header.Set("If-Unmodified-Since", lm)
	}
	r.requests.Add(1)
	resp, err := r.client.Do(req) //nolint:bodyclose // closed through wd.Body below
	if err != nil {
		return nil, wd.Cause(redact.Error(err))
	}
	body := wd.Body(resp.Body)
	defer body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
	case http.StatusOK:
		// The whole file is on its way: it is not read.
		return nil, backoff.Permanent(fmt.Errorf("GET %s with a Range: status 200 and the whole file: %w", redact.URL(r.url), ErrNoRanges))
	case http.StatusPreconditionFailed:
		return nil, backoff.Permanent(fmt.Errorf("GET %s: status %s, no longer %s: %w", redact.URL(r.url), resp.Status, r.info.Validator, ErrChanged))
	default:
		se := NewStatusError(resp)
		if se.Permanent() {
			return nil, backoff.Permanent(se)
		}
		return nil, se
	}
	cr, err := ParseContentRange(resp.Header.Get("Content-Range"))
	if err != nil || cr.Start != off || cr.Size <= 0 || cr.Len() > n {
		return nil, backoff.Permanent(fmt.Errorf("GET %s: Content-Range %q does not answer %s: %w", redact.URL(r.url), resp.Header.Get("Content-Range"), Request(off, n), ErrMalformed))
	}
	v := Validator(resp.Header)
	if r.info.Size == 0 {
		r.info = Info{Size: cr.Size, Ranges: true, Validator: v}
	} else if cr.Size != r.info.Size || v != r.info.Validator {
		return nil, backoff.Permanent(fmt.Errorf("GET %s: size %d (%s), first read %d (%s): %w", redact.URL(r.url), cr.Size, v, r.info.Size, r.info.Validator, ErrChanged))
	}
	want := cr.Len()
	if want < n && cr.End != cr.Size-1 {
		return nil, backoff.Permanent(fmt.Errorf("GET %s: %d bytes from %d where %d were asked for: %w", redact.URL(r.url), want, off, n, ErrMalformed))
	}
	buf := make([]byte, want)
	got, err := io.ReadFull(body, buf)
	r.bytes.Add(int64(got))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %d of %d bytes: %w", redact.URL(r.url), got, want, err)
	}
	return buf, nil
}
