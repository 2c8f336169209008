package fetch

import "github.com/upgrade-repo/upgrade-repo/peer/cache"

// readAhead reads the chunks the in-order hash takes back from the file one ahead of it: chunk
// c+1 is read while chunk c is hashed. A chunk outside the page-cache window is read with direct
// I/O (cache.LocalISO.ReadChunk), which has no read-ahead of its own: read in turn, the hash would
// wait for the disk at every chunk. Two buffers, alternating by chunk.
type readAhead struct {
	iso  *cache.LocalISO
	bufs [2][]byte
	// next is the chunk being read ahead, -1 for none; its result comes on done.
	next int
	done chan readResult
}

type readResult struct {
	data []byte
	err  error
}

func newReadAhead(iso *cache.LocalISO) *readAhead {
	return &readAhead{iso: iso, bufs: [2][]byte{make([]byte, iso.ChunkSize()), make([]byte, iso.ChunkSize())},
		next: -1, done: make(chan readResult, 1)}
}

// start reads held chunk c in the background, unless a read is in flight.
func (ra *readAhead) start(c int) {
	if ra.next >= 0 {
		return
	}
	ra.next = c
	go func(buf []byte) {
		data, err := ra.iso.ReadChunk(c, buf)
		ra.done <- readResult{data: data, err: err}
	}(ra.bufs[c%2])
}

// read returns held chunk c's bytes: those read ahead, or read now. They stay valid until the
// next call.
func (ra *readAhead) read(c int) ([]byte, error) {
	if ra.next == c {
		ra.next = -1
		res := <-ra.done
		return res.data, res.err
	}
	ra.wait()
	return ra.iso.ReadChunk(c, ra.bufs[c%2])
}

// wait waits for a read in flight, whose bytes are then not needed: its buffer is free again.
func (ra *readAhead) wait() {
	if ra.next >= 0 {
		ra.next = -1
		<-ra.done
	}
}
