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

	// budget bounds what a compressed layer expands to before its blob is verified; nil for a
	// plain tar, which expands to its own size.
	budget *expansion

	// Set before done is closed. diffID is empty for an uncompressed layer.
	diffID digest.Digest
	facts  layerFacts
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

// stop ends the extraction of a committed blob that is not to be used: one following its file
// fails at its next read; one fed from the writer's buffers has all of its bytes already.
func (e *extraction) stop() {
	e.gaveUp.Store(true)
	if e.follow != nil {
		e.follow.close(true)
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
	defer func() {
		// A failed extraction's files go at once, not at the import's end: a layer that passed
		// its bound leaves no more than the bound behind while the archive is still read.
		if e.err != nil {
			_ = os.RemoveAll(e.dir)
		}
	}()
	if e.follow != nil {
		defer e.follow.f.Close()
		src := bufio.NewReaderSize(e.follow, 256<<10)
		e.diffID, e.facts, e.err = extract(ctx, e.dir, src, func(dr io.Reader) io.Reader {
			if e.budget == nil {
				return dr
			}
			return &boundedReader{r: dr, b: e.budget, follow: e.follow}
		})
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
	e.diffID, e.facts, e.err = extract(ctx, e.dir, r, nil)
}

// extract applies the layer read from r to dir as containerd's overlay applier does and returns
// the digest of its uncompressed bytes; empty when they are r's own (the blob's digest, which the
// writer computes). bound is nil for a plain tar; for a compressed layer it wraps the
// decompressed stream, and the error of the wrapper's Read ends the extraction.
func extract(ctx context.Context, dir string, r io.Reader, bound func(io.Reader) io.Reader) (digest.Digest, layerFacts, error) {
	if bound == nil {
		facts, err := applyLayer(ctx, dir, r)
		if err != nil {
			return "", facts, err
		}
		_, err = io.Copy(io.Discard, r)
		return "", facts, err
	}
	// Decompressed in-process: containerd's helper would hand gzip to unpigz when the host has it,
	// which measured slower here (a process and two pipes per layer).
	var dr io.Reader
	switch head := peek(r); compression.DetectCompression(head) {
	case compression.Gzip:
		zr, err := kgzip.NewReader(r)
		if err != nil {
			return "", layerFacts{}, err
		}
		defer zr.Close()
		dr = zr
	case compression.Zstd:
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if err != nil {
			return "", layerFacts{}, err
		}
		defer zr.Close()
		dr = zr
	default:
		return "", layerFacts{}, fmt.Errorf("unknown compression, starting %x", head)
	}
	// Decompressing and hashing in one goroutine, writing the files in another: a layer takes
	// two cores, as containerd's unpack with unpigz beside it does.
	h := sha256.New()
	ra := startReadAhead(bound(dr), decompressQueue, decompressPiece, func(b []byte) { h.Write(b) })
	pr := &pieceReader{ch: ra.pieces}
	facts, err := applyLayer(ctx, dir, pr)
	if err == nil {
		// What follows the tar's end counts for the diff ID.
		_, err = io.Copy(io.Discard, pr)
	}
	ra.close() // the decompressor is done: ra.err and h are this goroutine's
	pr.drain()
	if ra.err != nil {
		// The decompressor's error first: a layer cut off by its bound fails the applier too.
		return "", facts, ra.err
	}
	if err != nil {
		return "", facts, err
	}
	return digest.NewDigest(digest.SHA256, h), facts, nil
}

// Expansion before verification.
//
// A compressed layer is extracted while its blob is written, before the blob's digest is known
// and before the archive's manifests say whether any image has it as a layer: a small member of
// an archive can decompress to any size (16 KB of zstd to 512 MiB). So what the compressed
// layers of one import expand to is bounded while they are unverified: at most expansionFloor
// plus expansionRatio times the compressed bytes they read, for all of them together (a bound
// per layer would let many small members each take the floor), and what a layer that failed had
// counted stays counted, so that the bound holds for all the bytes the import writes, not only
// for those it keeps. A layer that would pass it stops
// there, its files are removed at once, and it is left to containerd's unpack, which verifies
// the blob first and unpacks only the layers of the archive's images, as it does without one
// pass. A plain tar expands to its own size, which the content store holds already, and is not
// counted. The bound is generous for layers as images hold them (gzip and zstd compress files
// 2 to 10 times); what passes it is a file of zeros or an attack.

const (
	// expansionFloor is what an import's compressed layers may expand to before they are
	// verified, whatever their size.
	expansionFloor = 32 << 20
	// expansionRatio is how many bytes an unverified layer may expand to per compressed byte
	// read, on top of the floor.
	expansionRatio = 32
)

// errExpansionBound ends the extraction of a layer that would expand past the import's bound.
var errExpansionBound = errors.New("the layer expands past the bound of unverified layers; left to containerd's unpack")

// expansion is the bound of one import's unverified layers.
type expansion struct {
	floor, ratio int64
	mu           sync.Mutex
	expanded     int64 // decompressed bytes handed to the appliers
	read         int64 // compressed bytes they came from
}

func newExpansion(floor, ratio int64) *expansion {
	return &expansion{floor: floor, ratio: ratio}
}

// charge counts n more decompressed bytes, from read more compressed ones, or reports, counting
// nothing, that they pass the bound.
func (x *expansion) charge(n, read int64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.read += read
	if x.expanded+n > x.floor+x.ratio*x.read {
		return false
	}
	x.expanded += n
	return true
}

// boundedReader reads a layer's decompressed stream within its import's bound.
type boundedReader struct {
	r      io.Reader
	b      *expansion
	follow *follower
	read   int64 // compressed bytes counted
}

func (br *boundedReader) Read(p []byte) (int, error) {
	n, err := br.r.Read(p)
	if n > 0 {
		read := br.follow.read()
		ok := br.b.charge(int64(n), read-br.read)
		br.read = read
		if !ok {
			return 0, errExpansionBound
		}
	}
	return n, err
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
