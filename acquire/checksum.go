package acquire

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/upgrade-repo/upgrade-repo/peer"
)

// Checksum is the expected digest of an ISO. Only sha512 is supported, as release Versions use it.
type Checksum struct {
	sum []byte
}

// ParseChecksum parses "sha512:HEX" (a bare 128-digit hex string is taken as sha512 too; the
// algorithm and the digits in any case, surrounding spaces ignored). It reads what
// peer.ParseChecksum reads, the one parser of an ISO checksum, and keeps the digest's bytes.
func ParseChecksum(s string) (Checksum, error) {
	h, err := peer.ParseChecksum(s)
	if err != nil {
		return Checksum{}, err
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return Checksum{}, fmt.Errorf("checksum %q: %w", s, err)
	}
	return Checksum{sum: b}, nil
}

// IsZero reports whether c is the zero Checksum (none given).
func (c Checksum) IsZero() bool { return len(c.sum) == 0 }

// Hex returns the digest in hex.
func (c Checksum) Hex() string { return hex.EncodeToString(c.sum) }

// String returns "sha512:HEX".
func (c Checksum) String() string { return "sha512:" + c.Hex() }

// Equal reports whether two checksums are the same.
func (c Checksum) Equal(o Checksum) bool { return bytes.Equal(c.sum, o.sum) }

// Sum computes the sha512 of the file at path. progress, when not nil, is called with the bytes
// hashed so far, about every 64 MiB.
func Sum(ctx context.Context, path string, progress func(done int64)) (Checksum, error) {
	f, err := os.Open(path)
	if err != nil {
		return Checksum{}, fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	h := sha512.New()
	buf := make([]byte, 1<<20)
	var done, last int64
	for {
		if err := ctx.Err(); err != nil {
			return Checksum{}, fmt.Errorf("hash %s: %w", path, err)
		}
		n, err := f.Read(buf)
		h.Write(buf[:n])
		done += int64(n)
		if progress != nil && done-last >= 64<<20 {
			progress(done)
			last = done
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Checksum{}, fmt.Errorf("hash %s: %w", path, err)
		}
	}
	return Checksum{sum: h.Sum(nil)}, nil
}
