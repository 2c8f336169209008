package containerd

import (
	"archive/tar"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// benchLayer is a layer of n regular files of size bytes each, of random bytes, in directories
// of 100.
func benchLayer(b *testing.B, n, size int) []byte {
	b.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	rng := rand.New(rand.NewPCG(1, 2))
	body := make([]byte, size)
	for i := range n {
		if i%100 == 0 {
			require.NoError(b, tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%d/", i/100), Typeflag: tar.TypeDir, Mode: 0o755}))
		}
		for j := range body {
			body[j] = byte(rng.Uint32())
		}
		require.NoError(b, tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%d/f%d", i/100, i), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(size)}))
		_, err := tw.Write(body)
		require.NoError(b, err)
	}
	require.NoError(b, tw.Close())
	return buf.Bytes()
}

// BenchmarkApplyLayer applies layers of large files and of many small ones, with containerd's
// applier and with large files written ahead, side by side, each into a new directory on the
// disk of TMPDIR, synced (syncfs) before the clock stops.
func BenchmarkApplyLayer(b *testing.B) {
	shapes := []struct {
		name    string
		n, size int
	}{
		{"large files (4 x 64 MiB)", 4, 64 << 20},
		{"small files (20000 x 4 KiB)", 20000, 4 << 10},
	}
	appliers := []struct {
		name  string
		apply func(b *testing.B, dir string, layer []byte) error
	}{
		{"containerd", func(b *testing.B, dir string, layer []byte) error {
			_, err := archive.Apply(b.Context(), dir, bytes.NewReader(layer), archive.WithConvertWhiteout(archive.OverlayConvertWhiteout))
			return err
		}},
		{"ahead", func(b *testing.B, dir string, layer []byte) error {
			_, err := applyLayer(b.Context(), dir, bytes.NewReader(layer))
			return err
		}},
	}
	for _, sh := range shapes {
		layer := benchLayer(b, sh.n, sh.size)
		for _, ap := range appliers {
			b.Run(sh.name+"/"+ap.name, func(b *testing.B) {
				b.SetBytes(int64(len(layer)))
				for b.Loop() {
					b.StopTimer()
					dir, err := os.MkdirTemp("", "apply-bench-")
					require.NoError(b, err)
					b.StartTimer()
					require.NoError(b, ap.apply(b, dir, layer))
					f, err := os.Open(dir)
					require.NoError(b, err)
					require.NoError(b, unix.Syncfs(int(f.Fd())))
					require.NoError(b, f.Close())
					b.StopTimer()
					require.NoError(b, os.RemoveAll(dir))
					b.StartTimer()
				}
			})
		}
	}
}
