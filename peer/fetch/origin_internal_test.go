package fetch

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The Content-Range of an origin's answer is read in its three forms; anything else is an error.
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
			start, end, size, err := parseContentRange(tc.in)
			if !tc.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, [3]int64{tc.start, tc.end, tc.size}, [3]int64{start, end, size})
		})
	}
}
