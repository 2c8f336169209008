package iso_test

import (
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
)

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.ReaderAt
	n atomic.Int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

// TestOpenReadsOnlyMetadata checks that Open reads the descriptors and directories, not the
// files: the bytes it reads do not grow with the size of the files in the image.
func TestOpenReadsOnlyMetadata(t *testing.T) {
	t.Parallel()
	isotest.RequireXorriso(t)
	read := map[int64]int64{}
	for _, size := range []int64{1 << 10, 32 << 20} {
		src := t.TempDir()
		writeFixture(t, src, false)
		f, err := os.Create(filepath.Join(src, "big.bin"))
		require.NoError(t, err)
		require.NoError(t, aesStream(f, size, 1))
		require.NoError(t, f.Close())
		image := isotest.Build(t, src)
		img, err := os.Open(image)
		require.NoError(t, err)
		st, err := img.Stat()
		require.NoError(t, err)
		c := &countingReader{r: img}
		fsys, err := iso.Open(c, st.Size())
		require.NoError(t, err)
		require.NoError(t, img.Close())
		require.Positive(t, fsys.Entries())
		read[size] = c.n.Load()
		require.Less(t, c.n.Load(), int64(128<<10), "open read %d bytes of a %d-byte image", c.n.Load(), st.Size())
	}
	require.Equal(t, read[1<<10], read[32<<20], "bytes read by Open for a 1 KiB and a 32 MiB file")
}
