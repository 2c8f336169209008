package httprange

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
)

// Info is what the first answer of an origin tells of the file at a URL.
type Info struct {
	// Size is the file's length in bytes.
	Size int64
	// Ranges is true when the origin answered a Range request with 206 Partial Content.
	Ranges bool
	// Validator is the origin's strong ETag, or else its Last-Modified, or "": what tells one
	// version of the file from the next.
	Validator string
}

// StatusError is an origin's answer that is not the one asked for. Its URL is redacted.
type StatusError struct {
	Method, URL string
	Code        int
	Status      string
}

// Error implements error.
func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: status %s", e.Method, e.URL, e.Status)
}

// Permanent reports whether asking again cannot help: a 4xx that backoff.RetryableStatus does
// not retry.
func (e *StatusError) Permanent() bool {
	return e.Code >= 400 && e.Code < 500 && !backoff.RetryableStatus(e.Code)
}

// NewStatusError returns the StatusError of resp, its URL redacted.
func NewStatusError(resp *http.Response) *StatusError {
	e := &StatusError{Code: resp.StatusCode, Status: resp.Status}
	if r := resp.Request; r != nil {
		e.Method, e.URL = r.Method, redact.URL(r.URL.String())
	}
	return e
}

// ErrNoSize is wrapped by Probe's error when the origin's answer gives no size.
var ErrNoSize = errors.New("the origin does not give the file's size")

// Probe asks url for its first byte (GET with "Range: bytes=0-0") and returns what the answer
// tells: the size from Content-Range, or from Content-Length when the origin ignores ranges and
// answers 200 (its body is then not read). A GET, not a HEAD: an origin that signs its URLs for
// one method refuses a HEAD. Errors are redacted; a refusal is a *StatusError.
func Probe(ctx context.Context, c *http.Client, url string) (Info, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Info{}, redact.Error(err)
	}
	req.Header.Set("Range", Request(0, 1))
	resp, err := c.Do(req)
	if err != nil {
		return Info{}, redact.Error(err)
	}
	defer resp.Body.Close()
	what := "GET " + redact.URL(url)
	switch resp.StatusCode {
	case http.StatusPartialContent:
		cr, err := ParseContentRange(resp.Header.Get("Content-Range"))
		if err != nil || cr.Size <= 0 || cr.Start != 0 {
			return Info{}, fmt.Errorf("%s: Content-Range %q does not give the size: %w", what, resp.Header.Get("Content-Range"), ErrNoSize)
		}
		return Info{Size: cr.Size, Ranges: true, Validator: Validator(resp.Header)}, nil
	case http.StatusOK:
		if resp.ContentLength <= 0 {
			return Info{}, fmt.Errorf("%s: no Content-Length and no range support: %w", what, ErrNoSize)
		}
		return Info{Size: resp.ContentLength, Validator: Validator(resp.Header)}, nil
	}
	return Info{}, NewStatusError(resp)
}

// Validator returns what identifies the version of a file in h: its strong ETag, else its
// Last-Modified, else "". A weak ETag ("W/...") does not promise the same bytes and is skipped.
func Validator(h http.Header) string {
	if e := h.Get("ETag"); e != "" && len(e) > 2 && e[:2] != "W/" {
		return "etag " + e
	}
	if m := h.Get("Last-Modified"); m != "" {
		return "last-modified " + m
	}
	return ""
}
