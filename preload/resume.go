package preload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// backoff is the retry policy for transient errors: attempts in all, waits doubling from base up
// to max.
type backoff struct {
	attempts int
	base     time.Duration
	max      time.Duration
}

// wait sleeps before retry number n (1-based), or returns ctx's error.
func (b backoff) wait(ctx context.Context, n int) error {
	d := b.base << (n - 1)
	if d > b.max || d <= 0 {
		d = b.max
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// resumer reads one archive from a source and, when a read fails with anything but io.EOF,
// reopens it at the offset it reached, with backoff. It lives for one import call, which is why it
// holds that call's context: io.Reader has no other way to receive it.
type resumer struct {
	ctx     context.Context
	src     Source
	path    string
	off     int64
	size    int64
	rc      io.ReadCloser
	retry   backoff
	retries int
	// onRead is told how many bytes each read returned; onRetry about every reopening.
	onRead  func(n int)
	onRetry func(err error)
}

// open opens the source at the current offset, retrying errors marked ErrTransient.
func (r *resumer) open() error {
	for n := 1; ; n++ {
		rc, size, err := r.src.Open(r.ctx, r.path, r.off)
		if err == nil {
			if r.size <= 0 {
				r.size = size
			}
			r.rc = rc
			return nil
		}
		if !errors.Is(err, ErrTransient) || n >= r.retry.attempts {
			return err
		}
		r.onRetry(err)
		if werr := r.retry.wait(r.ctx, n); werr != nil {
			return werr
		}
	}
}

func (r *resumer) Read(p []byte) (int, error) {
	for {
		if r.rc == nil {
			if err := r.open(); err != nil {
				return 0, fmt.Errorf("reopen at byte %d: %w", r.off, err)
			}
		}
		n, err := r.rc.Read(p)
		r.off += int64(n)
		if n > 0 {
			r.onRead(n)
		}
		if err == nil || errors.Is(err, io.EOF) {
			if n > 0 {
				// Progress since the last failure: a long stream over a flaky link may be
				// cut more often than attempts in all, but never attempts times in a row.
				r.retries = 0
			}
			return n, err
		}
		_ = r.rc.Close()
		r.rc = nil
		r.retries++
		if r.retries >= r.retry.attempts || r.ctx.Err() != nil {
			return n, fmt.Errorf("read at byte %d: %w", r.off, err)
		}
		r.onRetry(err)
		if n > 0 {
			return n, nil
		}
		if werr := r.retry.wait(r.ctx, r.retries); werr != nil {
			return 0, werr
		}
	}
}

// Close closes the current stream, if any.
func (r *resumer) Close() error {
	if r.rc == nil {
		return nil
	}
	err := r.rc.Close()
	r.rc = nil
	return err
}
