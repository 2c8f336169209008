package preload

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
)

// resumer reads one archive from a source and, when a read fails with anything but io.EOF,
// reopens it at the offset it reached, with backoff. It lives for one import call, which is why it
// holds that call's context: io.Reader has no other way to receive it.
type resumer struct {
	ctx   context.Context
	src   Source
	path  string
	off   int64
	size  int64
	rc    io.ReadCloser
	retry *backoff.Backoff
	// onRead is told how many bytes each read returned; onRetry about every reopening.
	onRead  func(n int)
	onRetry func(err error)
}

// open opens the source at the current offset, retrying errors marked ErrTransient.
func (r *resumer) open() error {
	for {
		rc, size, err := r.src.Open(r.ctx, r.path, r.off)
		if err == nil {
			if r.size <= 0 {
				r.size = size
			}
			r.rc = rc
			return nil
		}
		if !errors.Is(err, ErrTransient) {
			return err
		}
		r.onRetry(err)
		if werr := r.retry.Wait(r.ctx); werr != nil {
			return fmt.Errorf("%w: %w", werr, err)
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
		if n > 0 {
			// Progress: a long stream over a flaky link may be cut any number of times, as
			// long as it moves on between the cuts.
			r.retry.Reset()
		}
		if err == nil || errors.Is(err, io.EOF) {
			return n, err
		}
		_ = r.rc.Close()
		r.rc = nil
		if r.ctx.Err() != nil {
			return n, fmt.Errorf("read at byte %d: %w", r.off, err)
		}
		r.onRetry(err)
		if n > 0 {
			return n, nil
		}
		if werr := r.retry.Wait(r.ctx); werr != nil {
			return 0, fmt.Errorf("read at byte %d: %w: %w", r.off, werr, err)
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
