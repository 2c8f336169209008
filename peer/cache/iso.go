package cache

import (
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/upgrade-repo/upgrade-repo/chunks"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
)

// LocalISO is one ISO on this node's disk, complete or being filled chunk by chunk. Its methods
// are safe for concurrent use.
type LocalISO struct {
	store     *Store
	sha512    string
	size      int64
	chunkSize int64
	path      string // the file: the final path when complete, the .partial file otherwise

	mu       sync.RWMutex
	f        *os.File
	held     inventory.Bitmap
	digests  []chunks.Digest
	complete bool
	// verifier checks the chunks of a complete ISO again before they are served; nil until then.
	verifier *chunks.Verifier
	// window is how many chunks written last stay in the page cache (pages.go); recent, the
	// chunks written last, oldest first.
	window int
	recent []int
	// direct is a handle on the file for direct reads (ReadChunk), opened once; nil until then and
	// where the file system refuses direct I/O.
	direct     *os.File
	directOnce sync.Once
	// savedAt is when the record of the chunks held was written last (WriteChunk); unsaved, how
	// many bytes of chunks were written since.
	savedAt time.Time
	unsaved int64
}

// The record of the chunks held holds every chunk's digest: rewritten per chunk it would cost
// more the larger the ISO (a 6 GiB ISO: 1,536 records of up to 100 KB). WriteChunk rewrites it
// once saveBytes of chunks are left out of it, or saveEvery after it was written last, whichever
// comes first; a Fetch that ends writes it (Flush). A node killed in between takes at most that
// much again.
const (
	saveBytes = 16 << 20
	saveEvery = time.Second
)

// SHA512 returns the ISO's sha512 (hex).
func (l *LocalISO) SHA512() string { return l.sha512 }

// Size returns the ISO's size in bytes.
func (l *LocalISO) Size() int64 { return l.size }

// ChunkSize returns the chunk size.
func (l *LocalISO) ChunkSize() int64 { return l.chunkSize }

// Path returns the file the bytes are in.
func (l *LocalISO) Path() string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.path
}

// Complete reports whether the whole ISO is held and verified.
func (l *LocalISO) Complete() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.complete
}

// HeldBytes returns how many bytes are held.
func (l *LocalISO) HeldBytes() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for c := range chunks.Count(l.size, l.chunkSize) {
		if l.held.Has(c) {
			n += l.ChunkLen(c)
		}
	}
	return n
}

// ChunkLen returns the length of chunk c: ChunkSize, less for the last chunk.
func (l *LocalISO) ChunkLen(c int) int64 {
	off := int64(c) * l.chunkSize
	return min(l.chunkSize, l.size-off)
}

// Digest returns the digest recorded for chunk c (zero when it was never held).
func (l *LocalISO) Digest(c int) chunks.Digest {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.digests[c]
}

// Has reports whether chunk c is held.
func (l *LocalISO) Has(c int) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.held.Has(c)
}

// HasRange reports whether bytes [off, off+n) are all held.
func (l *LocalISO) HasRange(off, n int64) bool {
	if off < 0 || n <= 0 || off+n > l.size {
		return false
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	for c := int(off / l.chunkSize); int64(c)*l.chunkSize < off+n; c++ {
		if !l.held.Has(c) {
			return false
		}
	}
	return true
}

// ChunkDigests returns the hex digest of every chunk, "" for the chunks not held.
func (l *LocalISO) ChunkDigests() []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]string, len(l.digests))
	for c := range l.digests {
		if l.held.Has(c) {
			out[c] = hex.EncodeToString(l.digests[c][:])
		}
	}
	return out
}

// Verifier returns the check of a complete ISO's chunks against the digests it was verified with
// (see package chunks), which every server of its bytes calls before sending them; nil while the
// ISO is being fetched. Chunks it finds damaged are withdrawn from the held chunks.
func (l *LocalISO) Verifier() *chunks.Verifier {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.verifier
}

// Check returns nil when bytes [off, off+n) may be served: always for a partial download (its
// chunks were verified as they were written), for a complete ISO when the Verifier accepts them.
func (l *LocalISO) Check(off, n int64) error {
	if v := l.Verifier(); v != nil {
		return v.Check(off, n)
	}
	return nil
}

// guard makes the Verifier of a complete ISO: with verified, its chunks were all just hashed;
// without, each is checked the first time it is served.
func (l *LocalISO) guard(verified bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	sums := chunks.Sums{Size: l.size, ChunkSize: l.chunkSize, Digests: l.digests}
	opts := []chunks.Option{chunks.WithLogger(l.store.o.log), chunks.WithOnDamage(l.damaged)}
	if verified {
		opts = append(opts, chunks.WithVerified())
	}
	v, err := chunks.NewVerifier(l.f, l.path, sums, opts...)
	if err != nil {
		return fmt.Errorf("ISO %.16s: %w", l.sha512, err)
	}
	l.verifier = v
	return nil
}

// damaged withdraws a chunk found damaged on disk (every chunk when the file was replaced) from
// what this node serves and advertises.
func (l *LocalISO) damaged(d *chunks.DamageError) {
	l.mu.Lock()
	if d.Chunk < 0 {
		l.held = inventory.NewBitmap(chunks.Count(l.size, l.chunkSize))
	} else {
		l.held.Clear(d.Chunk)
	}
	l.complete = false
	path := l.path
	l.mu.Unlock()
	l.publish()
	// The next start must hash the file again, not trust the record of its verification.
	if sc, ok := readSidecar(path + ".json"); ok && sc.Verified != nil {
		sc.Verified = nil
		if err := writeSidecar(path+".json", sc); err != nil {
			l.store.o.log.Warn("forget that the damaged ISO was verified", "path", path, "err", err)
		}
	}
	if f := l.store.o.onDamage; f != nil {
		f(l.sha512, d)
	}
}

// File returns the open file holding the bytes; the caller must not close it and must read only
// held ranges.
func (l *LocalISO) File() *os.File {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.f
}

// Open returns a handle of its own on the file the bytes are in, for reading, with a file
// position of its own: a server that sends with sendfile moves the position, which concurrent
// requests must not share. The caller closes it. It returns an error when the file at Path is no
// longer the one held (moved into place or removed meanwhile): the caller then reads File.
func (l *LocalISO) Open() (*os.File, error) {
	l.mu.RLock()
	path, held := l.path, l.f
	l.mu.RUnlock()
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open ISO again: %w", err)
	}
	if same, _ := sameFile(f, held); !same {
		f.Close()
		return nil, fmt.Errorf("open ISO again: %s is no longer the file held", path)
	}
	return f, nil
}

func (l *LocalISO) publish() {
	l.mu.RLock()
	iso := inventory.ISO{SHA512: l.sha512, Size: l.size, ChunkSize: l.chunkSize, Complete: l.complete, Chunks: l.held.Clone()}
	l.mu.RUnlock()
	if l.store.dir != nil {
		// The fields are validated when the LocalISO is made; an error here is a bug.
		_ = l.store.dir.SetISO(iso)
	}
}

// WriteChunk stores chunk c, whose bytes the caller verified and whose digest is sum, records it
// beside the partial download (so that a restart resumes with it) and publishes it. Only the
// Fetcher filling this download calls it. An error means the disk refused the bytes or the record.
func (l *LocalISO) WriteChunk(c int, data []byte, sum chunks.Digest) error {
	if _, err := l.f.WriteAt(data, int64(c)*l.chunkSize); err != nil {
		return fmt.Errorf("write chunk %d of %s: %w", c, l.path, err)
	}
	// Start writing the chunk back to disk without waiting, so that the fsync before the verified
	// ISO is moved into place finds little left to write; errors are left to that fsync.
	_ = unix.SyncFileRange(int(l.f.Fd()), int64(c)*l.chunkSize, int64(len(data)), unix.SYNC_FILE_RANGE_WRITE)
	l.mu.Lock()
	l.held.Set(c)
	l.digests[c] = sum
	old := l.remember(c)
	l.unsaved += int64(len(data))
	due := l.unsaved >= saveBytes || time.Since(l.savedAt) >= saveEvery
	if due {
		l.unsaved, l.savedAt = 0, time.Now()
	}
	l.mu.Unlock()
	l.drop(old)
	if due {
		if err := l.SaveState(); err != nil {
			return err
		}
	}
	l.publish()
	return nil
}

// Flush writes the record of the chunks held when WriteChunk left chunks out of it, unless the
// ISO is complete or closed. The Fetcher calls it when a Fetch ends, whatever ended it.
func (l *LocalISO) Flush() error {
	l.mu.Lock()
	unsaved := l.unsaved > 0 && !l.complete
	l.unsaved = 0
	l.mu.Unlock()
	if !unsaved {
		return nil
	}
	return l.SaveState()
}

// DropChunk forgets chunk c, found bad after it was stored, and publishes that it is no longer
// held. SaveState records it for a restart.
func (l *LocalISO) DropChunk(c int) {
	l.mu.Lock()
	l.held.Clear(c)
	l.mu.Unlock()
	l.publish()
}

// SaveState records beside the partial download the digests of the chunks held, so that a restart
// resumes with them.
func (l *LocalISO) SaveState() error {
	return writeSidecar(l.Path()+".json", sidecar{SHA512: l.sha512, Size: l.size, ChunkSize: l.chunkSize,
		Digest: chunks.Algorithm, Digests: l.ChunkDigests()})
}

// saveVerified records beside a complete ISO, just verified, the digests of its chunks and the
// Stamp of its file.
func (l *LocalISO) saveVerified() error {
	st, err := l.File().Stat()
	if err != nil {
		return fmt.Errorf("record verified ISO: %w", err)
	}
	stamp := chunks.StampOf(st)
	return writeSidecar(l.Path()+".json", sidecar{SHA512: l.sha512, Size: l.size, ChunkSize: l.chunkSize,
		Digest: chunks.Algorithm, Digests: l.ChunkDigests(), Verified: &stamp})
}

// Finish marks the ISO complete once the caller verified its sha512, syncs it, moves it to its
// final path with the record of its verification beside it, and publishes it as complete.
func (l *LocalISO) Finish(final string) error {
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", l.path, err)
	}
	if err := os.Rename(l.path, final); err != nil {
		return fmt.Errorf("move verified ISO into place: %w", err)
	}
	partial := l.path
	l.mu.Lock()
	l.path = final
	l.complete = true
	l.mu.Unlock()
	// The chunk digests stay beside the verified ISO with the file's Stamp, so that an unchanged
	// copy is not hashed at the next start and a changed one is named chunk by chunk; Remove
	// deletes them with the ISO.
	if err := l.saveVerified(); err != nil {
		return err
	}
	_ = os.Remove(partial + ".json")
	if err := l.guard(true); err != nil {
		return err
	}
	l.publish()
	return nil
}

// Close closes the file; the ISO stays published until RemoveISO.
func (l *LocalISO) Close() error {
	l.mu.Lock()
	l.unsaved = 0 // nothing to record of a file no longer open (or removed)
	l.mu.Unlock()
	l.directOnce.Do(func() {}) // no handle opened from now on
	if l.direct != nil {
		l.direct.Close()
	}
	return l.f.Close()
}

// sameFile reports whether a and b are handles on the same file.
func sameFile(a, b *os.File) (bool, error) {
	as, err := a.Stat()
	if err != nil {
		return false, err
	}
	bs, err := b.Stat()
	if err != nil {
		return false, err
	}
	return os.SameFile(as, bs), nil
}
