package pagecache_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/internal/pagecache"
)

// count returns how many of f's first size bytes' pages are cached.
func count(t *testing.T, f *os.File, size int64) int {
	t.Helper()
	res, err := pagecache.Resident(f, size)
	require.NoError(t, err)
	n := 0
	for _, r := range res {
		if r {
			n++
		}
	}
	return n
}

func TestDropWritten(t *testing.T) {
	dir := t.TempDir()
	if !pagecache.Droppable(dir) {
		t.Skipf("%s keeps its pages (tmpfs): nothing to drop", dir)
	}
	// Ranges of whole MiB: the kernel caches a file in folios of up to 2 MiB, aligned, and drops
	// whole folios only.
	page := int64(os.Getpagesize())
	const mib = 1 << 20
	pages := int(8 * mib / page)
	perMiB := int(mib / page)
	tests := []struct {
		name      string
		off, n    int64
		sync      bool // DropWritten, else fsync and Drop
		wantAfter int
	}{
		{name: "written pages dropped once on disk", off: 0, n: 8 * mib, sync: true, wantAfter: 0},
		{name: "a range of them", off: 2 * mib, n: 4 * mib, sync: true, wantAfter: pages - 4*perMiB},
		{name: "to the end", off: 6 * mib, n: 0, sync: true, wantAfter: 6 * perMiB},
		{name: "clean pages dropped without waiting", off: 0, n: 2 * mib, sync: false, wantAfter: pages - 2*perMiB},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.Create(filepath.Join(dir, tc.name))
			require.NoError(t, err)
			defer f.Close()
			data := make([]byte, 8*mib)
			for i := range data {
				data[i] = byte(i)
			}
			_, err = f.Write(data)
			require.NoError(t, err)
			require.Equal(t, pages, count(t, f, 8*mib))
			if tc.sync {
				pagecache.DropWritten(f, tc.off, tc.n)
			} else {
				require.NoError(t, f.Sync())
				pagecache.Drop(f, tc.off, tc.n)
			}
			require.Equal(t, tc.wantAfter, count(t, f, 8*mib))
			// Nothing is lost.
			got, err := os.ReadFile(f.Name())
			require.NoError(t, err)
			require.Equal(t, data, got)
		})
	}
}

func TestDroppable(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err == nil {
		require.False(t, pagecache.Droppable("/dev/shm"), "/dev/shm is tmpfs")
	}
	require.False(t, pagecache.Droppable(filepath.Join(t.TempDir(), "missing")))
}
