package idle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// ErrIdle is the cause of an exchange abandoned for want of bytes.
var ErrIdle = errors.New("no byte received")

// Watchdog watches one exchange. It is armed from Watch until the body is handed to Body, then
// during each read of the body.
type Watchdog struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	d      time.Duration
	t      *time.Timer // nil when d <= 0
}

// Watch returns a context for the request, derived from ctx, and the watchdog that cancels it
// with ErrIdle once d passes without an answer. d <= 0 watches nothing.
func Watch(ctx context.Context, d time.Duration) (context.Context, *Watchdog) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &Watchdog{ctx: ctx, cancel: cancel, d: d}
	if d > 0 {
		w.t = time.AfterFunc(d, func() { cancel(ErrIdle) })
	}
	return ctx, w
}

// Timeout returns the watchdog's timeout.
func (w *Watchdog) Timeout() time.Duration { return w.d }

// Fired reports whether the watchdog abandoned the exchange.
func (w *Watchdog) Fired() bool { return errors.Is(context.Cause(w.ctx), ErrIdle) }

// Cause returns err, or an error wrapping ErrIdle that says how long was waited when the
// watchdog is what ended the exchange (err is then the context's cancellation, which says
// nothing).
func (w *Watchdog) Cause(err error) error {
	if err != nil && w.Fired() {
		return fmt.Errorf("%w for %s", ErrIdle, w.d)
	}
	return err
}

// Body returns body watched read by read: each read that waits longer than the timeout ends
// with an error wrapping ErrIdle. Closing it closes body and releases the watchdog.
func (w *Watchdog) Body(body io.ReadCloser) io.ReadCloser {
	w.disarm()
	return &watchedBody{body: body, w: w}
}

// Stop releases the watchdog and cancels its context, ending the exchange if it is still going.
func (w *Watchdog) Stop() {
	w.disarm()
	w.cancel(context.Canceled)
}

func (w *Watchdog) arm() {
	if w.t != nil {
		w.t.Reset(w.d)
	}
}

func (w *Watchdog) disarm() {
	if w.t != nil {
		w.t.Stop()
	}
}

type watchedBody struct {
	body io.ReadCloser
	w    *Watchdog
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.w.arm()
	n, err := b.body.Read(p)
	b.w.disarm()
	if err != nil && !errors.Is(err, io.EOF) {
		err = b.w.Cause(err)
	}
	return n, err
}

func (b *watchedBody) Close() error {
	err := b.body.Close()
	b.w.Stop()
	return err
}
