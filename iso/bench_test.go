package iso_test

import (
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
)

// BenchmarkOpen20000 opens and indexes an image of 20,000 entries (200 directories of 99 files,
// Rock Ridge names, Joliet tree) from a file in the page cache.
func BenchmarkOpen20000(b *testing.B) {
	src := b.TempDir()
	for d := range 200 {
		dir := filepath.Join(src, fmt.Sprintf("images-directory-%03d", d))
		require.NoError(b, os.Mkdir(dir, 0o755))
		for f := range 99 {
			name := filepath.Join(dir, fmt.Sprintf("rke2-images.linux-amd64-v1.32.%d-%02d.txt", d, f))
			require.NoError(b, os.WriteFile(name, []byte{byte(f)}, 0o644))
		}
	}
	f, size := openFile(b, isotest.Build(b, src))
	b.ReportAllocs()
	for b.Loop() {
		fsys, err := iso.Open(f, size)
		if err != nil {
			b.Fatal(err)
		}
		if fsys.Entries() != 20000 {
			b.Fatalf("%d entries, want 20000", fsys.Entries())
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/20000, "ns/entry")
}

// aesStream writes n bytes of a non-repeating AES-CTR stream to w.
func aesStream(w io.Writer, n int64, seed byte) error {
	key := make([]byte, 16)
	key[0] = seed
	block, err := aes.NewCipher(key)
	if err != nil {
		return err
	}
	ctr := cipher.NewCTR(block, make([]byte, aes.BlockSize))
	buf := make([]byte, 1<<20)
	for n > 0 {
		chunk := buf[:min(int64(len(buf)), n)]
		clear(chunk)
		ctr.XORKeyStream(chunk, chunk)
		if _, err := w.Write(chunk); err != nil {
			return err
		}
		n -= int64(len(chunk))
	}
	return nil
}

// BenchmarkReadLarge reads a 256 MiB file through the reader and the same file on disk, with the
// same 1 MiB buffer; the ratio of the two throughputs is the cost of the reader.
func BenchmarkReadLarge(b *testing.B) {
	const size = 256 << 20
	src := b.TempDir()
	onDisk := filepath.Join(src, "large.bin")
	out, err := os.Create(onDisk)
	require.NoError(b, err)
	require.NoError(b, aesStream(out, size, 7))
	require.NoError(b, out.Close())
	fsys := openImage(b, isotest.Build(b, src))
	buf := make([]byte, 1<<20)
	read := func(b *testing.B, open func() (io.ReadCloser, error)) {
		b.SetBytes(size)
		for b.Loop() {
			r, err := open()
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{r}, buf)
			r.Close()
			if err != nil || n != size {
				b.Fatalf("read %d bytes: %v", n, err)
			}
		}
	}
	b.Run("iso", func(b *testing.B) {
		read(b, func() (io.ReadCloser, error) { return fsys.Open("large.bin") })
	})
	b.Run("disk", func(b *testing.B) {
		read(b, func() (io.ReadCloser, error) { return os.Open(onDisk) })
	})
}
