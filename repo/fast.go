package repo

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// headLimit is the most bytes of request heads a connection reads before the fast path leaves
// it to net/http, which enforces its own limit (http.Server.MaxHeaderBytes).
const headLimit = 4 << 10

// Listener returns ln wrapped for hs.Serve, where hs serves s. Each connection is read by s
// first, which answers by itself the request most clients send most of the time: a GET or HEAD
// over HTTP/1.1 of a whole small file (held in memory as the Handler holds them), with no range, condition, body or
// upgrade. It sends the bytes the Handler sends through net/http (the same status line and
// headers in the same order, the same Date) and records the same metrics. At the first request
// of any other kind (another method, path or version, a range, a condition, anything malformed
// or unusual) the connection goes to hs with every byte read so far, and hs answers that request
// and the rest of the connection as it would have without the fast path.
//
// It honours hs.ReadHeaderTimeout and hs.IdleTimeout (each falling back to hs.ReadTimeout, as
// net/http's do). Closing the listener, as hs.Shutdown and hs.Close do, closes the connections it
// holds once the response being written, if any, is out.
//
// Why: for a file of a few KiB, net/http's work for each request (a Request parsed, the header
// map copied and sorted, a background read, five deadline updates) costs more than the file.
func (s *Server) Listener(ln net.Listener, hs *http.Server) net.Listener {
	l := &fastListener{
		Listener: ln,
		s:        s,
		header:   hs.ReadHeaderTimeout,
		idle:     hs.IdleTimeout,
		handoff:  make(chan net.Conn),
		errs:     make(chan error),
		done:     make(chan struct{}),
		conns:    make(map[*fastConn]struct{}),
	}
	if l.header <= 0 {
		l.header = hs.ReadTimeout
	}
	if l.idle <= 0 {
		l.idle = hs.ReadTimeout
	}
	go l.accept()
	return l
}

// fastListener is the listener Listener returns. Its own goroutine accepts connections and reads
// each one in a goroutine of its own; Accept returns the connections handed to net/http.
type fastListener struct {
	net.Listener
	s            *Server
	header, idle time.Duration

	handoff chan net.Conn
	errs    chan error
	done    chan struct{}

	closeOnce sync.Once
	closeErr  error

	mu    sync.Mutex // guards conns
	conns map[*fastConn]struct{}

	answered atomic.Int64 // requests answered by the fast path, for tests
}

// accept accepts connections until the listener is closed. An error is passed to Accept, whose
// caller (http.Server.Serve) retries after temporary errors and closes the listener after others.
func (l *fastListener) accept() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			select {
			case l.errs <- err:
				continue
			case <-l.done:
				return
			}
		}
		go l.serve(c)
	}
}

// Accept returns the next connection handed to net/http.
func (l *fastListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.handoff:
		return c, nil
	case err := <-l.errs:
		return nil, err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close closes the listener and wakes the connections waiting for a request, which close.
func (l *fastListener) Close() error {
	l.closeOnce.Do(func() {
		close(l.done)
		l.closeErr = l.Listener.Close()
		l.mu.Lock()
		for c := range l.conns {
			// A deadline in the past ends a read in progress. A connection sets its deadline
			// before it checks done, so none sets a later one after this.
			_ = c.conn.SetReadDeadline(time.Unix(1, 0)) // a closed connection has nothing to wake
		}
		l.mu.Unlock()
	})
	return l.closeErr
}

func (l *fastListener) closing() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// track adds c to the connections held (false once the listener is closed) or removes it.
func (l *fastListener) track(c *fastConn, add bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !add {
		delete(l.conns, c)
		return true
	}
	if l.closing() {
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

// serve answers c's requests while they are for the fast path, then hands c to net/http or
// closes it.
func (l *fastListener) serve(c net.Conn) {
	fc := &fastConn{conn: c, l: l, buf: make([]byte, 0, headLimit)}
	if !l.track(fc, true) {
		c.Close()
		return
	}
	handoff := fc.run()
	l.track(fc, false)
	if !handoff {
		c.Close()
		return
	}
	// net/http sets the deadlines it wants; none of the fast path's may linger.
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		c.Close()
		return
	}
	hc := c
	if len(fc.buf) > 0 {
		hc = &replayConn{Conn: c, pending: fc.buf}
	}
	select {
	case l.handoff <- hc:
	case <-l.done:
		c.Close()
	}
}

// fastConn is one connection read by the fast path.
type fastConn struct {
	conn net.Conn
	l    *fastListener
	buf  []byte // bytes read and not yet answered: the start of the next request(s)
	out  []byte // the response head being written
	iov  [2][]byte
	// idleUntil is the idle deadline set last; zero after a header deadline replaced it.
	idleUntil time.Time
	answered  int // requests answered
}

// run answers requests until one is not for the fast path (it returns true, with that request's
// bytes and any after them in buf) or the connection is to be closed (false).
func (c *fastConn) run() bool {
	for {
		n, handoff := c.readHead()
		if n == 0 {
			return handoff
		}
		req, ok := parseHead(c.buf[:n])
		if !ok {
			return true
		}
		h := c.l.s.handler.Load()
		if h == nil {
			return true
		}
		sf := h.fastFile(req.name)
		if sf == nil {
			return true
		}
		// As net/http does once shutting down, say that the connection closes.
		req.close = req.close || c.l.closing()
		c.answered++
		if !c.answer(h, req, sf) || req.close {
			return false
		}
		c.buf = c.buf[:copy(c.buf, c.buf[n:])]
	}
}

// readHead reads until buf holds a whole request head and returns its length with the final
// blank line. It returns 0 and true when the bytes read are not a request the fast path can
// take (net/http is to read them), 0 and false when the connection is to be closed: the client
// closed it or was silent for too long, a read failed, or the listener is closing.
func (c *fastConn) readHead() (int, bool) {
	var started bool
	for {
		if i := bytes.Index(c.buf, crlfcrlf); i >= 0 {
			return i + len(crlfcrlf), false
		}
		// Between requests net/http waits for 4 bytes before it reads a request: so does this.
		peeked := c.answered == 0 || len(c.buf) >= 4
		if peeked && (!plausible(c.buf) || len(c.buf) == cap(c.buf)) {
			return 0, true
		}
		now := time.Now()
		var err error
		switch {
		case len(c.buf) == 0 && c.l.idle > 0:
			// Waiting for the next request. The deadline moves at most once a second, so
			// that a busy connection does not update it at every request.
			if c.idleUntil.IsZero() || c.idleUntil.Sub(now) < c.l.idle-time.Second {
				c.idleUntil = now.Add(c.l.idle)
				err = c.conn.SetReadDeadline(c.idleUntil)
			}
		case peeked && len(c.buf) > 0 && !started && c.l.header > 0:
			started = true
			c.idleUntil = time.Time{}
			err = c.conn.SetReadDeadline(now.Add(c.l.header))
		}
		if err != nil || c.l.closing() {
			return 0, false
		}
		m, err := c.conn.Read(c.buf[len(c.buf):cap(c.buf)])
		c.buf = c.buf[:len(c.buf)+m]
		if err != nil {
			// A request cut short by the end of the stream is net/http's to answer (400), but
			// for fewer than 4 bytes after an earlier request: net/http waits for 4 bytes
			// between requests and closes when they do not come. After any other failure, or
			// a timeout, it closes the connection without a word.
			return 0, errors.Is(err, io.EOF) && (len(c.buf) >= 4 || len(c.buf) > 0 && c.answered == 0)
		}
	}
}

var crlfcrlf = []byte("\r\n\r\n")

// plausible reports whether b may be the start of a request the fast path takes: it begins as
// a GET or HEAD of a path does and has no line ended by a bare LF (net/http accepts those; this
// path leaves them to it).
func plausible(b []byte) bool {
	get, head := "GET /", "HEAD /"
	n := min(len(b), len(head))
	if string(b[:min(n, len(get))]) != get[:min(n, len(get))] && string(b[:n]) != head[:n] {
		return false
	}
	for i, ch := range b {
		if ch == '\n' && (i == 0 || b[i-1] != '\r') {
			return false
		}
	}
	return true
}

// fastRequest is what the fast path needs of a request.
type fastRequest struct {
	head  bool   // HEAD rather than GET
	name  []byte // the file's path inside the image
	route string // the route pattern of the metrics
	close bool   // the connection is to be closed after the response
}

// parseHead parses one request head (ending with its blank line) and reports whether the fast
// path may answer it. It refuses, for net/http to answer, everything that is not plainly a GET
// or HEAD of a clean path over HTTP/1.1 with exactly one Host and no header that changes the
// answer: a range, a condition, a body, an expectation or an upgrade.
func parseHead(b []byte) (fastRequest, bool) {
	var req fastRequest
	line, rest, _ := bytes.Cut(b, crlf)
	switch {
	case bytes.HasPrefix(line, []byte("GET ")):
		line = line[len("GET "):]
	case bytes.HasPrefix(line, []byte("HEAD ")):
		req.head = true
		line = line[len("HEAD "):]
	default:
		return req, false
	}
	target, proto, ok := bytes.Cut(line, []byte(" "))
	if !ok || string(proto) != "HTTP/1.1" || !cleanTarget(target) {
		return req, false
	}
	hosts := 0
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, crlf)
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(name) == 0 || !allIn(name, &tokenChars) {
			return req, false
		}
		value = bytes.Trim(value, " \t")
		for _, ch := range value {
			if ch < ' ' && ch != '\t' || ch == 0x7f {
				return req, false
			}
		}
		var lower [24]byte
		if len(name) > len(lower) {
			continue // none of the names below
		}
		for i, ch := range name {
			if 'A' <= ch && ch <= 'Z' {
				ch += 'a' - 'A'
			}
			lower[i] = ch
		}
		switch n := lower[:len(name)]; {
		case string(n) == "host":
			hosts++
			if !allIn(value, &hostChars) {
				return req, false
			}
		case string(n) == "connection":
			for tok := range bytes.SplitSeq(value, []byte(",")) {
				tok = bytes.Trim(tok, " \t")
				switch {
				case bytes.EqualFold(tok, []byte("close")):
					req.close = true
				case bytes.EqualFold(tok, []byte("keep-alive")):
				default:
					return req, false
				}
			}
		case bytes.HasPrefix(n, []byte("if-")), string(n) == "range", string(n) == "content-length",
			string(n) == "transfer-encoding", string(n) == "expect", string(n) == "upgrade",
			string(n) == "te", string(n) == "trailer", string(n) == "http2-settings":
			return req, false
		}
	}
	if hosts != 1 {
		return req, false
	}
	// Files only: the routes the Server answers otherwise (health, metrics, the release metadata)
	// are net/http's.
	switch req.route = pathRoute(string(target)); req.route {
	case "GET /":
		req.name = target[1:]
	case "GET " + Prefix + "/":
		req.name = target[len(Prefix)+1:]
	default:
		return req, false
	}
	return req, len(req.name) > 0
}

var crlf = []byte("\r\n")

// cleanTarget reports whether a request target is an absolute path that needs no decoding and
// no cleaning and names no directory: only the characters net/url leaves as they are in a path
// (letters, digits, "-._~$&+,/:;=@"), no run of slashes, no dot segment, no trailing slash, no
// query.
func cleanTarget(t []byte) bool {
	if len(t) < 2 || t[0] != '/' || t[len(t)-1] == '/' {
		return false
	}
	if !allIn(t, &pathChars) {
		return false
	}
	for seg := range bytes.SplitSeq(t[1:], []byte("/")) {
		if len(seg) == 0 || string(seg) == "." || string(seg) == ".." {
			return false
		}
	}
	return true
}

// charSet is a set of bytes.
type charSet [256]bool

func newCharSet(chars string) (set charSet) {
	for i := range len(chars) {
		set[chars[i]] = true
	}
	return set
}

// allIn reports whether every byte of b is in set.
func allIn(b []byte, set *charSet) bool {
	for _, ch := range b {
		if !set[ch] {
			return false
		}
	}
	return true
}

var (
	// pathChars are the characters cleanTarget accepts.
	pathChars = newCharSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~$&+,;=:@/")
	// tokenChars are those of an HTTP token (a header name).
	tokenChars = newCharSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~")
	// hostChars are those a Host value plainly has: a host name or address with an optional
	// port (net/http is left to judge the others).
	hostChars = newCharSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._:[]")
)

// fastFile returns the small file named name (a path inside the image), from memory or read now
// as the Handler reads it, or nil when there is no such small file or it cannot be read (the
// Handler then answers as it does).
func (h *Handler) fastFile(name []byte) *smallFile {
	e := h.index[string(name)]
	if e == nil || e.dir || e.size > h.cfg.smallLimit {
		return nil
	}
	sf, err := h.small(e)
	if err != nil {
		return nil
	}
	return sf
}

// answer writes the response to req, as the Handler writes it through net/http, and records it
// as Server.ServeHTTP does. It reports whether the response went out whole.
func (c *fastConn) answer(h *Handler, req fastRequest, sf *smallFile) bool {
	s := c.l.s
	s.metrics.inFlight.Inc()
	start := time.Now()
	out := append(c.out[:0], "HTTP/1.1 200 OK\r\nAccept-Ranges: bytes\r\nContent-Length: "...)
	out = strconv.AppendInt(out, int64(len(sf.data)), 10)
	out = append(out, "\r\nContent-Type: "...)
	out = append(out, sf.ctype[0]...)
	out = append(out, "\r\nDate: "...)
	out = append(out, h.dateHeader()[0]...)
	out = append(out, "\r\nEtag: "...)
	out = append(out, sf.etag[0]...)
	if sf.lastMod != nil {
		out = append(out, "\r\nLast-Modified: "...)
		out = append(out, sf.lastMod[0]...)
	}
	if req.close {
		out = append(out, "\r\nConnection: close"...)
	}
	out = append(out, "\r\n\r\n"...)
	c.out = out
	var err error
	method, n := http.MethodGet, int64(len(sf.data))
	if req.head {
		method, n = http.MethodHead, 0
		_, err = c.conn.Write(out)
	} else {
		c.iov = [2][]byte{out, sf.data}
		bufs := net.Buffers(c.iov[:])
		_, err = bufs.WriteTo(c.conn)
		h.cfg.metrics.file(modeMemory, n)
	}
	s.metrics.inFlight.Dec()
	s.record(req.route, method, http.StatusOK, n, start)
	c.l.answered.Add(1)
	return err == nil
}

// replayConn is a connection handed to net/http: it reads the bytes the fast path read first.
// It passes io.ReaderFrom (sendfile) and CloseWrite through to the connection, as net/http uses
// them when the connection has them.
type replayConn struct {
	net.Conn
	pending []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		if len(c.pending) == 0 {
			c.pending = nil
		}
		return n, nil
	}
	return c.Conn.Read(p)
}

// ReadFrom writes what src holds to the connection, with the connection's ReadFrom (sendfile
// from a file) when it has one.
func (c *replayConn) ReadFrom(src io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{c.Conn}, src)
}

// CloseWrite shuts down the writing side of the connection when it can.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
