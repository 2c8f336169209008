package httprange

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/upgrade-repo/upgrade-repo/backoff"
	"github.com/upgrade-repo/upgrade-repo/idle"
	"github.com/upgrade-repo/upgrade-repo/redact"
)

// ErrNoRanges is wrapped by Open's error when the origin answers a Range request with the whole
// file (200): a remote file cannot be read in parts from it.
var ErrNoRanges = errors.New("the origin does not serve ranges")

// ErrChanged is wrapped by the error of a read whose answer names another size or validator than
// the first answer did: the file changed on the origin, and its bytes would be mixed.
var ErrChanged = errors.New("the remote file changed while it was read")

// Reader reads a remote file through HTTP Range requests, as an io.ReaderAt: in blocks, kept in a
// small cache, a miss fetching a window of the blocks that follow it (a directory of an ISO is
// read forward). Its size comes from the first answer's Content-Range, never from a HEAD.
//
// A Reader holds the context it was opened with, since io.ReaderAt takes none: it lives as long
// as the reads of one command or one check.
type Reader struct {
	ctx    context.Context
	client *http.Client
	url    string
	o      readerOptions
	info   Info

	mu     sync.Mutex
	blocks map[int64][]byte // block index → its bytes (the last one may be short)
	order  []int64          // blocks in the order they came, oldest first, for eviction

	requests atomic.Int64
	bytes    atomic.Int64
}

type readerOptions struct {
	block  int64
	window int
	keep   int
	idle   time.Duration
	retry  backoff.Policy
}

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

// Open reads the first window of the file at url, which tells its size and validator. An origin
// that answers with the whole file is given up at once (ErrNoRanges), its body unread. Errors
// name the URL redacted; a refusal is a *StatusError.
func Open(ctx context.Context, client *http.Client, url string, opts ...ReaderOption) (*Reader, error) {
	r := &Reader{ctx: ctx, client: client, url: url, blocks: map[int64][]byte{},
		o: readerOptions{block: 64 << 10, window: 4, keep: 256, idle: 30 * time.Second,
			retry: backoff.Policy{Initial: 250 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2, Attempts: 4}}}
	for _, o := range opts {
		o(&r.o)
	}
	if err := r.fetch(0, r.o.window); err != nil {
		return nil, err
	}
	return r, nil
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
		n += copy(p[n:], data[pos-b*r.o.block:])
	}
	return n, nil
}

// block returns block b, fetching it and the window after it on a miss.
func (r *Reader) block(b int64) ([]byte, error) {
	r.mu.Lock()
	data, ok := r.blocks[b]
	r.mu.Unlock()
	if ok {
		return data, nil
	}
	// The window: b and the blocks after it not held yet, up to the end of the file.
	last := (r.info.Size - 1) / r.o.block
	n := 1
	r.mu.Lock()
	for n < r.o.window && b+int64(n) <= last {
		if _, held := r.blocks[b+int64(n)]; held {
			break
		}
		n++
	}
	r.mu.Unlock()
	if err := r.fetch(b, n); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.blocks[b], nil
}

// fetch reads n blocks from block b, retried as the policy says, and keeps them.
func (r *Reader) fetch(b int64, n int) error {
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
		return fmt.Errorf("read %s at %d: %w", redact.URL(r.url), off, err)
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
	return nil
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
