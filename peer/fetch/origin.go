package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/upgrade-repo/upgrade-repo/chunks"
	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
)

// originSource names the origin URL among the sources of a chunk.
const originSource = ""

// originFailed records a failed request to the origin: it is not asked again before a wait that
// doubles with each failure in a row, and not at all once it refused for good. Requests that
// started before the last failure fail for the same reason and do not count again.
func (r *run) originFailed(j *job, err error) {
	if errors.Is(err, errNoRanges) {
		if !r.noRanges {
			r.noRanges = true
			r.f.log.Info("the origin does not serve ranges: reading the ISO from it whole, in order", "url", redact.URL(r.req.OriginURL))
		}
		return
	}
	now := time.Now()
	if j.started.Before(r.originFailedAt) {
		return
	}
	r.originFailedAt, r.originErr = now, err
	r.originFails++
	if errors.Is(err, ErrOriginRefused) {
		r.originRefused = true
		r.f.log.Error("the origin refused the download", "err", err)
		return
	}
	r.f.o.metrics.Retried()
	wait, _ := r.originRetry.Fail() // the count of attempts is kept in originFails
	r.f.log.Warn("fetch from the origin failed, retrying", "attempt", r.originFails, "of", r.f.o.attempts, "in", wait, "err", err)
	r.originAt = now.Add(wait)
}

// originAnswered starts the count of failures and the wait over.
func (r *run) originAnswered() {
	r.originFails, r.originErr = 0, nil
	r.originRetry.Reset()
}

// ErrOriginRefused marks an answer of the origin that asking again cannot change: the URL is not
// http(s), the ISO is not there (404), access is denied (401, 403), or its size is not the one
// the download started with (416).
var ErrOriginRefused = errors.New("the origin refused")

// CheckURL reports whether raw can be an ISO's origin: an absolute http or https URL with a host
// (httprange.CheckURL, whose words the error carries: a file path, another scheme, no host).
// Any other scheme (ftp, file) would only fail again and again; it is refused at once. The error
// quotes the URL redacted and matches ErrOriginRefused, without saying so in its text: it is
// shown to whoever typed the URL, whom "the origin refused" would mislead.
func CheckURL(raw string) error {
	if err := httprange.CheckURL(raw); err != nil {
		return badURLError{fmt.Errorf("ISO URL %s: %w", redact.URL(raw), err)}
	}
	return nil
}

// badURLError is CheckURL's error: it matches ErrOriginRefused, as every answer that asking again
// cannot change does.
type badURLError struct{ err error }

func (e badURLError) Error() string        { return e.err.Error() }
func (e badURLError) Unwrap() error        { return e.err }
func (e badURLError) Is(target error) bool { return target == ErrOriginRefused }

// statusError is the error of an origin's answer with an unexpected status; 4xx answers other
// than 408 (timeout) and 429 (too many requests) wrap ErrOriginRefused.
func statusError(what string, resp *http.Response) error {
	err := fmt.Errorf("%s: status %s", what, resp.Status)
	if httprange.NewStatusError(resp).Permanent() {
		err = fmt.Errorf("%w: %w", err, ErrOriginRefused)
	}
	return err
}

// probeOrigin asks the origin for the ISO's first byte (httprange.Probe), which tells its size
// and whether it serves ranges.
func (f *Fetcher) probeOrigin(ctx context.Context, origin string) (httprange.Info, error) {
	if err := CheckURL(origin); err != nil {
		return httprange.Info{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, max(f.o.idle, 0))
	defer cancel()
	info, err := httprange.Probe(ctx, f.o.client, origin)
	var se *httprange.StatusError
	if errors.As(err, &se) && se.Permanent() {
		return info, fmt.Errorf("origin: %w: %w", err, ErrOriginRefused)
	}
	if err != nil {
		return info, fmt.Errorf("origin %s: %w", redact.URL(origin), err)
	}
	return info, nil
}

// errNoRanges is the cause of a chunk request that the origin answered with the whole ISO.
var errNoRanges = errors.New("the origin does not serve ranges")

// fetchOriginChunk reads the n bytes at off from the origin into data. A response cut short is
// resumed where it stopped, as long as each request brings bytes: an origin that cuts every
// connection is followed to the end of the chunk. It returns errNoRanges (wrapped) when the origin
// answers with the whole ISO.
func (r *run) fetchOriginChunk(ctx context.Context, c int, off int64, data []byte) error {
	url := r.req.OriginURL
	got := 0
	for {
		err := r.originRange(ctx, url, off+int64(got), data[got:], &got)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || errors.Is(err, errNoRanges) || errors.Is(err, ErrOriginRefused) || !errors.Is(err, errCut) {
			return fmt.Errorf("GET %s chunk %d: %w", redact.URL(url), c, err)
		}
		// Cut after bytes came: ask for the rest.
	}
}

// errCut is the cause of a response that ended, or stalled, after it brought bytes.
var errCut = errors.New("response cut short")

// originRange reads len(dst) bytes at off from url into dst, adding to *got what it read. An error
// after bytes were read wraps errCut.
func (r *run) originRange(ctx context.Context, url string, off int64, dst []byte, got *int) error {
	w, err := r.watchedGet(ctx, url, off, int64(len(dst)), false)
	if err != nil {
		return err
	}
	defer w.close()
	resp := w.resp
	switch resp.StatusCode {
	case http.StatusPartialContent:
	case http.StatusOK:
		return errNoRanges
	default:
		return statusError("status", resp)
	}
	if cr, err := httprange.ParseContentRange(resp.Header.Get("Content-Range")); err != nil || cr.Start != off || cr.Size >= 0 && cr.Size != r.iso.Size() {
		return fmt.Errorf("unexpected Content-Range %q for bytes from %d of %d: %w", resp.Header.Get("Content-Range"), off, r.iso.Size(), ErrOriginRefused)
	}
	n, err := io.ReadFull(w.body, dst)
	*got += n
	if err != nil {
		err = w.cause(err)
		if n > 0 {
			return fmt.Errorf("%w after %d bytes: %w", errCut, n, err)
		}
		return err
	}
	return nil
}

// stream reads the whole ISO from an origin that does not serve ranges, in order, and hands every
// chunk not held yet to the run as the result of a job of its own (part of the stream). It
// returns the stream's own result once the body ends, fails or ctx ends.
func (r *run) stream(ctx context.Context, j *job) result {
	url := r.req.OriginURL
	w, err := r.watchedGet(ctx, url, 0, -1, false)
	if err != nil {
		return result{err: fmt.Errorf("GET %s: %w", redact.URL(url), err)}
	}
	defer w.close()
	resp := w.resp
	if resp.StatusCode != http.StatusOK {
		return result{err: statusError("GET "+redact.URL(url), resp)}
	}
	if resp.ContentLength >= 0 && resp.ContentLength != r.iso.Size() {
		return result{err: fmt.Errorf("GET %s: %d bytes, the download started with %d: %w", redact.URL(url), resp.ContentLength, r.iso.Size(), ErrOriginRefused)}
	}
	body := w.body
	for c := range r.n {
		n := r.iso.ChunkLen(c)
		if r.iso.Has(c) {
			if _, err := io.CopyN(io.Discard, body, n); err != nil {
				return result{err: fmt.Errorf("GET %s at chunk %d: %w", redact.URL(url), c, w.cause(err))}
			}
			continue
		}
		data := r.getBuf(n)
		if _, err := io.ReadFull(body, data); err != nil {
			r.putBuf(data)
			return result{err: fmt.Errorf("GET %s at chunk %d: %w", redact.URL(url), c, w.cause(err))}
		}
		part := &job{chunk: c, source: originSource, started: j.started, cancel: func() {}, part: true}
		select {
		case r.results <- result{job: part, data: data, sum: chunks.Sum(data)}:
		case <-ctx.Done():
			r.putBuf(data)
			return result{err: ctx.Err()}
		}
	}
	return result{}
}
