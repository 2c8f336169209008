package cache_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/upgrade-repo/upgrade-repo/chunks"
	"github.com/upgrade-repo/upgrade-repo/internal/pagecache"
	"github.com/upgrade-repo/upgrade-repo/peer/cache"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
)

// chunksum is the digest of a chunk's bytes.
var chunksum = chunks.Sum

// cachedChunks returns which chunks of l have every page in the page cache, and which have none.
func cachedChunks(t *testing.T, l *cache.LocalISO, n int) (full, none []int) {
	t.Helper()
	res, err := pagecache.Resident(l.File(), l.Size())
	require.NoError(t, err)
	per := int(l.ChunkSize()) / os.Getpagesize()
	for c := range n {
		k := 0
		for _, r := range res[c*per : (c+1)*per] {
			if r {
				k++
			}
		}
		switch k {
		case per:
			full = append(full, c)
		case 0:
			none = append(none, c)
		}
	}
	return full, none
}

func TestCacheWindow(t *testing.T) {
	const chunk, n = 2 << 20, 6
	tests := []struct {
		name     string
		window   int64
		release  []int // chunks read back and released, in order, after all are written
		wantFull []int
		wantNone []int
	}{
		{name: "the chunks written last stay, the others are dropped", window: 2 * chunk,
			wantFull: []int{3, 5}, wantNone: []int{0, 1, 2, 4}},
		{name: "a chunk read again outside the window is dropped again", window: 2 * chunk,
			release: []int{0, 1}, wantFull: []int{3, 5}, wantNone: []int{0, 1, 2, 4}},
		{name: "a chunk in the window stays when released", window: 2 * chunk,
			release: []int{5, 3}, wantFull: []int{3, 5}, wantNone: []int{0, 1, 2, 4}},
		{name: "no window: the kernel's cache", window: 0,
			release: []int{0}, wantFull: []int{0, 1, 2, 3, 4, 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if !pagecache.Droppable(dir) {
				t.Skipf("%s keeps its pages (tmpfs): nothing to drop", dir)
			}
			store := cache.NewStore(inventory.NewDirectory("self"), cache.WithCacheWindow(tc.window))
			l, err := store.OpenPartial(filepath.Join(dir, "x.iso"), "ab", n*chunk, chunk)
			require.NoError(t, err)
			defer l.Close()
			chunks := make([][]byte, n)
			// Written out of order, as peers deliver them: the window follows the order of writing.
			for _, c := range []int{0, 2, 1, 4, 3, 5} {
				chunks[c] = make([]byte, chunk)
				for i := range chunks[c] {
					chunks[c][i] = byte(c*7 + i)
				}
				require.NoError(t, l.WriteChunk(c, chunks[c], chunksum(chunks[c])))
			}
			// Read back through a handle without read-ahead, which would cache the start of the
			// next chunk.
			rf, err := os.Open(l.Path())
			require.NoError(t, err)
			defer rf.Close()
			require.NoError(t, unix.Fadvise(int(rf.Fd()), 0, 0, unix.FADV_RANDOM))
			buf := make([]byte, chunk)
			for _, c := range tc.release {
				_, err := rf.ReadAt(buf, int64(c)*chunk)
				require.NoError(t, err)
				require.Equal(t, chunks[c], buf)
				l.Release(int64(c)*chunk, chunk)
			}
			full, none := cachedChunks(t, l, n)
			require.Equal(t, tc.wantFull, full, "chunks wholly cached")
			require.Equal(t, tc.wantNone, none, "chunks not cached at all")
			for c := range n {
				_, err := l.File().ReadAt(buf, int64(c)*chunk)
				require.NoError(t, err)
				require.Equal(t, chunks[c], buf, "chunk %d", c)
			}
		})
	}
}

func TestReadChunk(t *testing.T) {
	const chunk, n = 2 << 20, 6
	const size = n*chunk - 1000 // a short last chunk
	tests := []struct {
		name    string
		bufSize int
		offset  int // of the buffer in a larger one: 1 makes it unaligned
		wantErr string
	}{
		{name: "aligned buffer: direct reads outside the window", bufSize: chunk},
		{name: "unaligned buffer: through the page cache, dropped after", bufSize: chunk, offset: 1},
		{name: "a buffer too short", bufSize: chunk / 2, wantErr: "a buffer of 1048576 bytes for 2097152"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if !pagecache.Droppable(dir) {
				t.Skipf("%s keeps its pages (tmpfs): nothing to drop", dir)
			}
			store := cache.NewStore(inventory.NewDirectory("self"), cache.WithCacheWindow(2*chunk))
			l, err := store.OpenPartial(filepath.Join(dir, "x.iso"), "ab", size, chunk)
			require.NoError(t, err)
			defer l.Close()
			chunks := make([][]byte, n)
			for _, c := range []int{0, 2, 1, 4, 3, 5} {
				chunks[c] = make([]byte, l.ChunkLen(c))
				for i := range chunks[c] {
					chunks[c][i] = byte(c*7 + i)
				}
				require.NoError(t, l.WriteChunk(c, chunks[c], chunksum(chunks[c])))
			}
			big := make([]byte, chunk+os.Getpagesize())
			buf := big[tc.offset : tc.offset+tc.bufSize]
			for c := range n {
				got, err := l.ReadChunk(c, buf)
				if tc.wantErr != "" {
					require.ErrorContains(t, err, tc.wantErr)
					return
				}
				require.NoError(t, err)
				require.Equal(t, chunks[c], got, "chunk %d", c)
			}
			// Read-ahead may have cached the start of a chunk after one read through the cache;
			// what counts is that no chunk outside the window stays wholly cached.
			full, _ := cachedChunks(t, l, n-1)
			require.Equal(t, []int{3}, full, "chunks wholly cached (chunk 5, short, not counted)")
		})
	}
}
