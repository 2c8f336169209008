package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/upgrade-repo/upgrade-repo/httprange"
	"github.com/upgrade-repo/upgrade-repo/redact"
)

// errIdle is the cause of a chunk request abandoned for want of bytes.
var errIdle = errors.New("no byte received")

// idleTimer cancels a request once it has gone d without a byte; idleBody restarts it.
type idleTimer struct {
	t *time.Timer
	d time.Duration
}

func newIdleTimer(d time.Duration, cancel context.CancelCauseFunc) idleTimer {
	return idleTimer{t: time.AfterFunc(d, func() { cancel(errIdle) }), d: d}
}

// Stop stops the timer.
func (i idleTimer) Stop() { i.t.Stop() }

// idleCause names the idle timeout as the cause of err when it cancelled ctx.
func idleCause(ctx context.Context, d time.Duration, err error) error {
	if errors.Is(context.Cause(ctx), errIdle) {
		return fmt.Errorf("%w for %s", errIdle, d)
	}
	return err
}

// idleBody restarts its request's idle timer at every read that brings bytes.
type idleBody struct {
	io.Reader
	t *time.Timer
	d time.Duration
}

func (b idleBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if n > 0 {
		b.t.Reset(b.d)
	}
	return n, err
}

// watched is a response whose body is abandoned once it goes the idle timeout without a byte.
type watched struct {
	resp  *http.Response
	body  io.Reader // resp.Body, restarting the idle timer at each read that brings bytes
	ctx   context.Context
	idle  idleTimer
	d     time.Duration
	stopc context.CancelCauseFunc
}

// watchedGet sends a GET of url: of the n bytes at off (all from off when n is negative, the
// whole content when both are zero), with the ring's token when toPeer. An error wraps
// ErrOriginRefused when the request cannot even be made.
func (r *run) watchedGet(ctx context.Context, url string, off, n int64, toPeer bool) (*watched, error) {
	hctx, cancel := context.WithCancelCause(ctx)
	idle := newIdleTimer(r.f.o.idle, cancel)
	w := &watched{ctx: hctx, idle: idle, d: r.f.o.idle, stopc: cancel}
	req, err := http.NewRequestWithContext(hctx, http.MethodGet, url, nil)
	if err != nil {
		w.close()
		return nil, fmt.Errorf("%w: %w", redact.Error(err), ErrOriginRefused)
	}
	switch {
	case n > 0:
		req.Header.Set("Range", httprange.Request(off, n))
	case off > 0:
		req.Header.Set("Range", httprange.Request(off, -1))
	}
	if toPeer {
		r.f.authorize(req)
	}
	resp, err := r.f.o.client.Do(req) //nolint:bodyclose // the caller closes it with w.close
	if err != nil {
		err = w.cause(redact.Error(err))
		w.close()
		return nil, err
	}
	w.resp, w.body = resp, idleBody{resp.Body, idle.t, idle.d}
	return w, nil
}

// cause names the idle timeout as the cause of err when it abandoned the response.
func (w *watched) cause(err error) error { return idleCause(w.ctx, w.d, err) }

// close releases the response and its timer.
func (w *watched) close() {
	if w.resp != nil {
		w.resp.Body.Close()
	}
	w.idle.Stop()
	w.stopc(nil)
}
