package peer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

// FetchBlob copies the blob with the given digest from the first peer that holds it and sends
// bytes matching the digest. The bytes are spooled to a temporary file in dir and verified before
// anything is written to w, so w never sees unverified bytes. It returns an error wrapping
// ErrNotFound when no live peer could give the blob; the caller then asks the Service or the
// origin registry.
func (f *Fetcher) FetchBlob(ctx context.Context, digest, dir string, w io.Writer) (int64, error) {
	if !ValidBlobDigest(digest) {
		return 0, fmt.Errorf("fetch blob %q: not a sha256 digest", digest)
	}
	addrs := map[string]string{}
	for _, m := range f.members.Members() {
		addrs[m.Name] = m.Addr
	}
	for _, holder := range f.dir.BlobHolders(digest) {
		addr, live := addrs[holder]
		if !live || f.avoided(holder) {
			continue
		}
		n, err := f.blobFrom(ctx, holder, addr, digest, dir, w)
		if err == nil {
			f.o.metrics.fetched("peer", n)
			return n, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		f.log.Debug("blob from peer failed", "peer", holder, "digest", digest, "err", err)
	}
	return 0, fmt.Errorf("fetch blob %s: no peer gave it: %w", digest, ErrNotFound)
}

func (f *Fetcher) blobFrom(ctx context.Context, holder, addr, digest, dir string, w io.Writer) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v2/peer/blobs/"+digest, nil)
	if err != nil {
		return 0, err
	}
	f.authorize(req)
	resp, err := f.o.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET blob from %s: status %s", holder, resp.Status)
	}
	tmp, err := os.CreateTemp(dir, "blob-*")
	if err != nil {
		return 0, fmt.Errorf("spool blob: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), resp.Body)
	if err != nil {
		return 0, fmt.Errorf("GET blob from %s: %w", holder, err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != digest {
		f.o.metrics.failed("blob")
		f.avoid(holder)
		f.log.Warn("peer sent a bad blob, avoiding it", "peer", holder, "digest", digest, "got", got)
		return 0, fmt.Errorf("blob from %s is %s: %w", holder, got, ErrVerification)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return 0, fmt.Errorf("spool blob: %w", err)
	}
	if _, err := io.Copy(w, tmp); err != nil {
		return 0, fmt.Errorf("write blob: %w", err)
	}
	return n, nil
}

// avoidList is the set of peers a Fetcher avoids for blobs, until a deadline each.
type avoidList struct {
	mu    sync.Mutex
	until map[string]time.Time
}

func (f *Fetcher) avoid(peer string) {
	f.blobAvoid.mu.Lock()
	defer f.blobAvoid.mu.Unlock()
	if f.blobAvoid.until == nil {
		f.blobAvoid.until = map[string]time.Time{}
	}
	f.blobAvoid.until[peer] = time.Now().Add(f.o.avoidFor)
}

func (f *Fetcher) avoided(peer string) bool {
	f.blobAvoid.mu.Lock()
	defer f.blobAvoid.mu.Unlock()
	return time.Now().Before(f.blobAvoid.until[peer])
}

// ListedBlobs is a BlobStore that serves, from another BlobStore, only the digests listed with
// Set: what a node may share (the blobs of the release's images), not everything its image store
// holds. Safe for concurrent use.
type ListedBlobs struct {
	store BlobStore

	mu     sync.RWMutex
	listed map[string]struct{}
}

var _ BlobStore = (*ListedBlobs)(nil)

// NewListedBlobs returns a ListedBlobs over store that lists nothing yet.
func NewListedBlobs(store BlobStore) *ListedBlobs {
	return &ListedBlobs{store: store, listed: map[string]struct{}{}}
}

// Set replaces the list of digests served and returns the digests that were listed before and no
// longer are.
func (l *ListedBlobs) Set(digests []string) (dropped []string) {
	next := make(map[string]struct{}, len(digests))
	for _, d := range digests {
		next[d] = struct{}{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for d := range l.listed {
		if _, ok := next[d]; !ok {
			dropped = append(dropped, d)
		}
	}
	l.listed = next
	return dropped
}

// Open implements BlobStore: a digest not listed is ErrNotFound, whatever the store holds.
func (l *ListedBlobs) Open(ctx context.Context, digest string) (io.ReadSeekCloser, int64, error) {
	l.mu.RLock()
	_, ok := l.listed[digest]
	l.mu.RUnlock()
	if !ok {
		return nil, 0, fmt.Errorf("blob %s is not one this node shares: %w", digest, ErrNotFound)
	}
	return l.store.Open(ctx, digest)
}

// MemBlobs is a BlobStore held in memory, for small nodes and tests. Safe for concurrent use.
type MemBlobs struct {
	mu    sync.RWMutex
	blobs map[string][]byte
}

var _ BlobStore = (*MemBlobs)(nil)

// Put stores b under its sha256 digest and returns the digest.
func (m *MemBlobs) Put(b []byte) string {
	s := sha256.Sum256(b)
	d := "sha256:" + hex.EncodeToString(s[:])
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.blobs == nil {
		m.blobs = map[string][]byte{}
	}
	m.blobs[d] = bytes.Clone(b)
	return d
}

// Set stores b under digest d as given, without checking it: a store whose content went bad.
func (m *MemBlobs) Set(d string, b []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.blobs == nil {
		m.blobs = map[string][]byte{}
	}
	m.blobs[d] = bytes.Clone(b)
}

// Open implements BlobStore.
func (m *MemBlobs) Open(_ context.Context, digest string) (io.ReadSeekCloser, int64, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	b, ok := m.blobs[digest]
	if !ok {
		return nil, 0, fmt.Errorf("blob %s: %w", digest, ErrNotFound)
	}
	return nopCloser{bytes.NewReader(b)}, int64(len(b)), nil
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
