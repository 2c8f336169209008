package repo

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// SpanFS is implemented by file systems whose regular files lie, each, in one contiguous range
// of a backing file (an ISO image). Span returns the offset and length of the named file's bytes
// in the backing file, or ok false when the file is not one contiguous range (or is not a regular
// file). Span must be safe for concurrent use and must not block on I/O.
type SpanFS interface {
	Span(name string) (offset, length int64, ok bool)
}

// extentReader reads one extent of a file that it owns, with offsets relative to the extent.
// It exposes the file's SyscallConn so that net/http, given an io.LimitedReader over it, sends the
// bytes with sendfile from the file's current position instead of reading them.
type extentReader struct {
	f          *os.File
	base, size int64
	pos        int64 // where the file position should be, relative to base
	copied     int64 // bytes that went through Read, i.e. through user space
	// check, when set, must accept the bytes (absolute offsets in f) before they are read.
	check func(off, n int64) error
	// direct counts the bytes a checkedWriter sent with sendfile, piece by piece, moving pos.
	direct int64
}

var (
	_ io.ReadSeeker = (*extentReader)(nil)
	_ syscall.Conn  = (*extentReader)(nil)
)

var errNegativeSeek = errors.New("seek before the start of the file")

// Read reads from the extent, never past its end.
func (e *extentReader) Read(p []byte) (int, error) {
	if e.pos >= e.size {
		return 0, io.EOF
	}
	if rest := e.size - e.pos; int64(len(p)) > rest {
		p = p[:rest]
	}
	if e.check != nil {
		if err := e.check(e.base+e.pos, int64(len(p))); err != nil {
			return 0, err
		}
	}
	n, err := e.f.Read(p)
	e.pos += int64(n)
	e.copied += int64(n)
	if errors.Is(err, io.EOF) && e.pos < e.size {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// Seek moves within the extent; offsets are relative to its start.
func (e *extentReader) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = e.pos + offset
	case io.SeekEnd:
		abs = e.size + offset
	default:
		return 0, fmt.Errorf("seek: invalid whence %d", whence)
	}
	if abs < 0 {
		return 0, errNegativeSeek
	}
	if _, err := e.f.Seek(e.base+abs, io.SeekStart); err != nil {
		return 0, err
	}
	e.pos = abs
	return abs, nil
}

// SyscallConn returns the raw connection of the underlying file, for sendfile.
func (e *extentReader) SyscallConn() (syscall.RawConn, error) { return e.f.SyscallConn() }

// sentDirect returns how many bytes left the file without passing through Read: the distance the
// kernel moved the file position beyond where reads and seeks left it.
func (e *extentReader) sentDirect() int64 {
	cur, err := e.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0
	}
	if d := cur - (e.base + e.pos); d > 0 {
		return e.direct + d
	}
	return e.direct
}
