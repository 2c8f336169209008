package fetch

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/chunks"
	"github.com/upgrade-repo/upgrade-repo/peer/cache"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
)

// The read-ahead returns each chunk's bytes whether it was read ahead, read ahead and then not
// taken (the chunk came from memory), or read in turn, with a window small enough that most reads
// are direct.
func TestReadAheadReturnsEachChunk(t *testing.T) {
	t.Parallel()
	const chunk, n = 1 << 20, 6
	store := cache.NewStore(inventory.NewDirectory("self"), cache.WithCacheWindow(chunk))
	l, err := store.OpenPartial(filepath.Join(t.TempDir(), "x.iso"), "ab", n*chunk-10, chunk)
	require.NoError(t, err)
	defer l.Close()
	want := make([][]byte, n)
	for c := range n {
		want[c] = make([]byte, l.ChunkLen(c))
		for i := range want[c] {
			want[c][i] = byte(c*11 + i)
		}
		require.NoError(t, l.WriteChunk(c, want[c], chunks.Sum(want[c])))
	}
	tests := []struct {
		name  string
		steps []struct{ read, ahead int } // read chunk read (-1: none), then start ahead (-1: none)
	}{
		{name: "each read ahead", steps: []struct{ read, ahead int }{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, -1}}},
		{name: "read in turn", steps: []struct{ read, ahead int }{{0, -1}, {1, -1}, {5, -1}}},
		{name: "read ahead, not taken", steps: []struct{ read, ahead int }{{0, 1}, {2, 3}, {4, 5}, {1, -1}}},
		{name: "read ahead twice: the first stands", steps: []struct{ read, ahead int }{{-1, 2}, {-1, 3}, {2, -1}, {3, -1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ra := newReadAhead(l)
			defer ra.wait()
			for _, s := range tc.steps {
				if s.read >= 0 {
					got, err := ra.read(s.read)
					require.NoError(t, err)
					require.Equal(t, want[s.read], got, "chunk %d", s.read)
				}
				if s.ahead >= 0 {
					ra.start(s.ahead)
				}
			}
		})
	}
}
