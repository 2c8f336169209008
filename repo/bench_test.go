package repo_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
	"github.com/upgrade-repo/upgrade-repo/release/pack"
	"github.com/upgrade-repo/upgrade-repo/repo"
)

// BenchmarkReady measures the time from a verified ISO of 20,000 entries to a ready Handler:
// open the image, index every entry and parse the release metadata. The goal is 100 ms.
func BenchmarkReady(b *testing.B) {
	isotest.RequireXorriso(b)
	tree := b.TempDir()
	_, err := pack.BuildTree(b.Context(), pack.Demo("v1.5.2", 6, 4096, 0), tree)
	require.NoError(b, err)
	const dirs, perDir = 200, 99
	for d := range dirs {
		dir := filepath.Join(tree, "extra", fmt.Sprintf("d%03d", d))
		require.NoError(b, os.MkdirAll(dir, 0o755))
		for f := range perDir {
			require.NoError(b, os.WriteFile(filepath.Join(dir, fmt.Sprintf("file-with-a-long-name-%03d.txt", f)), []byte("x"), 0o644))
		}
	}
	out := filepath.Join(b.TempDir(), "big.iso")
	require.NoError(b, pack.MakeISO(b.Context(), tree, out, "BENCH"))

	entries := 0
	var opening time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		f, err := os.Open(out)
		require.NoError(b, err)
		fi, err := f.Stat()
		require.NoError(b, err)
		fsys, err := iso.Open(f, fi.Size())
		require.NoError(b, err)
		opening += time.Since(start)
		h, err := repo.New(fsys, repo.WithBackingFile(out))
		require.NoError(b, err)
		require.Equal(b, "v1.5.2", h.Version())
		entries = h.Entries()
		f.Close()
	}
	b.ReportMetric(float64(entries), "entries")
	b.ReportMetric(float64(opening.Milliseconds())/float64(b.N), "ms-iso-open/op")
	require.GreaterOrEqual(b, entries, 20000)
}
