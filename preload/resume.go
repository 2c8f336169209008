package preload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// backoff is the retry policy for transient errors: they are retried for as long as total has
// not passed since the first failure after the last progress, waiting base at first, doubling up
// to max between attempts. A failure streak is bounded in time rather than in attempts, so that a
// daemon that takes a while to restart is waited for, and a long stream cut now and then (each
// cut after progress) is followed to its end.
type backoff struct {
	total time.Duration
	base  time.Duration
	max   time.Duration
}

// streak is one operation's run of failures under a backoff policy.
type streak struct {
	b     backoff
	first time.Time // the first failure since the last progress; zero when there is none
	n     int       // failures since the last progress
}

func (b backoff) begin() *streak { return &streak{b: b} }

// progress records that the operation moved on: the time bound and the waits start over.
func (s *streak) progress() { s.first, s.n = time.Time{}, 0 }

// wait records a failure and sleeps before the next attempt. It returns errGaveUp when total
// has passed since the first failure of the streak, or ctx's cause when ctx ends first.
func (s *streak) wait(ctx context.Context) error {
	now := time.Now()
	if s.first.IsZero() {
		s.first = now
	}
	s.n++
	left := s.b.total - now.Sub(s.first)
	if left <= 0 {
		return fmt.Errorf("%w: failing for %s", errGaveUp, now.Sub(s.first).Round(time.Millisecond))
	}
	d := s.b.base << min(s.n-1, 30)
	if d > s.b.max || d <= 0 {
		d = s.b.max
	}
	// The last attempt comes when the time is up, not a whole wait after it.
	d = min(d, left)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// errGaveUp ends a failure streak that lasted longer than the retry time.
var errGaveUp = errors.New("gave up retrying")

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
	retry *streak
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
		if werr := r.retry.wait(r.ctx); werr != nil {
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
			r.retry.progress()
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
		if werr := r.retry.wait(r.ctx); werr != nil {
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
