package fetch

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
	"github.com/upgrade-repo/upgrade-repo/internal/idle"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
)

// watched is a response whose body is abandoned once a read of it, or the wait for its headers,
// goes the idle timeout without a byte (package idle).
type watched struct {
	resp *http.Response
	body io.ReadCloser // resp.Body, watched read by read
	wd   *idle.Watchdog
}

// watchedGet sends a GET of url: of the n bytes at off (all from off when n is negative, the
// whole content when both are zero), with the ring's token when toPeer. An error wraps
// ErrOriginRefused when the request cannot even be made.
func (r *run) watchedGet(ctx context.Context, url string, off, n int64, toPeer bool) (*watched, error) {
	hctx, wd := idle.Watch(ctx, r.f.o.idle)
	w := &watched{wd: wd}
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
	w.resp, w.body = resp, wd.Body(resp.Body)
	return w, nil
}

// cause names the idle timeout as the cause of err when it abandoned the response.
func (w *watched) cause(err error) error { return w.wd.Cause(err) }

// close releases the response and its watchdog.
func (w *watched) close() {
	if w.body != nil {
		_ = w.body.Close()
		return
	}
	w.wd.Stop()
}
