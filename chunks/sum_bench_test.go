package chunks_test

import (
	"crypto/sha256"
	"testing"

	"github.com/upgrade-repo/upgrade-repo/chunks"
)

// BenchmarkSum compares the chunk digest with the sha256 it replaced, on one 4 MiB chunk.
func BenchmarkSum(b *testing.B) {
	data := make([]byte, chunks.DefaultSize)
	for i := range data {
		data[i] = byte(i * 7)
	}
	b.Run("blake3", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			chunks.Sum(data)
		}
	})
	b.Run("sha256", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			sha256.Sum256(data)
		}
	})
}
