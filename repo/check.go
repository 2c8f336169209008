package repo

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
)

const (
	// checkAhead is how many bytes at the start of a response are checked before its headers go
	// out: what a damaged chunk there is refused with.
	checkAhead = 16 << 20
	// checkPiece is how many bytes are checked, then sent with sendfile, at a time.
	checkPiece = 4 << 20
)

// errRefused ends a response whose bytes failed their check.
var errRefused = errors.New("bytes refused by the range check")

// checkedWriter sends the bytes of one extent only once the Handler's range check accepted them:
// the start of the range at WriteHeader (refused with 503 before anything is sent), the rest piece
// by piece as sendfile reaches it (a refusal cuts the response). Reads that go through the
// extentReader (multipart ranges) are checked there.
type checkedWriter struct {
	http.ResponseWriter
	x       *extentReader
	r       *http.Request
	h       *Handler
	e       *entry
	refused bool
}

var _ io.ReaderFrom = (*checkedWriter)(nil)

func (c *checkedWriter) WriteHeader(code int) {
	if c.r.Method == http.MethodGet && (code == http.StatusOK || code == http.StatusPartialContent) {
		if off, n, ok := c.sending(code); ok {
			if err := c.x.check(c.x.base+off, min(n, checkAhead)); err != nil {
				c.refuse(err)
				return
			}
		}
	}
	c.ResponseWriter.WriteHeader(code)
}

// sending returns the range of the extent a response with status code sends, when it sends one.
func (c *checkedWriter) sending(code int) (int64, int64, bool) {
	if code == http.StatusOK {
		return 0, c.x.size, true
	}
	cr, err := httprange.ParseContentRange(c.Header().Get("Content-Range"))
	if err != nil || cr.Start < 0 {
		return 0, 0, false // several ranges: each is checked as it is read
	}
	return cr.Start, cr.Len(), true
}

func (c *checkedWriter) refuse(err error) {
	c.refused = true
	c.h.cfg.log.Error("refusing a file whose bytes failed their check", "path", cleanURLPath(c.e.name), "error", err)
	hd := c.Header()
	for _, k := range []string{"Content-Length", "Content-Range", "Accept-Ranges", "Content-Encoding"} {
		hd.Del(k)
	}
	hd.Set("Retry-After", "10")
	writeError(c.ResponseWriter, http.StatusServiceUnavailable,
		fmt.Sprintf("%s: this node's copy of the release is damaged there; another node can serve it: %v", cleanURLPath(c.e.name), err))
}

func (c *checkedWriter) Write(p []byte) (int, error) {
	if c.refused {
		return 0, errRefused
	}
	return c.ResponseWriter.Write(p)
}

// ReadFrom sends what src holds. When src is a limited view of the extent (what sendfile sends
// from), it is sent checkPiece bytes at a time, each checked first.
func (c *checkedWriter) ReadFrom(src io.Reader) (int64, error) {
	if c.refused {
		return 0, errRefused
	}
	lr, ok := src.(*io.LimitedReader)
	if !ok || lr.R != io.Reader(c.x) {
		return c.readFrom(src)
	}
	var sent int64
	for lr.N > 0 {
		piece := min(lr.N, checkPiece)
		if err := c.x.check(c.x.base+c.x.pos, piece); err != nil {
			c.h.cfg.log.Error("cutting a response short: its next bytes failed their check", "path", cleanURLPath(c.e.name), "sent", sent, "error", err)
			return sent, err
		}
		n, err := c.readFrom(&io.LimitedReader{R: c.x, N: piece})
		// sendfile moved the file's position past the reader's: catch up, so that the next
		// piece is checked where it starts.
		if cur, serr := c.x.f.Seek(0, io.SeekCurrent); serr == nil && cur > c.x.base+c.x.pos {
			c.x.direct += cur - (c.x.base + c.x.pos)
			c.x.pos = cur - c.x.base
		}
		sent += n
		lr.N -= n
		if err != nil || n < piece {
			return sent, err
		}
	}
	return sent, nil
}

func (c *checkedWriter) readFrom(src io.Reader) (int64, error) {
	if rf, ok := c.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{c.ResponseWriter}, src)
}
