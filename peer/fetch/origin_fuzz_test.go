package fetch

import (
	"fmt"
	"testing"
)

// FuzzParseContentRange: any header an origin sends is parsed without panic, and what is accepted
// is coherent (no negative offset, no range ending before its start) and reads back the same.
func FuzzParseContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-0/1", "bytes 5-9/*", "bytes */100", "bytes 9-5/10", "bytes -1-5/10",
		"bytes 0-9", "", "bytes 0-18446744073709551615/1", "bytes  1-2/3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		start, end, size, err := parseContentRange(s)
		if err != nil {
			return
		}
		if size < -1 || (start == -1) != (end == -1) || start < -1 || end < start {
			t.Fatalf("%q: start %d, end %d, size %d", s, start, end, size)
		}
		rng, total := "*", "*"
		if start >= 0 {
			rng = fmt.Sprintf("%d-%d", start, end)
		}
		if size >= 0 {
			total = fmt.Sprint(size)
		}
		s2 := "bytes " + rng + "/" + total
		a, b, c, err := parseContentRange(s2)
		if err != nil || a != start || b != end || c != size {
			t.Fatalf("%q read back as %q: %d %d %d %v", s, s2, a, b, c, err)
		}
	})
}
