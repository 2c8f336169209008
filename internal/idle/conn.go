package idle

import (
	"io"
	"net"
	"time"
)

// Pieces a connection's writes are cut into, so that each piece must leave within the timeout:
// a slow reader that keeps taking bytes is served, one that takes none is cut.
const (
	writePiece    = 1 << 20
	readFromPiece = 4 << 20
)

// Listener returns ln whose connections abandon a write that makes no progress for d: each
// piece of a write (and of a sendfile through ReadFrom, which stays in use) must leave within d of
// its start, else the write fails with a timeout and the server closes the connection. It is the
// write timeout of a server whose responses may be far larger than any fixed deadline allows (a
// release ISO of several GB). d <= 0 returns ln.
func Listener(ln net.Listener, d time.Duration) net.Listener {
	if d <= 0 {
		return ln
	}
	return &listener{Listener: ln, d: d}
}

type listener struct {
	net.Listener
	d time.Duration
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, d: l.d}, nil
}

type conn struct {
	net.Conn
	d time.Duration
}

func (c *conn) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), writePiece)
		_ = c.SetWriteDeadline(time.Now().Add(c.d))
		m, err := c.Conn.Write(p[:k])
		n += m
		p = p[m:]
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// ReadFrom hands src to the connection's own ReadFrom (sendfile, splice) piece by piece, each
// piece under its deadline; src's io.LimitedReader, when it is one, is unwrapped and rewrapped
// so that the kernel's zero-copy paths still recognise the file beneath.
func (c *conn) ReadFrom(src io.Reader) (int64, error) {
	rf, ok := c.Conn.(io.ReaderFrom)
	if !ok {
		return io.Copy(writerOnly{c}, src)
	}
	remain := int64(-1)
	lr, limited := src.(*io.LimitedReader)
	if limited {
		remain, src = lr.N, lr.R
	}
	var total int64
	for remain != 0 {
		piece := int64(readFromPiece)
		if remain > 0 {
			piece = min(piece, remain)
		}
		_ = c.SetWriteDeadline(time.Now().Add(c.d))
		n, err := rf.ReadFrom(&io.LimitedReader{R: src, N: piece})
		total += n
		if remain > 0 {
			remain -= n
		}
		if limited {
			lr.N = remain
		}
		if err != nil || n < piece {
			return total, err
		}
	}
	return total, nil
}

// CloseWrite passes the half-close net/http uses through to the connection.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// writerOnly hides a writer's ReadFrom, so that io.Copy does not call it back.
type writerOnly struct{ io.Writer }
