package cache

import (
	"cmp"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/upgrade-repo/upgrade-repo/chunks"
	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
)

// DefaultChunkSize is the chunk size of ISOs shared between peers. All nodes sharing an ISO must
// use the same one; a node adopts the chunk size its peers advertise.
const DefaultChunkSize = 4 << 20

// Store is the content this node holds and serves to its peers: ISO files, complete or being
// filled. It publishes what it holds in the directory. Safe for concurrent use.
type Store struct {
	dir *inventory.Directory
	o   storeOptions

	mu   sync.RWMutex
	isos map[string]*LocalISO
}

type storeOptions struct {
	log      *slog.Logger
	onDamage func(sha512 string, d *chunks.DamageError)
	window   int64
}

// Option configures a Store.
type Option func(*storeOptions)

// WithLogger sets the logger that reports chunks found damaged on disk (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *storeOptions) { o.log = l } }

// WithOnDamage sets a function called when a chunk of a complete ISO is found damaged on disk
// (chunk -1: the file was replaced), after the chunk was withdrawn from what the node serves and
// advertises. It is called from the goroutine that found the damage and must not block.
func WithOnDamage(f func(sha512 string, d *chunks.DamageError)) Option {
	return func(o *storeOptions) { o.onDamage = f }
}

// WithCacheWindow sets how many bytes of a download, the chunks written last, stay in the
// kernel's page cache (DefaultCacheWindow by default); the pages of the other chunks are dropped
// once they are on disk and once they were read (see LocalISO.Release). Zero or less leaves the
// page cache to the kernel.
func WithCacheWindow(bytes int64) Option { return func(o *storeOptions) { o.window = bytes } }

// NewStore returns a store that publishes in dir.
func NewStore(dir *inventory.Directory, opts ...Option) *Store {
	o := storeOptions{log: slog.New(slog.DiscardHandler), window: DefaultCacheWindow}
	for _, opt := range opts {
		opt(&o)
	}
	return &Store{dir: dir, o: o, isos: map[string]*LocalISO{}}
}

// ISO returns the local ISO with the given sha512, if any.
func (s *Store) ISO(sha512 string) (*LocalISO, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.isos[sha512]
	return l, ok
}

func (s *Store) add(l *LocalISO) {
	s.mu.Lock()
	s.isos[l.sha512] = l
	s.mu.Unlock()
	l.publish()
}

// AddComplete opens the ISO file at path, checks that its sha512 is want (a hex digest), computes
// its chunk digests and publishes it as complete. It returns peer.ErrVerification (wrapped) when the
// sha512 differs. With want empty, the file is taken as it is and published under the sha512
// computed in the same pass as the chunk digests (a local ISO given without a checksum is read
// once). It writes nothing beside the file: the file is the caller's, not a cache's.
func (s *Store) AddComplete(path, want string, chunkSize int64) (*LocalISO, error) {
	if chunkSize <= 0 {
		chunkSize = DefaultChunkSize
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open ISO: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat ISO %s: %w", path, err)
	}
	size := st.Size()
	if size <= 0 || chunks.Count(size, chunkSize) > inventory.MaxChunks {
		f.Close()
		return nil, fmt.Errorf("ISO %s: size %d cannot be shared in chunks of %d bytes", path, size, chunkSize)
	}
	n := chunks.Count(size, chunkSize)
	// One pass: the sha512 of the whole and the digests of its chunks.
	whole, parts := sha512.New(), chunks.NewHasher(chunkSize)
	if got, err := io.CopyBuffer(io.MultiWriter(whole, parts), io.NewSectionReader(f, 0, size), make([]byte, 1<<20)); err != nil || got != size {
		f.Close()
		return nil, fmt.Errorf("read ISO %s at %d of %d: %w", path, got, size, cmp.Or(err, io.ErrUnexpectedEOF))
	}
	digests := parts.Sums().Digests
	got := hex.EncodeToString(whole.Sum(nil))
	if want == "" {
		want = got // a file given without a checksum is published under the one just computed
	}
	if got != want {
		f.Close()
		err := fmt.Errorf("ISO %s: sha512 is %s, want %s: %w", path, got, want, peer.ErrVerification)
		if changed := s.changedChunks(path, want, size, chunkSize, digests); changed != "" {
			err = fmt.Errorf("%w; changed since it was verified: %s", err, changed)
		}
		return nil, err
	}
	l := &LocalISO{store: s, sha512: want, size: size, chunkSize: chunkSize, path: path, f: f,
		held: inventory.NewBitmap(n), digests: digests, complete: true}
	for c := range n {
		l.held.Set(c)
	}
	if err := l.guard(true); err != nil {
		f.Close()
		return nil, err
	}
	s.add(l)
	return l, nil
}

// OpenCached publishes the verified ISO of a cache at path. When the record kept beside it says
// that this very file (same size, times and inode) was verified with sha512 want in chunks of
// chunkSize, it is not hashed again (reused true): its chunks are checked against the recorded
// digests as they are first served. Otherwise it is hashed as AddComplete does, and the record
// written anew.
func (s *Store) OpenCached(path, want string, chunkSize int64) (l *LocalISO, reused bool, err error) {
	if chunkSize <= 0 {
		chunkSize = DefaultChunkSize
	}
	if l, err := s.reuse(path, want, chunkSize); err != nil || l != nil {
		return l, l != nil, err
	}
	if l, err = s.AddComplete(path, want, chunkSize); err != nil {
		return nil, false, err
	}
	if err := l.saveVerified(); err != nil {
		s.o.log.Warn("record the verified ISO, it will be hashed again at the next start", "path", path, "err", err)
	}
	return l, false, nil
}

// reuse returns the ISO at path published as verified, without hashing it, when its record says
// it was verified as it is now; nil when it must be hashed.
func (s *Store) reuse(path, want string, chunkSize int64) (*LocalISO, error) {
	sc, ok := readSidecar(path + ".json")
	if !ok || !sc.current() || sc.Verified == nil || sc.SHA512 != want || sc.ChunkSize != chunkSize {
		return nil, nil
	}
	sums, err := chunks.ParseHex(sc.Size, sc.ChunkSize, sc.Digests)
	if err != nil || chunks.Count(sc.Size, chunkSize) > inventory.MaxChunks {
		return nil, nil //nolint:nilerr // a record that does not parse only means the file is hashed
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open ISO: %w", err)
	}
	st, err := f.Stat()
	if err != nil || chunks.StampOf(st) != *sc.Verified || st.Size() != sc.Size {
		f.Close()
		return nil, nil //nolint:nilerr // a file that cannot be stated is hashed, which says what fails
	}
	n := chunks.Count(sc.Size, chunkSize)
	l := &LocalISO{store: s, sha512: want, size: sc.Size, chunkSize: chunkSize, path: path, f: f,
		held: inventory.NewBitmap(n), digests: sums.Digests, complete: true}
	for c := range n {
		l.held.Set(c)
	}
	if err := l.guard(false); err != nil {
		f.Close()
		return nil, err
	}
	s.o.log.Info("reusing verified ISO, its chunks are checked as they are served", "path", path, "size", sc.Size)
	s.add(l)
	return l, nil
}

// Salvage turns the cached ISO at path, which no longer matches its sha512, into a partial download
// that keeps every chunk still matching the digest recorded when the file was verified: the next
// fetch takes only the changed chunks again. It reports false, and changes nothing, when no such
// record is kept.
func (s *Store) Salvage(path, sha512 string) (bool, error) {
	sc, ok := readSidecar(path + ".json")
	if !ok || sc.SHA512 != sha512 || sc.ChunkSize <= 0 || len(sc.Digests) != chunks.Count(sc.Size, sc.ChunkSize) {
		return false, nil
	}
	sc.Verified = nil
	partial := path + ".partial"
	if err := writeSidecar(partial+".json", sc); err != nil {
		return false, err
	}
	if err := os.Rename(path, partial); err != nil {
		return false, fmt.Errorf("keep the intact chunks of %s: %w", path, err)
	}
	_ = os.Remove(path + ".json")
	return true, nil
}

// changedChunks compares the chunk digests of the ISO at path with those recorded beside it when it
// was verified, logs each chunk that differs and returns them for an error message ("" when no
// record fits).
func (s *Store) changedChunks(path, sha512 string, size, chunkSize int64, now []chunks.Digest) string {
	sc, ok := readSidecar(path + ".json")
	if !ok || !sc.current() || sc.SHA512 != sha512 || sc.Size != size || sc.ChunkSize != chunkSize || len(sc.Digests) != len(now) {
		return ""
	}
	var out []string
	for c, d := range sc.Digests {
		if d == "" || d == hex.EncodeToString(now[c][:]) {
			continue
		}
		s.o.log.Error("cached ISO changed on disk since it was verified", "path", path, "chunk", c, "offset", int64(c)*chunkSize)
		if len(out) < 10 {
			out = append(out, fmt.Sprintf("chunk %d (offset %d)", c, int64(c)*chunkSize))
		}
	}
	return strings.Join(out, ", ")
}

// OpenPartial opens (or creates) the partial download of an ISO at path+".partial". Chunks that a
// previous run recorded are checked against their digests again; the ones that differ are dropped.
func (s *Store) OpenPartial(path, sha512 string, size, chunkSize int64) (*LocalISO, error) {
	n := chunks.Count(size, chunkSize)
	if n == 0 || n > inventory.MaxChunks {
		return nil, fmt.Errorf("ISO of %d bytes cannot be fetched in chunks of %d bytes", size, chunkSize)
	}
	ppath := path + ".partial"
	f, err := os.OpenFile(ppath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open partial ISO: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("size partial ISO %s: %w", ppath, err)
	}
	if err := reserve(f, size); err != nil {
		f.Close()
		return nil, fmt.Errorf("reserve %d bytes for partial ISO %s: %w", size, ppath, err)
	}
	l := &LocalISO{store: s, sha512: sha512, size: size, chunkSize: chunkSize, path: ppath, f: f,
		held: inventory.NewBitmap(n), digests: make([]chunks.Digest, n), window: int(s.o.window / chunkSize)}
	if sc, ok := readSidecar(ppath + ".json"); ok && (sc.current() || sc.legacySHA256()) &&
		sc.SHA512 == sha512 && sc.Size == size && sc.ChunkSize == chunkSize && len(sc.Digests) == n {
		buf := make([]byte, chunkSize)
		for c, d := range sc.Digests {
			if d == "" {
				continue
			}
			m := l.ChunkLen(c)
			if _, err := f.ReadAt(buf[:m], int64(c)*chunkSize); err != nil {
				continue
			}
			sum := chunks.Sum(buf[:m])
			recorded := sum[:]
			if sc.legacySHA256() {
				old := sha256.Sum256(buf[:m])
				recorded = old[:]
			}
			if hex.EncodeToString(recorded) == d {
				l.held.Set(c)
				l.digests[c] = sum
			}
		}
	}
	s.add(l)
	return l, nil
}

// reserve allocates the disk blocks of the file's first size bytes, keeping what it holds, so that
// a disk without room for the whole ISO says so before the first byte is fetched rather than
// after most of them. A file system that cannot reserve (EOPNOTSUPP) is left to fill as it goes.
func reserve(f *os.File, size int64) error {
	err := unix.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return nil
	}
	return err
}
