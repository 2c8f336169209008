package iso_test

import (
	"bytes"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
)

// window keeps the bytes written at [from, from+len(buf)) of a stream.
type window struct {
	from, pos int64
	buf       []byte
}

func (w *window) Write(p []byte) (int, error) {
	for i := range p {
		if at := w.pos + int64(i) - w.from; at >= 0 && at < int64(len(w.buf)) {
			w.buf[at] = p[i]
		}
	}
	w.pos += int64(len(p))
	return len(p), nil
}

// TestFileOver4GiB puts a file of 4 GiB + 3 MiB + 123 bytes of non-repeating content (an AES-CTR
// stream) into an ISO level 3 image, where it takes several extents, and reads it back byte for
// byte. It writes about 9 GB to the temporary directory, so it runs only with UPGRADE_REPO_LONG=1
// (make test-long).
func TestFileOver4GiB(t *testing.T) {
	if os.Getenv("UPGRADE_REPO_LONG") == "" {
		t.Skip("writes a 4 GiB file and a 4 GiB image: set UPGRADE_REPO_LONG=1 (make test-long)")
	}
	isotest.RequireXorriso(t)
	const (
		size     = 4<<30 + 3<<20 + 123
		boundary = 4<<30 - 2048 // where xorriso ends the first extent
		seed     = 42
	)
	src := t.TempDir()
	big := filepath.Join(src, "rootfs.squashfs")
	out, err := os.Create(big)
	require.NoError(t, err)
	require.NoError(t, aesStream(out, size, seed))
	require.NoError(t, out.Close())
	require.NoError(t, os.WriteFile(filepath.Join(src, "after.txt"), []byte("after the big file\n"), 0o644))
	image := isotest.Build(t, src, "-iso-level", "3")
	require.NoError(t, os.Remove(big)) // the stream is regenerated for the comparison

	// The expected digest and the bytes around the end of the first extent.
	h := sha256.New()
	win := &window{from: boundary - 1<<20, buf: make([]byte, 2<<20)}
	require.NoError(t, aesStream(io.MultiWriter(h, win), size, seed))
	want := h.Sum(nil)

	fsys := openImage(t, image)
	ext, err := fsys.Extents("rootfs.squashfs")
	require.NoError(t, err)
	var total int64
	for _, e := range ext {
		total += e.Length
	}
	require.Equal(t, int64(size), total)
	info, err := fsys.Stat("rootfs.squashfs")
	require.NoError(t, err)
	require.Equal(t, int64(size), info.Size())
	if off, n, ok := fsys.Span("rootfs.squashfs"); ok {
		require.Equal(t, ext[0].Offset, off)
		require.Equal(t, int64(size), n)
	} else {
		require.Greater(t, len(ext), 1)
	}

	f, err := fsys.Open("rootfs.squashfs")
	require.NoError(t, err)
	defer f.Close()
	h.Reset()
	n, err := io.CopyBuffer(h, f, make([]byte, 4<<20))
	require.NoError(t, err)
	require.Equal(t, int64(size), n)
	require.Equal(t, want, h.Sum(nil), "the file's bytes")

	got := make([]byte, len(win.buf))
	m, err := f.(io.ReaderAt).ReadAt(got, win.from)
	require.NoError(t, err)
	require.Equal(t, len(got), m)
	require.True(t, bytes.Equal(win.buf, got), "bytes across the end of the first extent")

	data, err := fsys.ReadFile("after.txt")
	require.NoError(t, err)
	require.Equal(t, "after the big file\n", string(data))
	require.Equal(t, xorrisoListing(t, image), fsListing(t, fsys))
	t.Logf("%d extents: %+v", len(ext), ext)
}
