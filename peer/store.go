package peer

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/upgrade-repo/upgrade-repo/chunks"
)

// DefaultChunkSize is the chunk size of ISOs shared between peers. All nodes sharing an ISO must
// use the same one; a node adopts the chunk size its peers advertise.
const DefaultChunkSize = 4 << 20

// Store is the content this node holds and serves to its peers: ISO files, complete or being
// filled. It publishes what it holds in the directory. Safe for
// concurrent use.
type Store struct {
	dir *Directory
	o   storeOptions

	mu   sync.RWMutex
	isos map[string]*LocalISO
}

type storeOptions struct {
	log      *slog.Logger
	onDamage func(sha512 string, d *chunks.DamageError)
}

// StoreOption configures a Store.
type StoreOption func(*storeOptions)

// WithStoreLogger sets the logger that reports chunks found damaged on disk (default: discard).
func WithStoreLogger(l *slog.Logger) StoreOption { return func(o *storeOptions) { o.log = l } }

// WithOnDamage sets a function called when a chunk of a complete ISO is found damaged on disk
// (chunk -1: the file was replaced), after the chunk was withdrawn from what the node serves and
// advertises. It is called from the goroutine that found the damage and must not block.
func WithOnDamage(f func(sha512 string, d *chunks.DamageError)) StoreOption {
	return func(o *storeOptions) { o.onDamage = f }
}

// NewStore returns a store that publishes in dir.
func NewStore(dir *Directory, opts ...StoreOption) *Store {
	o := storeOptions{log: slog.New(slog.DiscardHandler)}
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
// its chunk digests and publishes it as complete. It returns ErrVerification (wrapped) when the
// sha512 differs. It writes nothing beside the file: the file is the caller's, not a cache's.
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
	if size <= 0 || numChunks(size, chunkSize) > maxChunks {
		f.Close()
		return nil, fmt.Errorf("ISO %s: size %d cannot be shared in chunks of %d bytes", path, size, chunkSize)
	}
	n := numChunks(size, chunkSize)
	digests := make([][sha256.Size]byte, n)
	whole := sha512.New()
	buf := make([]byte, chunkSize)
	for c := range n {
		m, err := io.ReadFull(io.NewSectionReader(f, int64(c)*chunkSize, chunkSize), buf)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			f.Close()
			return nil, fmt.Errorf("read ISO %s at %d: %w", path, int64(c)*chunkSize, err)
		}
		digests[c] = sha256.Sum256(buf[:m])
		whole.Write(buf[:m])
	}
	if got := hex.EncodeToString(whole.Sum(nil)); got != want {
		f.Close()
		err := fmt.Errorf("ISO %s: sha512 is %s, want %s: %w", path, got, want, ErrVerification)
		if changed := s.changedChunks(path, want, size, chunkSize, digests); changed != "" {
			err = fmt.Errorf("%w; changed since it was verified: %s", err, changed)
		}
		return nil, err
	}
	l := &LocalISO{store: s, sha512: want, size: size, chunkSize: chunkSize, path: path, f: f,
		held: NewBitmap(n), digests: digests, complete: true}
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

// openCached publishes the verified ISO of a cache at path. When the record kept beside it says
// that this very file (same size, times and inode) was verified with sha512 want in chunks of
// chunkSize, it is not hashed again (reused true): its chunks are checked against the recorded
// digests as they are first served. Otherwise it is hashed as AddComplete does, and the record
// written anew.
func (s *Store) openCached(path, want string, chunkSize int64) (l *LocalISO, reused bool, err error) {
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
	if !ok || sc.Verified == nil || sc.SHA512 != want || sc.ChunkSize != chunkSize {
		return nil, nil
	}
	sums, err := chunks.ParseHex(sc.Size, sc.ChunkSize, sc.Digests)
	if err != nil || numChunks(sc.Size, chunkSize) > maxChunks {
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
	n := numChunks(sc.Size, chunkSize)
	l := &LocalISO{store: s, sha512: want, size: sc.Size, chunkSize: chunkSize, path: path, f: f,
		held: NewBitmap(n), digests: sums.Digests, complete: true}
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

// salvage turns the cached ISO at path, which no longer matches its sha512, into a partial download
// that keeps every chunk still matching the digest recorded when the file was verified: the next
// fetch takes only the changed chunks again. It reports false, and changes nothing, when no such
// record is kept.
func (s *Store) salvage(path, sha512 string) (bool, error) {
	sc, ok := readSidecar(path + ".json")
	if !ok || sc.SHA512 != sha512 || sc.ChunkSize <= 0 || len(sc.Digests) != numChunks(sc.Size, sc.ChunkSize) {
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
	held     Bitmap
	digests  [][sha256.Size]byte
	complete bool
	// verifier checks the chunks of a complete ISO again before they are served; nil until then.
	verifier *chunks.Verifier
}

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
	for c := range numChunks(l.size, l.chunkSize) {
		if l.held.Has(c) {
			n += l.chunkLen(c)
		}
	}
	return n
}

func (l *LocalISO) chunkLen(c int) int64 {
	off := int64(c) * l.chunkSize
	return min(l.chunkSize, l.size-off)
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

// ChunkDigests returns the hex sha256 of every chunk, "" for the chunks not held.
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
		l.held = NewBitmap(numChunks(l.size, l.chunkSize))
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

func (l *LocalISO) publish() {
	l.mu.RLock()
	iso := ISO{SHA512: l.sha512, Size: l.size, ChunkSize: l.chunkSize, Complete: l.complete, Chunks: l.held.Clone()}
	l.mu.RUnlock()
	if l.store.dir != nil {
		// The fields are validated when the LocalISO is made; an error here is a bug.
		_ = l.store.dir.SetISO(iso)
	}
}

// changedChunks compares the chunk digests of the ISO at path with those recorded beside it when it
// was verified, logs each chunk that differs and returns them for an error message ("" when no
// record fits).
func (s *Store) changedChunks(path, sha512 string, size, chunkSize int64, now [][sha256.Size]byte) string {
	sc, ok := readSidecar(path + ".json")
	if !ok || sc.SHA512 != sha512 || sc.Size != size || sc.ChunkSize != chunkSize || len(sc.Digests) != len(now) {
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

// sidecar is the record kept beside an ISO file. Beside a partial download (<path>.partial.json)
// it holds the digests of the chunks held, so that a restart resumes. Beside a verified ISO
// (<path>.json) it holds the digests of every chunk and the Stamp of the file as it was verified,
// so that an unchanged file is not hashed again at the next start, and a changed one is named
// chunk by chunk and keeps its intact chunks.
type sidecar struct {
	SHA512    string   `json:"sha512"`
	Size      int64    `json:"size"`
	ChunkSize int64    `json:"chunkSize"`
	Digests   []string `json:"digests"`
	// Verified is the Stamp of the file whose sha512 was verified: absent beside a partial
	// download, and removed once a chunk of the file is found damaged.
	Verified *chunks.Stamp `json:"verified,omitempty"`
}

// readSidecar reads the record at p; false when there is none or it cannot be read.
func readSidecar(p string) (sidecar, bool) {
	var sc sidecar
	b, err := os.ReadFile(p)
	if err != nil || json.Unmarshal(b, &sc) != nil {
		return sidecar{}, false
	}
	return sc, true
}

// writeSidecar replaces the record at p, atomically.
func writeSidecar(p string, sc sidecar) error {
	b, err := json.Marshal(sc)
	if err != nil {
		return fmt.Errorf("encode download state: %w", err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("save download state: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("save download state: %w", err)
	}
	return nil
}

// openPartial opens (or creates) the partial download of an ISO at path+".partial". Chunks that a
// previous run recorded are checked against their digests again; the ones that differ are dropped.
func (s *Store) openPartial(path, sha512 string, size, chunkSize int64) (*LocalISO, error) {
	n := numChunks(size, chunkSize)
	if n == 0 || n > maxChunks {
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
	l := &LocalISO{store: s, sha512: sha512, size: size, chunkSize: chunkSize, path: ppath, f: f,
		held: NewBitmap(n), digests: make([][sha256.Size]byte, n)}
	if sc, ok := readSidecar(ppath + ".json"); ok &&
		sc.SHA512 == sha512 && sc.Size == size && sc.ChunkSize == chunkSize && len(sc.Digests) == n {
		buf := make([]byte, chunkSize)
		for c, d := range sc.Digests {
			if d == "" {
				continue
			}
			m := l.chunkLen(c)
			if _, err := f.ReadAt(buf[:m], int64(c)*chunkSize); err != nil {
				continue
			}
			sum := sha256.Sum256(buf[:m])
			if hex.EncodeToString(sum[:]) == d {
				l.held.Set(c)
				l.digests[c] = sum
			}
		}
	}
	s.add(l)
	return l, nil
}

// writeChunk stores a verified chunk and publishes it.
func (l *LocalISO) writeChunk(c int, data []byte, sum [sha256.Size]byte) error {
	if _, err := l.f.WriteAt(data, int64(c)*l.chunkSize); err != nil {
		return fmt.Errorf("write chunk %d of %s: %w", c, l.path, err)
	}
	// Start writing the chunk back to disk without waiting, so that the fsync before the verified
	// ISO is moved into place finds little left to write; errors are left to that fsync.
	_ = unix.SyncFileRange(int(l.f.Fd()), int64(c)*l.chunkSize, int64(len(data)), unix.SYNC_FILE_RANGE_WRITE)
	l.mu.Lock()
	l.held.Set(c)
	l.digests[c] = sum
	l.mu.Unlock()
	if err := l.saveSidecar(); err != nil {
		return err
	}
	l.publish()
	return nil
}

// dropChunk forgets a chunk found bad after it was stored.
func (l *LocalISO) dropChunk(c int) {
	l.mu.Lock()
	l.held.Clear(c)
	l.mu.Unlock()
	l.publish()
}

func (l *LocalISO) saveSidecar() error {
	return writeSidecar(l.Path()+".json", sidecar{SHA512: l.sha512, Size: l.size, ChunkSize: l.chunkSize, Digests: l.ChunkDigests()})
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
		Digests: l.ChunkDigests(), Verified: &stamp})
}

// finish marks the ISO complete after its sha512 was verified and moves it to its final path.
func (l *LocalISO) finish(final string) error {
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
func (l *LocalISO) Close() error { return l.f.Close() }
