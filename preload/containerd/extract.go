package containerd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/containerd/containerd/v2/pkg/archive/compression"
	kgzip "github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	digest "github.com/opencontainers/go-digest"

	"github.com/upgrade-repo/upgrade-repo/internal/pagecache"
)

// The extraction of one layer while its blob is written (see onepass.go): from the writer's
// buffers for a plain tar, following the blob's file for a compressed layer.

// extractQueue is how many written pieces of a blob may wait for its extraction.
const extractQueue = 8

// extraction extracts one blob, fed the bytes written into it.
type extraction struct {
	dir  string
	ch   chan piece
	done chan struct{}
	// follow reads a compressed layer from its file; nil: a plain tar, from ch.
	follow *follower

	gaveUp atomic.Bool
	closed bool
	// blob is the blob's digest, set when it is committed (under the stager's lock).
	blob digest.Digest

	// Set before done is closed. diffID is empty for an uncompressed layer.
	diffID digest.Digest
	err    error
}

// piece is written bytes handed to an extraction, and what gives them back once it read them.
type piece struct {
	b       []byte
	release func()
}

var piecePool = sync.Pool{New: func() any { return make([]byte, 0, copyBuffer) }}

// feed hands a copy of p to the extraction; it returns at once once the extraction gave up.
func (e *extraction) feed(p []byte) {
	if e.gaveUp.Load() || len(p) == 0 {
		return
	}
	b := piecePool.Get().([]byte)
	if cap(b) < len(p) {
		b = make([]byte, 0, len(p))
	}
	b = append(b[:0], p...)
	e.ch <- piece{b: b, release: func() { piecePool.Put(b[:0]) }} //nolint:staticcheck // a slice header per piece is fine
}

// give hands p itself to the extraction, which calls release once it read it (at once when the
// extraction gave up).
func (e *extraction) give(p []byte, release func()) {
	if e.gaveUp.Load() || len(p) == 0 {
		release()
		return
	}
	e.ch <- piece{b: p, release: release}
}

// wrote tells the extraction that p was written, ending at offset end of the blob: as a copy,
// or, with release, p itself, given back through release (at once when the extraction follows
// the file).
func (e *extraction) wrote(p []byte, release func(), end int64) {
	switch {
	case e.follow != nil:
		e.follow.publish(end)
		if release != nil {
			release()
		}
	case release != nil:
		e.give(p, release)
	default:
		e.feed(p)
	}
}

// close ends the blob's bytes.
func (e *extraction) close() {
	if e.follow != nil {
		e.follow.close(false)
	}
	if !e.closed {
		e.closed = true
		close(e.ch)
	}
}

// abort ends the extraction of a blob that was not committed and removes what it wrote.
func (e *extraction) abort() {
	e.gaveUp.Store(true)
	if e.follow != nil {
		e.follow.close(true)
	}
	e.close()
	go func() { <-e.done; _ = os.RemoveAll(e.dir) }()
}

func (e *extraction) run(ctx context.Context) {
	defer close(e.done)
	if e.follow != nil {
		defer e.follow.f.Close()
		e.diffID, e.err = extract(ctx, e.dir, bufio.NewReaderSize(e.follow, 256<<10), true)
		// The blob's pages that the writer kept for this extraction (see fileWriter.dropBehind)
		// are not needed any more; those still dirty stay.
		pagecache.Drop(e.follow.f, 0, 0)
		return
	}
	r := &pieceReader{ch: e.ch}
	defer func() {
		// The writer never waits for an extraction that ended.
		e.gaveUp.Store(true)
		r.drain()
	}()
	e.diffID, e.err = extract(ctx, e.dir, r, false)
}

// extract applies the layer read from r to dir as containerd's overlay applier does and returns
// the digest of its uncompressed bytes; empty when they are r's own (the blob's digest, which the
// writer computes).
func extract(ctx context.Context, dir string, r io.Reader, compressed bool) (digest.Digest, error) {
	if !compressed {
		if err := applyLayer(ctx, dir, r); err != nil {
			return "", err
		}
		_, err := io.Copy(io.Discard, r)
		return "", err
	}
	// Decompressed in-process: containerd's helper would hand gzip to unpigz when the host has it,
	// which measured slower here (a process and two pipes per layer).
	var dr io.Reader
	switch head := peek(r); compression.DetectCompression(head) {
	case compression.Gzip:
		zr, err := kgzip.NewReader(r)
		if err != nil {
			return "", err
		}
		defer zr.Close()
		dr = zr
	case compression.Zstd:
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if err != nil {
			return "", err
		}
		defer zr.Close()
		dr = zr
	default:
		return "", fmt.Errorf("unknown compression, starting %x", head)
	}
	// Decompressing and hashing in one goroutine, writing the files in another: a layer takes
	// two cores, as containerd's unpack with unpigz beside it does.
	h := sha256.New()
	ra := startReadAhead(dr, decompressQueue, decompressPiece, func(b []byte) { h.Write(b) })
	pr := &pieceReader{ch: ra.pieces}
	err := applyLayer(ctx, dir, pr)
	if err == nil {
		// What follows the tar's end counts for the diff ID.
		_, err = io.Copy(io.Discard, pr)
	}
	ra.close() // the decompressor is done: ra.err and h are this goroutine's
	pr.drain()
	if err != nil {
		return "", err
	}
	if ra.err != nil {
		return "", ra.err
	}
	return digest.NewDigest(digest.SHA256, h), nil
}

// decompressPiece and decompressQueue size the hand-over from a layer's decompression to its
// extraction.
const (
	decompressPiece = 256 << 10
	decompressQueue = 4
)

// peek returns the first bytes of r, a bufio.Reader, without consuming them.
func peek(r io.Reader) []byte {
	if br, ok := r.(*bufio.Reader); ok {
		b, _ := br.Peek(10)
		return b
	}
	return nil
}

// pieceReader reads the pieces of a channel as one stream.
type pieceReader struct {
	ch      chan piece
	cur     []byte
	release func()
}

func (r *pieceReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.release != nil {
			r.release()
			r.release = nil
		}
		pc, ok := <-r.ch
		if !ok {
			return 0, io.EOF
		}
		r.cur, r.release = pc.b, pc.release
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// drain gives back every piece, the one being read included.
func (r *pieceReader) drain() {
	if r.release != nil {
		r.release()
		r.release = nil
	}
	for pc := range r.ch {
		pc.release()
	}
}

// follower reads a file while it is being written, up to what the writer published.
type follower struct {
	f    *os.File
	mu   sync.Mutex
	cond *sync.Cond
	size int64 // published
	off  int64 // read, by the reading goroutine
	end  bool  // nothing more will be published
	fail bool  // the writer gave up
	// consumed is off, for the writer.
	consumed atomic.Int64
}

func newFollower(f *os.File) *follower {
	fl := &follower{f: f}
	fl.cond = sync.NewCond(&fl.mu)
	return fl
}

// publish makes the file's first size bytes readable.
func (fl *follower) publish(size int64) {
	fl.mu.Lock()
	fl.size = size
	fl.mu.Unlock()
	fl.cond.Broadcast()
}

// close ends what is published, failed when the writer gave up.
func (fl *follower) close(failed bool) {
	fl.mu.Lock()
	fl.end, fl.fail = true, fl.fail || failed
	fl.mu.Unlock()
	fl.cond.Broadcast()
}

// read returns how far the extraction has read the file.
func (fl *follower) read() int64 { return fl.consumed.Load() }

// errWriterGaveUp ends the extraction of a blob that was not committed.
var errWriterGaveUp = errors.New("the blob was not committed")

// Read implements io.Reader.
func (fl *follower) Read(p []byte) (int, error) {
	fl.mu.Lock()
	for fl.off >= fl.size && !fl.end && !fl.fail {
		fl.cond.Wait()
	}
	fail, size := fl.fail, fl.size
	fl.mu.Unlock()
	if fail {
		return 0, errWriterGaveUp
	}
	if fl.off >= size {
		return 0, io.EOF
	}
	if int64(len(p)) > size-fl.off {
		p = p[:size-fl.off]
	}
	n, err := fl.f.ReadAt(p, fl.off)
	fl.off += int64(n)
	fl.consumed.Store(fl.off)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// looksLikeLayer reports whether a blob starting with head may be a layer: gzip or zstd, or a tar.
func looksLikeLayer(head []byte) bool {
	switch compression.DetectCompression(head) {
	case compression.Gzip, compression.Zstd:
		return true
	}
	return len(head) >= 263 && bytes.Equal(head[257:262], []byte("ustar"))
}
