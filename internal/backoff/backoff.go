package backoff

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Policy describes the waits between attempts and when to give up.
type Policy struct {
	// Initial is the first wait; it doubles after each failure, up to Max.
	Initial, Max time.Duration
	// Jitter is the part of each wait drawn at random, between 0 and 1: a wait d becomes a
	// duration between d*(1-Jitter) and d.
	Jitter float64
	// Attempts bounds the failures of a streak; 0 does not.
	Attempts int
	// Total bounds the time since the streak's first failure; 0 does not. The last wait is
	// shortened so that the last attempt comes when the time is up.
	Total time.Duration
}

// ErrGaveUp is wrapped by Wait's error when the policy's bound is reached.
var ErrGaveUp = errors.New("gave up retrying")

// Backoff is one operation's streak of failures under a Policy. Its Policy may be changed
// between waits (a caller that learns a failure needs the operator may lengthen Max).
type Backoff struct {
	Policy
	n     int
	first time.Time
	next  time.Duration
}

// Start begins a streak under p.
func (p Policy) Start() *Backoff { return &Backoff{Policy: p} }

// Failures returns the failures recorded since the start or the last Reset.
func (b *Backoff) Failures() int { return b.n }

// Reset records progress: the waits and the bounds start over.
func (b *Backoff) Reset() { b.n, b.first, b.next = 0, time.Time{}, 0 }

// Next returns the wait the next Wait sleeps, jitter included, so that it can be logged first.
func (b *Backoff) Next() time.Duration {
	if b.next == 0 {
		d := b.Initial
		for i := 0; i < b.n && d > 0 && (b.Max <= 0 || d < b.Max); i++ {
			d *= 2
		}
		if b.Max > 0 && (d > b.Max || d <= 0) {
			d = b.Max
		}
		if d <= 0 { // doubled past what a Duration holds, with no Max
			d = time.Duration(1<<63 - 1)
		}
		if j := min(max(b.Jitter, 0), 1); j > 0 && d > 0 {
			d -= time.Duration(rand.Float64() * j * float64(d)) //nolint:gosec // spreading retries needs no secure randomness
		}
		b.next = max(d, time.Millisecond)
	}
	return b.next
}

// Fail records a failure and returns the wait before the next attempt, for a caller that
// schedules the attempt itself instead of sleeping; ok is false, with the wait 0, when the
// policy's bound is reached.
func (b *Backoff) Fail() (wait time.Duration, ok bool) {
	now := time.Now()
	if b.first.IsZero() {
		b.first = now
	}
	d := b.Next()
	b.next = 0
	b.n++
	if b.Attempts > 0 && b.n >= b.Attempts {
		return 0, false
	}
	if b.Total > 0 {
		left := b.Total - now.Sub(b.first)
		if left <= 0 {
			return 0, false
		}
		d = min(d, left)
	}
	return d, true
}

// Wait records a failure and sleeps before the next attempt. It returns an error wrapping
// ErrGaveUp when the policy's bound is reached, or ctx's cause when ctx ends first.
func (b *Backoff) Wait(ctx context.Context) error {
	d, ok := b.Fail()
	if !ok {
		if b.Attempts > 0 && b.n >= b.Attempts {
			return fmt.Errorf("%w after %d attempts", ErrGaveUp, b.n)
		}
		return fmt.Errorf("%w: failing for %s", ErrGaveUp, time.Since(b.first).Round(time.Millisecond))
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

// permanent marks an error that retrying cannot help.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent wraps err so that Retry returns it at once instead of trying again.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// Retry calls fn until it returns nil, an error wrapped by Permanent (returned as fn gave it,
// unwrapped), or the policy gives up (the last error of fn is returned, joined with ErrGaveUp),
// or ctx ends (the last error joined with ctx's cause).
func Retry(ctx context.Context, p Policy, fn func(context.Context) error) error {
	b := p.Start()
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		var perm permanent
		if errors.As(err, &perm) {
			return perm.err
		}
		if werr := b.Wait(ctx); werr != nil {
			return errors.Join(err, werr)
		}
	}
}
