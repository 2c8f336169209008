package httprange_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
)

// A Range header is read against the file's size, clipped to it; what cannot be served is told
// apart from what is malformed (416 against 400 for a server that cares).
func TestParseRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in        string
		size      int64
		off, n    int64
		malformed bool
		unsat     bool
	}{
		{in: "bytes=0-9", size: 100, off: 0, n: 10},
		{in: "bytes=0-0", size: 1, off: 0, n: 1},
		{in: "bytes=90-", size: 100, off: 90, n: 10},
		{in: "bytes=90-1000", size: 100, off: 90, n: 10},
		{in: "bytes=-10", size: 100, off: 90, n: 10},
		{in: "bytes=-1000", size: 100, off: 0, n: 100},
		{in: "bytes=99-99", size: 100, off: 99, n: 1},
		{in: "bytes=100-", size: 100, unsat: true},
		{in: "bytes=100-200", size: 100, unsat: true},
		{in: "bytes=-0", size: 100, unsat: true},
		{in: "bytes=0-", size: 0, unsat: true},
		{in: "bytes=-5", size: 0, unsat: true},
		{in: "bytes=9-0", size: 100, malformed: true},
		{in: "bytes=0-9,20-29", size: 100, malformed: true},
		{in: "bytes=x-9", size: 100, malformed: true},
		{in: "bytes=0-x", size: 100, malformed: true},
		{in: "bytes=--5", size: 100, malformed: true},
		{in: "bytes=-1-5", size: 100, malformed: true},
		{in: "bytes=5", size: 100, malformed: true},
		{in: "items=0-9", size: 100, malformed: true},
		{in: "", size: 100, malformed: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			off, n, err := httprange.ParseRange(tt.in, tt.size)
			switch {
			case tt.malformed:
				require.ErrorIs(t, err, httprange.ErrMalformed)
			case tt.unsat:
				require.ErrorIs(t, err, httprange.ErrUnsatisfiable)
			default:
				require.NoError(t, err)
				require.Equal(t, [2]int64{tt.off, tt.n}, [2]int64{off, n})
				// What a client asks with reads back the same.
				o2, n2, err := httprange.ParseRange(httprange.Request(off, n), tt.size)
				require.NoError(t, err)
				require.Equal(t, [2]int64{off, n}, [2]int64{o2, n2})
			}
		})
	}
}

// The Content-Range of an answer is read in its three forms; anything else is an error.
func TestParseContentRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in               string
		start, end, size int64
		ok               bool
	}{
		{in: "bytes 0-9/100", start: 0, end: 9, size: 100, ok: true},
		{in: "bytes 0-0/1", start: 0, end: 0, size: 1, ok: true},
		{in: "bytes 5-9/*", start: 5, end: 9, size: -1, ok: true},
		{in: "bytes */100", start: -1, end: -1, size: 100, ok: true},
		{in: "bytes */0", start: -1, end: -1, size: 0, ok: true},
		{in: "bytes 0-100/100"},
		{in: "bytes */*"},
		{in: "bytes x-9/100"},
		{in: "bytes 0-x/100"},
		{in: "bytes 9-0/100"},
		{in: "bytes -1-9/100"},
		{in: "bytes 0-9/-1"},
		{in: "bytes 0-9/x"},
		{in: "bytes 09/100"},
		{in: "0-9/100"},
		{in: "bytes 0-9"},
		{in: ""},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			c, err := httprange.ParseContentRange(tc.in)
			if !tc.ok {
				require.ErrorIs(t, err, httprange.ErrMalformed)
				return
			}
			require.NoError(t, err)
			require.Equal(t, httprange.ContentRange{Start: tc.start, End: tc.end, Size: tc.size}, c)
			require.Equal(t, tc.in, c.String(), "formats back the same")
		})
	}
	require.Equal(t, "bytes 10-19/100", httprange.Sent(10, 10, 100))
	require.Equal(t, "bytes */100", httprange.Unsatisfied(100))
	require.Equal(t, "bytes=5-", httprange.Request(5, -1))
}

// FuzzParseContentRange: any header an origin sends is parsed without panic, and what is accepted
// is coherent (no negative offset, no range ending before its start or past the size) and reads
// back the same.
func FuzzParseContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-0/1", "bytes 5-9/*", "bytes */100", "bytes 9-5/10", "bytes -1-5/10",
		"bytes 0-9", "", "bytes 0-18446744073709551615/1", "bytes  1-2/3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := httprange.ParseContentRange(s)
		if err != nil {
			return
		}
		if c.Size < -1 || (c.Start == -1) != (c.End == -1) || c.Start < -1 || c.End < c.Start || c.Size >= 0 && c.End >= c.Size {
			t.Fatalf("%q: %+v", s, c)
		}
		c2, err := httprange.ParseContentRange(c.String())
		if err != nil || c2 != c {
			t.Fatalf("%q read back as %q: %+v %v", s, c.String(), c2, err)
		}
	})
}

// FuzzParseRange: any Range header a client sends is parsed without panic, and what is accepted
// lies inside the file.
func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"bytes=0-9", "bytes=-5", "bytes=5-", "bytes=0-9223372036854775807", "bytes=-9223372036854775807"} {
		f.Add(s, int64(100))
	}
	f.Fuzz(func(t *testing.T, s string, size int64) {
		if size < 0 {
			size = -size
		}
		off, n, err := httprange.ParseRange(s, size)
		if err != nil {
			return
		}
		if off < 0 || n <= 0 || off+n > size {
			t.Fatalf("%q of %d: off %d n %d", s, size, off, n)
		}
	})
}
