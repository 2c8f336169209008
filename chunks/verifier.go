package chunks

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
)

// Verifier checks the chunks of one open file against their Sums before their bytes are served.
// It is safe for concurrent use; it reads the file with ReadAt only and never closes it.
type Verifier struct {
	f        *os.File
	path     string
	sums     Sums
	log      *slog.Logger
	onDamage func(*DamageError)

	mu       sync.Mutex
	ident    identity
	replaced bool
	verified []bool
	bad      map[int]*DamageError
	inflight map[int]chan struct{}
	bufs     sync.Pool
}

var _ io.ReaderAt = (*Verifier)(nil)

// Option configures a Verifier.
type Option func(*Verifier)

// WithLogger sets the logger that reports damaged chunks and files changed on disk (default:
// discard).
func WithLogger(l *slog.Logger) Option { return func(v *Verifier) { v.log = l } }

// WithOnDamage sets a function called once for each chunk found damaged (and once with chunk -1
// when the file is replaced on disk), from the goroutine of the Check that found it.
func WithOnDamage(f func(*DamageError)) Option { return func(v *Verifier) { v.onDamage = f } }

// WithVerified marks every chunk as checked already: the caller has just hashed the file.
// Changes on disk from then on are still caught.
func WithVerified() Option {
	return func(v *Verifier) {
		for i := range v.verified {
			v.verified[i] = true
		}
	}
}

// NewVerifier returns a Verifier of f, the open file at path, whose chunks should have the digests
// sums. It returns an error when f's size is not sums.Size.
func NewVerifier(f *os.File, path string, sums Sums, opts ...Option) (*Verifier, error) {
	if sums.ChunkSize <= 0 || Count(sums.Size, sums.ChunkSize) != len(sums.Digests) {
		return nil, fmt.Errorf("verify %s: %d chunk digests for %d bytes in chunks of %d", path, len(sums.Digests), sums.Size, sums.ChunkSize)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", path, err)
	}
	if fi.Size() != sums.Size {
		return nil, fmt.Errorf("verify %s: %d bytes, the digests are of %d", path, fi.Size(), sums.Size)
	}
	v := &Verifier{f: f, path: path, sums: sums, log: slog.New(slog.DiscardHandler), ident: identityOf(fi),
		verified: make([]bool, len(sums.Digests)), bad: map[int]*DamageError{}, inflight: map[int]chan struct{}{}}
	for _, o := range opts {
		o(v)
	}
	return v, nil
}

// Sums returns the digests the file is checked against.
func (v *Verifier) Sums() Sums { return v.sums }

// Check returns nil when the bytes [off, off+n) of the file may be served: every chunk they touch
// matches its digest. A chunk is hashed the first time it is checked, and again after the file
// changed on disk. It returns a *DamageError (wrapping ErrDamaged) naming the first damaged chunk,
// and other errors when the file cannot be read. Check blocks while it reads and hashes.
func (v *Verifier) Check(off, n int64) error {
	if n <= 0 {
		return nil
	}
	if off < 0 || off+n > v.sums.Size {
		return fmt.Errorf("check %s: bytes %d-%d outside its %d bytes", v.path, off, off+n-1, v.sums.Size)
	}
	if err := v.noticeChange(off); err != nil {
		return err
	}
	last := int((off + n - 1) / v.sums.ChunkSize)
	for c := int(off / v.sums.ChunkSize); c <= last; c++ {
		if err := v.checkChunk(c); err != nil {
			return err
		}
	}
	return nil
}

// ReadAt reads from the file what Check allows.
func (v *Verifier) ReadAt(p []byte, off int64) (int, error) {
	n := int64(len(p))
	if off >= 0 && off+n > v.sums.Size {
		n = max(0, v.sums.Size-off)
	}
	if err := v.Check(off, n); err != nil {
		return 0, err
	}
	return v.f.ReadAt(p, off)
}

// Damaged returns the damage found so far, by chunk.
func (v *Verifier) Damaged() []*DamageError {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]*DamageError, 0, len(v.bad))
	for c := range len(v.verified) {
		if d, ok := v.bad[c]; ok {
			out = append(out, d)
		}
	}
	if d, ok := v.bad[-1]; ok {
		out = append(out, d)
	}
	return out
}

// identity is what tells that a file changed on disk: a write moves the change time even when the
// modification time is put back, and a new file under the same path has another inode.
type identity struct {
	dev, ino       uint64
	size           int64
	mtime, ctime   int64
	hasInode, hasC bool
}

func identityOf(fi os.FileInfo) identity {
	id := identity{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino, id.hasInode = uint64(st.Dev), st.Ino, true //nolint:unconvert // Dev is not uint64 everywhere.
		id.ctime, id.hasC = st.Ctim.Nano(), true
	}
	return id
}

func (a identity) sameFile(b identity) bool {
	return !a.hasInode || !b.hasInode || a.dev == b.dev && a.ino == b.ino
}

// noticeChange compares the open file, and the file now at its path, with what was seen last. A
// file changed in place has every chunk checked again as it is served; a file replaced under its
// path (what a server that opens the path would send) is refused altogether.
func (v *Verifier) noticeChange(off int64) error {
	fi, err := v.f.Stat()
	if err != nil {
		return fmt.Errorf("check %s: %w", v.path, err)
	}
	now := identityOf(fi)
	atPath := now
	if pfi, err := os.Stat(v.path); err == nil {
		atPath = identityOf(pfi)
	} else if errors.Is(err, os.ErrNotExist) {
		atPath = identity{hasInode: true, ino: ^uint64(0)}
	}
	v.mu.Lock()
	if v.replaced {
		d := v.bad[-1]
		v.mu.Unlock()
		return d
	}
	if !now.sameFile(atPath) {
		v.replaced = true
		c := int(off / v.sums.ChunkSize)
		d := &DamageError{Path: v.path, Chunk: c, Offset: int64(c) * v.sums.ChunkSize, Length: v.sums.Len(c),
			Reason: "the file was replaced or removed on disk while it was served"}
		v.bad[-1] = d
		v.mu.Unlock()
		v.log.Error("file replaced on disk while it was served; refusing it", "path", v.path)
		if v.onDamage != nil {
			v.onDamage(&DamageError{Path: v.path, Chunk: -1, Reason: d.Reason})
		}
		return d
	}
	if now == v.ident {
		v.mu.Unlock()
		return nil
	}
	v.ident = now
	// What was found damaged may have been repaired: everything is checked again.
	for i := range v.verified {
		v.verified[i] = false
	}
	clear(v.bad)
	v.mu.Unlock()
	v.log.Warn("file changed on disk while it was served; checking every chunk again as it is served", "path", v.path)
	return nil
}

func (v *Verifier) checkChunk(c int) error {
	for {
		v.mu.Lock()
		if d, ok := v.bad[c]; ok {
			v.mu.Unlock()
			return d
		}
		if v.verified[c] {
			v.mu.Unlock()
			return nil
		}
		wait, busy := v.inflight[c]
		if !busy {
			done := make(chan struct{})
			v.inflight[c] = done
			v.mu.Unlock()
			err := v.hash(c)
			v.mu.Lock()
			delete(v.inflight, c)
			close(done)
			v.mu.Unlock()
			return err
		}
		v.mu.Unlock()
		<-wait
	}
}

// hash reads and hashes chunk c and records what it found.
func (v *Verifier) hash(c int) error {
	n := v.sums.Len(c)
	off := int64(c) * v.sums.ChunkSize
	bp, _ := v.bufs.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, v.sums.ChunkSize)
		bp = &b
	}
	defer v.bufs.Put(bp)
	buf := (*bp)[:n]
	if _, err := v.f.ReadAt(buf, off); err != nil {
		return fmt.Errorf("check %s chunk %d: %w", v.path, c, err)
	}
	got := Sum(buf)
	want := v.sums.Digests[c]
	v.mu.Lock()
	if got == want {
		v.verified[c] = true
		v.mu.Unlock()
		return nil
	}
	d := &DamageError{Path: v.path, Chunk: c, Offset: off, Length: n, Reason: Algorithm + " " + hex.EncodeToString(got[:]) +
		", verified as " + hex.EncodeToString(want[:])}
	v.bad[c] = d
	v.mu.Unlock()
	v.log.Error("chunk damaged on disk, refusing to serve it", "path", v.path, "chunk", c, "offset", off,
		"length", n, Algorithm, hex.EncodeToString(got[:]), "want", hex.EncodeToString(want[:]))
	if v.onDamage != nil {
		v.onDamage(d)
	}
	return d
}
