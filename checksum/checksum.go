package checksum

import (
	"bufio"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// Pattern is the grammar of a checksum as Parse reads it: 128 hex digits, optionally prefixed with
// "sha512:", the algorithm's name and the digits in any case, surrounding blanks ignored. The
// Version CRD's isoChecksum is validated with this same expression.
const Pattern = `^\s*([sS][hH][aA]512:)?[0-9a-fA-F]{128}\s*$`

var pattern = regexp.MustCompile(Pattern)

// Size is the length of a SHA-512 digest in bytes.
const Size = sha512.Size

// Sum is the SHA-512 of an ISO. The zero Sum is "none given".
type Sum struct {
	b   [Size]byte
	set bool
}

// ErrSyntax is wrapped by the errors of Parse and ParseFile for text that is not a checksum.
var ErrSyntax = errors.New("not a sha512 checksum")

// Parse reads s as Pattern describes it.
func Parse(s string) (Sum, error) {
	if !pattern.MatchString(s) {
		t := strings.TrimSpace(s)
		if algo, _, ok := strings.Cut(t, ":"); ok && !strings.EqualFold(algo, "sha512") {
			return Sum{}, fmt.Errorf("checksum %q: algorithm %q is not supported, use sha512:HEX: %w", s, algo, ErrSyntax)
		}
		return Sum{}, fmt.Errorf("checksum %q: want 128 hex digits, optionally prefixed with sha512: %w", s, ErrSyntax)
	}
	t := strings.TrimSpace(s)
	t = t[len(t)-2*Size:]
	var c Sum
	if _, err := hex.Decode(c.b[:], []byte(t)); err != nil {
		return Sum{}, fmt.Errorf("checksum %q: %w", s, ErrSyntax) // unreachable: the pattern matched
	}
	c.set = true
	return c, nil
}

// MustParse is Parse for checksums known to be valid (constants, tests); it panics otherwise.
func MustParse(s string) Sum {
	c, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return c
}

// IsZero reports whether c is the zero Sum (none given).
func (c Sum) IsZero() bool { return !c.set }

// Hex returns the digest as 128 lower-case hex digits, the form directories, file names and
// URL paths use; "" for the zero Sum.
func (c Sum) Hex() string {
	if !c.set {
		return ""
	}
	return hex.EncodeToString(c.b[:])
}

// String returns "sha512:HEX", the form a Version is written with; "" for the zero Sum.
func (c Sum) String() string {
	if !c.set {
		return ""
	}
	return "sha512:" + c.Hex()
}

// Equal reports whether two checksums are the same.
func (c Sum) Equal(o Sum) bool { return c == o }

// Same reports whether a and b, as an API object writes them, name the same checksum: both
// parse and are equal, so "sha512:HEX", "HEX" and upper-case HEX are the same; or neither parses
// and the texts are equal, so that a report about an unusable checksum still matches the plan
// that wrote it.
func Same(a, b string) bool {
	x, xerr := Parse(a)
	y, yerr := Parse(b)
	if xerr != nil || yerr != nil {
		return xerr != nil && yerr != nil && a == b
	}
	return x.Equal(y)
}

// IsHex reports whether s is a digest in the form Hex returns: 128 lower-case hex digits and
// nothing else.
func IsHex(s string) bool {
	c, err := Parse(s)
	return err == nil && c.Hex() == s
}

// ParseFile finds the checksum of the file named name in a checksum file: sha512sum's output
// ("HEX  NAME", "HEX *NAME" for binary mode, one line per file) or BSD's ("SHA512 (NAME) = HEX").
// The line naming name is taken, or the only line when there is one; blank lines and lines
// starting with '#' are skipped.
func ParseFile(r io.Reader, name string) (Sum, error) {
	entries, err := readList(r, "SHA512")
	if err != nil {
		return Sum{}, err
	}
	pick := -1
	for i, e := range entries {
		if e.file == name {
			pick = i
			break
		}
	}
	if pick < 0 && len(entries) == 1 {
		pick = 0
	}
	if pick < 0 {
		return Sum{}, fmt.Errorf("no line for %s among %d: %w", name, len(entries), ErrSyntax)
	}
	return Parse(entries[pick].sum)
}

// entry is one line of a checksum list: the digest as written and the file it names ("" when
// the line gives only a digest).
type entry struct {
	sum, file string
	line      int
}

// readList reads the lines of a checksum list in sha*sum's form ("HEX  NAME", "HEX *NAME") or
// BSD's ("ALGO (NAME) = HEX", ALGO being bsd), skipping blank lines and '#' comments. The digests
// are returned as written, for the caller to parse.
func readList(r io.Reader, bsd string) ([]entry, error) {
	var entries []entry
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if rest, ok := strings.CutPrefix(line, bsd+" ("); ok {
			file, sum, ok := strings.Cut(rest, ") = ")
			if !ok {
				return nil, fmt.Errorf("line %d %q: want %s (NAME) = HEX: %w", n, line, bsd, ErrSyntax)
			}
			entries = append(entries, entry{sum: sum, file: file, line: n})
			continue
		}
		f := strings.Fields(line)
		e := entry{sum: f[0], line: n}
		if len(f) > 1 {
			e.file = strings.TrimPrefix(f[1], "*")
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return entries, nil
}
