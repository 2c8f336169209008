package chunks_test

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/chunks"
)

const testChunk = 64 << 10

func randomFile(t *testing.T, size int) (string, []byte) {
	t.Helper()
	data := make([]byte, size)
	_, err := rand.Read(data)
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "release.iso")
	require.NoError(t, os.WriteFile(p, data, 0o644))
	waitTick(t, p)
	return p, data
}

// waitTick returns once a change made now gives a file another change time than path has: file
// times move in clock ticks of a few milliseconds, and a change within the tick that wrote path
// could not be told apart from it.
func waitTick(t *testing.T, path string) {
	t.Helper()
	ctime := func(p string) int64 {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		return fi.Sys().(*syscall.Stat_t).Ctim.Nano()
	}
	was := ctime(path)
	probe := path + ".tick"
	for {
		require.NoError(t, os.WriteFile(probe, nil, 0o644))
		if ctime(probe) != was {
			require.NoError(t, os.Remove(probe))
			return
		}
	}
}

func sumsOf(data []byte) chunks.Sums {
	h := chunks.NewHasher(testChunk)
	// Odd-sized writes, so that chunk boundaries fall inside them.
	for b := data; len(b) > 0; {
		k := min(len(b), 12345)
		_, _ = h.Write(b[:k])
		b = b[k:]
	}
	return h.Sums()
}

func TestHasher(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		size int
	}{
		{name: "short last chunk", size: 3*testChunk + 17},
		{name: "exact chunks", size: 2 * testChunk},
		{name: "one byte", size: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, data := randomFile(t, tc.size)
			s := sumsOf(data)
			require.EqualValues(t, tc.size, s.Size)
			require.Len(t, s.Digests, chunks.Count(int64(tc.size), testChunk))
			for c := range s.Digests {
				end := min(len(data), (c+1)*testChunk)
				require.Equal(t, chunks.Sum(data[c*testChunk:end]), s.Digests[c], "chunk %d", c)
			}
			back, err := chunks.ParseHex(s.Size, s.ChunkSize, s.Hex())
			require.NoError(t, err)
			require.Equal(t, s, back)
			require.Empty(t, s.Differ(back))
		})
	}
	_, err := chunks.ParseHex(10, testChunk, []string{"zz"})
	require.Error(t, err)
	_, err = chunks.ParseHex(2*testChunk, testChunk, []string{"00"})
	require.Error(t, err)
}

// corrupt changes four bytes of the file at off and puts its modification time back.
func corrupt(t *testing.T, path string, off int64) {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{1, 2, 3, 4}, off)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.Chtimes(path, st.ModTime(), st.ModTime()))
}

// A damaged chunk is refused and named, whether the bytes went bad before the Verifier was made
// (rot found when first served) or while it was in use (a change on disk, even with the
// modification time put back); the other chunks are still served, and a file replaced under its
// path is refused altogether.
func TestVerifier(t *testing.T) {
	t.Parallel()
	const size = 4*testChunk + 100
	bad := int64(2*testChunk + 10)
	tests := []struct {
		name string
		// before damages the file before the Verifier is made, after while it is in use.
		before, after func(t *testing.T, path string)
		verified      bool
		wantChunk     int
	}{
		{name: "intact", wantChunk: -2},
		{name: "intact, verified at start", verified: true, wantChunk: -2},
		{name: "rot before start", before: func(t *testing.T, p string) { corrupt(t, p, bad) }, wantChunk: 2},
		{name: "changed while served", verified: true, after: func(t *testing.T, p string) { corrupt(t, p, bad) }, wantChunk: 2},
		{name: "replaced while served", verified: true, wantChunk: 0, after: func(t *testing.T, p string) {
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			require.NoError(t, os.Remove(p))
			require.NoError(t, os.WriteFile(p, b, 0o644))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path, data := randomFile(t, size)
			sums := sumsOf(data)
			if tc.before != nil {
				tc.before(t, path)
			}
			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()
			var mu sync.Mutex
			var reported []int
			opts := []chunks.Option{chunks.WithOnDamage(func(d *chunks.DamageError) {
				mu.Lock()
				defer mu.Unlock()
				reported = append(reported, d.Chunk)
			})}
			if tc.verified {
				opts = append(opts, chunks.WithVerified())
			}
			v, err := chunks.NewVerifier(f, path, sums, opts...)
			require.NoError(t, err)
			require.NoError(t, v.Check(0, testChunk), "a good chunk is served before anything changed")
			if tc.after != nil {
				tc.after(t, path)
			}
			err = v.Check(bad-5, 10)
			buf := make([]byte, 10)
			_, rerr := v.ReadAt(buf, bad-5)
			if tc.wantChunk == -2 {
				require.NoError(t, err)
				require.NoError(t, rerr)
				require.Equal(t, data[bad-5:bad+5], buf)
				require.NoError(t, v.Check(0, size))
				require.Empty(t, v.Damaged())
				return
			}
			var d *chunks.DamageError
			require.ErrorAs(t, err, &d)
			require.ErrorIs(t, err, chunks.ErrDamaged)
			require.ErrorIs(t, rerr, chunks.ErrDamaged)
			if tc.wantChunk == 2 {
				require.Equal(t, 2, d.Chunk)
				require.EqualValues(t, 2*testChunk, d.Offset)
				require.Contains(t, d.Error(), "chunk 2 (bytes 131072-196607)")
				require.NoError(t, v.Check(0, testChunk), "the other chunks are still served")
				require.NoError(t, v.Check(3*testChunk, size-3*testChunk))
				require.ErrorIs(t, v.Check(0, size), chunks.ErrDamaged)
			} else {
				require.ErrorIs(t, v.Check(0, testChunk), chunks.ErrDamaged, "a replaced file is refused altogether")
			}
			mu.Lock()
			require.Len(t, reported, 1, "each damage is reported once")
			mu.Unlock()
			require.Len(t, v.Damaged(), 1)
		})
	}
}

// Chunks repaired in place (the file changes again) are served again once they match.
func TestVerifierServesARepairedChunk(t *testing.T) {
	t.Parallel()
	path, data := randomFile(t, 2*testChunk)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	v, err := chunks.NewVerifier(f, path, sumsOf(data), chunks.WithVerified())
	require.NoError(t, err)
	corrupt(t, path, testChunk+1)
	require.ErrorIs(t, v.Check(testChunk, 1), chunks.ErrDamaged)
	waitTick(t, path)
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = w.WriteAt(data[testChunk:], testChunk)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, v.Check(testChunk, 1), "the repaired chunk is served again")
	got := make([]byte, testChunk)
	_, err = v.ReadAt(got, testChunk)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data[testChunk:], got))
	require.NoError(t, v.Check(0, 2*testChunk))
}
