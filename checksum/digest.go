package checksum

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
)

// Digest is the digest of a whole image as an operator gives it to check the image against: its
// SHA-512, read by Parse as every other part of the product reads it (sha512:HEX or the bare HEX,
// in any case), or its SHA-256 (sha256:HEX), which an image's publisher may give instead. One of
// the two is set; the zero Digest is "none given".
type Digest struct {
	sha512 Sum
	sha256 SHA256
}

// ParseDigest reads s as a SHA-512 (Parse), else as a SHA-256 (ParseSHA256).
func ParseDigest(s string) (Digest, error) {
	if c, err := Parse(s); err == nil {
		return Digest{sha512: c}, nil
	}
	if c, err := ParseSHA256(s); err == nil {
		return Digest{sha256: c}, nil
	}
	return Digest{}, fmt.Errorf("%q: want sha512:HEX (or its 128 hex digits alone) or sha256:HEX", s)
}

// IsZero reports whether d is "none given".
func (d Digest) IsZero() bool { return d.sha512.IsZero() && d.sha256.IsZero() }

// NewHash returns the hash d is a sum of.
func (d Digest) NewHash() hash.Hash {
	if !d.sha256.IsZero() {
		return sha256.New()
	}
	return sha512.New()
}

// Matches returns raw, a sum of d's hash (NewHash), as "ALGO:HEX", and whether it is d.
func (d Digest) Matches(raw []byte) (string, bool, error) {
	got, err := d.of(raw)
	if err != nil {
		return "", false, err
	}
	return got.String(), got.Equal(d), nil
}

// of returns raw, a sum of d's hash, as a Digest of d's kind.
func (d Digest) of(raw []byte) (Digest, error) {
	if !d.sha256.IsZero() {
		c, err := NewSHA256(raw)
		return Digest{sha256: c}, err
	}
	c, err := Parse(hex.EncodeToString(raw))
	return Digest{sha512: c}, err
}

// Equal reports whether d and o are the same digest.
func (d Digest) Equal(o Digest) bool {
	return d.sha512.Equal(o.sha512) && d.sha256.Equal(o.sha256)
}

// String returns d as "ALGO:HEX".
func (d Digest) String() string {
	if !d.sha256.IsZero() {
		return d.sha256.String()
	}
	return d.sha512.String()
}
