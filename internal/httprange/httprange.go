package httprange

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrMalformed is wrapped by the errors of a header that cannot be read.
var ErrMalformed = errors.New("malformed range")

// ErrUnsatisfiable is wrapped by ParseRange's error for a range that starts at or past the end
// of the file: a server answers it with 416 and Unsatisfied(size).
var ErrUnsatisfiable = errors.New("range not satisfiable")

// ParseRange reads a Range header ("bytes=START-END", "bytes=START-" or "bytes=-SUFFIX") against
// a file of size bytes and returns the offset and length it asks for, clipped to the file. Several
// ranges in one header are refused (ErrMalformed): this product serves one range per request.
func ParseRange(h string, size int64) (off, n int64, err error) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, 0, fmt.Errorf("range %q: only one bytes range is served: %w", h, ErrMalformed)
	}
	a, b, ok := strings.Cut(strings.TrimSpace(spec), "-")
	if !ok {
		return 0, 0, fmt.Errorf("range %q: %w", h, ErrMalformed)
	}
	if a == "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n < 0 {
			return 0, 0, fmt.Errorf("range %q: bad suffix length: %w", h, ErrMalformed)
		}
		if n == 0 || size == 0 {
			return 0, 0, fmt.Errorf("range %q of %d bytes: %w", h, size, ErrUnsatisfiable)
		}
		n = min(n, size)
		return size - n, n, nil
	}
	start, err := strconv.ParseInt(a, 10, 64)
	if err != nil || start < 0 {
		return 0, 0, fmt.Errorf("range %q: bad start: %w", h, ErrMalformed)
	}
	end := size - 1
	if b != "" {
		if end, err = strconv.ParseInt(b, 10, 64); err != nil || end < start {
			return 0, 0, fmt.Errorf("range %q: bad end: %w", h, ErrMalformed)
		}
		end = min(end, size-1)
	}
	if start >= size {
		return 0, 0, fmt.Errorf("range %q: start outside the %d bytes: %w", h, size, ErrUnsatisfiable)
	}
	return start, end - start + 1, nil
}

// Request returns the Range header that asks for n bytes at off; n < 0 asks for everything from
// off on.
func Request(off, n int64) string {
	if n < 0 {
		return fmt.Sprintf("bytes=%d-", off)
	}
	return fmt.Sprintf("bytes=%d-%d", off, off+n-1)
}

// ContentRange is a Content-Range header: the bytes Start to End (inclusive) of a file of Size
// bytes. A part the header leaves unknown ("*") is -1.
type ContentRange struct {
	Start, End, Size int64
}

// Len returns the number of bytes the range covers; 0 when it names none.
func (c ContentRange) Len() int64 {
	if c.Start < 0 {
		return 0
	}
	return c.End - c.Start + 1
}

// String formats c as a server sends it: "bytes START-END/SIZE", "bytes */SIZE" for a refusal,
// and "*" for an unknown size.
func (c ContentRange) String() string {
	size := "*"
	if c.Size >= 0 {
		size = strconv.FormatInt(c.Size, 10)
	}
	if c.Start < 0 {
		return "bytes */" + size
	}
	return fmt.Sprintf("bytes %d-%d/%s", c.Start, c.End, size)
}

// Sent returns the Content-Range of n bytes at off of a file of size bytes.
func Sent(off, n, size int64) string {
	return ContentRange{Start: off, End: off + n - 1, Size: size}.String()
}

// Unsatisfied returns the Content-Range a 416 answer carries: "bytes */SIZE".
func Unsatisfied(size int64) string { return ContentRange{Start: -1, End: -1, Size: size}.String() }

// ParseContentRange reads "bytes START-END/SIZE", "bytes START-END/*" or "bytes */SIZE". A
// range that ends before it starts, or past the size it states, is ErrMalformed.
func ParseContentRange(s string) (ContentRange, error) {
	bad := fmt.Errorf("Content-Range %q: %w", s, ErrMalformed)
	rest, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return ContentRange{}, bad
	}
	rng, total, ok := strings.Cut(rest, "/")
	if !ok {
		return ContentRange{}, bad
	}
	c := ContentRange{Start: -1, End: -1, Size: -1}
	var err error
	if total != "*" {
		if c.Size, err = strconv.ParseInt(total, 10, 64); err != nil || c.Size < 0 {
			return ContentRange{}, bad
		}
	}
	if rng == "*" {
		if c.Size < 0 {
			return ContentRange{}, bad
		}
		return c, nil
	}
	a, b, ok := strings.Cut(rng, "-")
	if !ok {
		return ContentRange{}, bad
	}
	if c.Start, err = strconv.ParseInt(a, 10, 64); err != nil || c.Start < 0 {
		return ContentRange{}, bad
	}
	if c.End, err = strconv.ParseInt(b, 10, 64); err != nil || c.End < c.Start {
		return ContentRange{}, bad
	}
	if c.Size >= 0 && c.End >= c.Size {
		return ContentRange{}, bad
	}
	return c, nil
}
