package acquire

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/upgrade-repo/upgrade-repo/chunks"
)

// Verified is a verified local copy of an ISO.
type Verified struct {
	// Path is the file.
	Path string
	// Chunks are the sha256 of the file's chunks, computed when its sha512 was verified; zero when
	// the file was not verified (a local path without a checksum). A server checks each chunk
	// against them before serving it (see package chunks).
	Chunks chunks.Sums

	marker string // the cache's record of the verification, "" outside a cache
}

// Invalidate removes the cache's record that the file was verified, so that the next Acquire
// hashes it again (and fetches it again when it does not match): the thing to do once a chunk is
// found damaged. It does nothing for a file outside a cache.
func (v Verified) Invalidate() error {
	if v.marker == "" {
		return nil
	}
	if err := os.Remove(v.marker); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("invalidate %s: %w", v.Path, err)
	}
	return nil
}

// AcquireVerified is Acquire, and also returns the chunk digests of the copy: computed in the
// pass that verifies a local file's checksum, or recorded by the cache when it verified its copy.
func AcquireVerified(ctx context.Context, src Source, opts ...Option) (Verified, error) {
	if src.Path != "" && !src.Checksum.IsZero() {
		// Acquire checks the path; the hashing is done here, chunk digests included.
		bare := src
		bare.Checksum = Checksum{}
		p, err := Acquire(ctx, bare, opts...)
		if err != nil {
			return Verified{}, err
		}
		sums, err := verifyChunks(ctx, p, src.Checksum)
		if err != nil {
			return Verified{}, fmt.Errorf("acquire: %w", err)
		}
		return Verified{Path: p, Chunks: sums}, nil
	}
	p, err := Acquire(ctx, src, opts...)
	if err != nil || src.Path != "" {
		return Verified{Path: p}, err
	}
	c, err := NewCache(src.CacheDir, opts...)
	if err != nil {
		return Verified{}, fmt.Errorf("acquire: %w", err)
	}
	sums, err := c.chunkSums(src.Checksum, p)
	if err != nil {
		return Verified{}, fmt.Errorf("acquire: %w", err)
	}
	return Verified{Path: p, Chunks: sums, marker: c.markerPath(src.Checksum)}, nil
}

// verifyChunks checks that the file at path has checksum want, computing the digests of its
// chunks in the same pass. The digests are returned on a mismatch too (wrapping
// ErrChecksumMismatch), to tell which chunks changed.
func verifyChunks(ctx context.Context, path string, want Checksum) (chunks.Sums, error) {
	f, err := os.Open(path)
	if err != nil {
		return chunks.Sums{}, fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	whole := sha512.New()
	parts := chunks.NewHasher(chunks.DefaultSize)
	buf := make([]byte, 1<<20)
	for {
		if err := ctx.Err(); err != nil {
			return chunks.Sums{}, fmt.Errorf("hash %s: %w", path, err)
		}
		n, err := f.Read(buf)
		whole.Write(buf[:n])
		_, _ = parts.Write(buf[:n])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return chunks.Sums{}, fmt.Errorf("hash %s: %w", path, err)
		}
	}
	sums := parts.Sums()
	if got := (Checksum{sum: whole.Sum(nil)}); !got.Equal(want) {
		return sums, fmt.Errorf("verify %s: %w: want %s, got %s", path, ErrChecksumMismatch, want, got)
	}
	return sums, nil
}

// fileIdentity returns what besides size and modification time tells that a file changed: its
// change time (which a write moves even when the modification time is put back) and its inode.
func fileIdentity(fi fs.FileInfo) (ctime int64, inode uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ctim.Nano(), st.Ino
	}
	return 0, 0
}

// chunkSums returns the chunk digests the cache recorded for its verified copy of sum at path.
func (c *Cache) chunkSums(sum Checksum, path string) (chunks.Sums, error) {
	data, err := os.ReadFile(c.markerPath(sum))
	if err != nil {
		return chunks.Sums{}, fmt.Errorf("read the chunk digests of %s: %w", path, err)
	}
	var m marker
	if err := json.Unmarshal(data, &m); err != nil {
		return chunks.Sums{}, fmt.Errorf("read the chunk digests of %s: %w", path, err)
	}
	return chunks.ParseHex(m.Size, m.ChunkSize, m.Chunks)
}

// logChanged names the chunks of the cached copy at p that differ from what was verified.
func (c *Cache) logChanged(p string, was marker, now chunks.Sums) {
	old, err := chunks.ParseHex(was.Size, was.ChunkSize, was.Chunks)
	if err != nil {
		return
	}
	changed := now.Differ(old)
	for i, ch := range changed {
		if i == 10 {
			c.log.Error("cached ISO changed on disk: more chunks differ", "path", p, "more", len(changed)-i)
			break
		}
		c.log.Error("cached ISO changed on disk since it was verified", "path", p, "chunk", ch,
			"offset", int64(ch)*now.ChunkSize, "length", now.Len(ch))
	}
}
