package checksum

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// PatternSHA256 is the grammar of a SHA-256 as ParseSHA256 reads it: 64 hex digits, optionally
// prefixed with "sha256:", the algorithm's name and the digits in any case, surrounding blanks
// ignored: Pattern's rules for the other digest.
const PatternSHA256 = `^\s*([sS][hH][aA]256:)?[0-9a-fA-F]{64}\s*$`

var patternSHA256 = regexp.MustCompile(PatternSHA256)

// SHA256 is the SHA-256 of one file of a release, such as a Kubernetes binary that the release's
// SHA256SUMS lists, or of an image checked with sha256 on request. The zero SHA256 is "none
// given".
type SHA256 struct {
	b   [sha256.Size]byte
	set bool
}

// ParseSHA256 reads s as PatternSHA256 describes it.
func ParseSHA256(s string) (SHA256, error) {
	if !patternSHA256.MatchString(s) {
		return SHA256{}, fmt.Errorf("checksum %q: want 64 hex digits, optionally prefixed with sha256: %w", s, ErrSyntax)
	}
	t := strings.TrimSpace(s)
	t = t[len(t)-2*sha256.Size:]
	var c SHA256
	if _, err := hex.Decode(c.b[:], []byte(t)); err != nil {
		return SHA256{}, fmt.Errorf("checksum %q: %w", s, ErrSyntax) // unreachable: the pattern matched
	}
	c.set = true
	return c, nil
}

// NewSHA256 returns the SHA256 whose digest is b, as a sha256 hash.Hash's Sum(nil) returns it.
func NewSHA256(b []byte) (SHA256, error) {
	var c SHA256
	if len(b) != len(c.b) {
		return SHA256{}, fmt.Errorf("a sha256 digest has %d bytes, not %d: %w", len(c.b), len(b), ErrSyntax)
	}
	copy(c.b[:], b)
	c.set = true
	return c, nil
}

// SHA256Of reads r to its end and returns the SHA-256 of what it read.
func SHA256Of(r io.Reader) (SHA256, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return SHA256{}, err
	}
	return NewSHA256(h.Sum(nil))
}

// IsZero reports whether c is the zero SHA256 (none given).
func (c SHA256) IsZero() bool { return !c.set }

// Hex returns the digest as 64 lower-case hex digits; "" for the zero SHA256.
func (c SHA256) Hex() string {
	if !c.set {
		return ""
	}
	return hex.EncodeToString(c.b[:])
}

// String returns "sha256:HEX"; "" for the zero SHA256.
func (c SHA256) String() string {
	if !c.set {
		return ""
	}
	return "sha256:" + c.Hex()
}

// Equal reports whether two checksums are the same.
func (c SHA256) Equal(o SHA256) bool { return c == o }

// ParseSHA256List reads a release's SHA256SUMS: sha256sum's output ("HEX  NAME", "HEX *NAME"
// for binary mode) or BSD's ("SHA256 (NAME) = HEX"), blank lines and lines starting with '#'
// skipped. It returns each named file's digest; a line without a name, or whose digest does not
// parse, is an error naming the line.
func ParseSHA256List(r io.Reader) (map[string]SHA256, error) {
	entries, err := readList(r, "SHA256")
	if err != nil {
		return nil, err
	}
	sums := make(map[string]SHA256, len(entries))
	for _, e := range entries {
		if e.file == "" {
			return nil, fmt.Errorf("line %d: want HEX  NAME: %w", e.line, ErrSyntax)
		}
		c, err := ParseSHA256(e.sum)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", e.line, err)
		}
		sums[e.file] = c
	}
	return sums, nil
}

// MustParseSHA256 is ParseSHA256 for checksums known to be valid (constants, tests); it panics
// otherwise.
func MustParseSHA256(s string) SHA256 {
	c, err := ParseSHA256(s)
	if err != nil {
		panic(err)
	}
	return c
}
