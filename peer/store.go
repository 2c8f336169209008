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
// sha512 differs.
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
	if err := l.guard(); err != nil {
		f.Close()
		return nil, err
	}
	s.add(l)
	return l, nil
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

// guard makes the Verifier of a complete ISO whose chunks were all just verified.
func (l *LocalISO) guard() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	sums := chunks.Sums{Size: l.size, ChunkSize: l.chunkSize, Digests: l.digests}
	v, err := chunks.NewVerifier(l.f, l.path, sums, chunks.WithVerified(), chunks.WithLogger(l.store.o.log),
		chunks.WithOnDamage(l.damaged))
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
	l.mu.Unlock()
	l.publish()
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
	var sc sidecar
	b, err := os.ReadFile(path + ".json")
	if err != nil || json.Unmarshal(b, &sc) != nil || sc.SHA512 != sha512 || sc.Size != size ||
		sc.ChunkSize != chunkSize || len(sc.Digests) != len(now) {
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

// sidecar is the state of a partial download kept beside it, so that a restart resumes.
type sidecar struct {
	SHA512    string   `json:"sha512"`
	Size      int64    `json:"size"`
	ChunkSize int64    `json:"chunkSize"`
	Digests   []string `json:"digests"`
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
	var sc sidecar
	if b, err := os.ReadFile(ppath + ".json"); err == nil && json.Unmarshal(b, &sc) == nil &&
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
	sc := sidecar{SHA512: l.sha512, Size: l.size, ChunkSize: l.chunkSize}
	sc.Digests = l.ChunkDigests()
	b, err := json.Marshal(sc)
	if err != nil {
		return fmt.Errorf("encode download state: %w", err)
	}
	tmp := l.path + ".json.tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("save download state: %w", err)
	}
	if err := os.Rename(tmp, l.path+".json"); err != nil {
		return fmt.Errorf("save download state: %w", err)
	}
	return nil
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
	// The chunk digests stay beside the verified ISO, so that a copy found changed at the next
	// start is named chunk by chunk; Remove deletes them with the ISO.
	if err := l.saveSidecar(); err != nil {
		return err
	}
	_ = os.Remove(partial + ".json")
	if err := l.guard(); err != nil {
		return err
	}
	l.publish()
	return nil
}

// Close closes the file; the ISO stays published until RemoveISO.
func (l *LocalISO) Close() error { return l.f.Close() }
