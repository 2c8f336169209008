package pack

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// synthLayer is an uncompressed layer tar holding one file of random bytes derived from a seed
// and a key. Its bytes are generated on every read, so a layer of any size costs no memory.
type synthLayer struct {
	seed   [32]byte
	header []byte // the tar header of the one file
	size   int64  // the file's size
	total  int64  // the tar's size
	digest v1.Hash
}

var _ v1.Layer = (*synthLayer)(nil)

// newSynthLayer makes the layer of key with a file of size random bytes and computes its digest.
func newSynthLayer(seed int64, key string, size int64) (*synthLayer, error) {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	h.Write([]byte(key))
	l := &synthLayer{size: size}
	copy(l.seed[:], h.Sum(nil))

	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg,
		Name:     "data/" + hex.EncodeToString(l.seed[:8]),
		Mode:     0o644,
		Size:     size,
		Format:   tar.FormatPAX,
	}); err != nil {
		return nil, fmt.Errorf("layer %s: %w", key, err)
	}
	l.header = hdr.Bytes()
	l.total = int64(len(l.header)) + padded(size) + 1024

	d := sha256.New()
	r, _ := l.Uncompressed()
	n, err := io.Copy(d, r)
	if err != nil || n != l.total {
		return nil, fmt.Errorf("layer %s: generated %d of %d bytes: %w", key, n, l.total, err)
	}
	l.digest = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(d.Sum(nil))}
	return l, nil
}

func padded(n int64) int64 { return (n + 511) / 512 * 512 }

// Digest is the sha256 of the layer tar (the layer is stored uncompressed).
func (l *synthLayer) Digest() (v1.Hash, error) { return l.digest, nil }

// DiffID equals Digest for an uncompressed layer.
func (l *synthLayer) DiffID() (v1.Hash, error) { return l.digest, nil }

// Compressed returns the layer tar: the stored form is uncompressed.
func (l *synthLayer) Compressed() (io.ReadCloser, error) { return l.Uncompressed() }

// Uncompressed generates the layer tar.
func (l *synthLayer) Uncompressed() (io.ReadCloser, error) {
	rng := rand.NewChaCha8(l.seed)
	zeros := io.LimitReader(zeroReader{}, padded(l.size)-l.size+1024)
	return io.NopCloser(io.MultiReader(bytes.NewReader(l.header), io.LimitReader(rng, l.size), zeros)), nil
}

// Size is the size of the layer tar.
func (l *synthLayer) Size() (int64, error) { return l.total, nil }

// MediaType is the docker media type of an uncompressed layer.
func (l *synthLayer) MediaType() (types.MediaType, error) { return types.DockerUncompressedLayer, nil }

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// randomReader returns size random bytes derived from seed and key.
func randomReader(seed int64, key string, size int64) io.Reader {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	h.Write([]byte("file:" + key))
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return io.LimitReader(rand.NewChaCha8(s), size)
}
