package containerd

import (
	"errors"
	"io"
)

// readAhead reads a stream in a goroutine of its own into a fixed set of buffers and hands them
// over in order as pieces, each given back through its release: reading (decompressing) the
// stream overlaps with what is done with the pieces, and the buffers bound the memory.
type readAhead struct {
	pieces chan piece // closed after the last piece; err is then set
	free   chan []byte
	stop   chan struct{}
	exited chan struct{}
	err    error // the read's error, nil at the stream's end; valid once pieces is closed
}

// startReadAhead reads r into n buffers of size bytes; seen, when set, sees each piece first, in
// the reading goroutine.
func startReadAhead(r io.Reader, n, size int, seen func([]byte)) *readAhead {
	ra := &readAhead{pieces: make(chan piece, n), free: make(chan []byte, n), stop: make(chan struct{}), exited: make(chan struct{})}
	for range n {
		ra.free <- make([]byte, size)
	}
	go ra.run(r, seen)
	return ra
}

func (ra *readAhead) run(r io.Reader, seen func([]byte)) {
	defer close(ra.exited)
	defer close(ra.pieces)
	for {
		var b []byte
		select {
		case b = <-ra.free:
		case <-ra.stop:
			return
		}
		n, err := io.ReadFull(r, b)
		if n > 0 {
			if seen != nil {
				seen(b[:n])
			}
			select {
			case ra.pieces <- piece{b: b[:n], release: func() { ra.free <- b }}:
			case <-ra.stop:
				return
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return
		}
		if err != nil {
			ra.err = err
			return
		}
	}
}

// close stops the reading and waits until its goroutine is done with the stream; the pieces not
// taken yet are dropped.
func (ra *readAhead) close() {
	select {
	case <-ra.stop:
	default:
		close(ra.stop)
	}
	<-ra.exited
}
