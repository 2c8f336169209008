package repo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fetch returns the status, the body as far as it came and whether it came whole.
func fetch(t *testing.T, method, url string, hdr map[string]string) (*http.Response, []byte, bool) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err == nil
}

// A range check refuses the bytes it fails: at the start of a response with a 503 before anything
// is sent, further on by cutting the response; whatever is sent is right, and sendfile stays in
// use for what the check accepts.
func TestRangeCheck(t *testing.T) {
	t.Parallel()
	const size = 40 << 20
	data := randomBytes(7, size)
	tests := []struct {
		name string
		bad  int64 // offset in the file of the byte the check refuses; -1 for none
	}{
		{name: "intact", bad: -1},
		{name: "damage near the start", bad: 5<<20 + 3},
		{name: "damage far in", bad: 30<<20 + 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fsys, backing := newSpanFS(t, map[string][]byte{"big.bin": data})
			base := fsys.spans["big.bin"][0]
			damaged := errors.New("damaged")
			check := func(off, n int64) error {
				if tc.bad >= 0 && off <= base+tc.bad && base+tc.bad < off+n {
					return damaged
				}
				return nil
			}
			ts, m, _ := newTestServer(t, fsys, WithBackingFile(backing), WithRangeCheck(check))
			url := ts.URL + "/big.bin"

			resp, body, whole := fetch(t, http.MethodGet, url, nil)
			switch {
			case tc.bad < 0:
				require.Equal(t, http.StatusOK, resp.StatusCode)
				require.True(t, whole)
				require.True(t, bytes.Equal(data, body))
				// net/http copies the first 512 bytes itself, then hands the rest to sendfile.
				require.InDelta(t, float64(size), value(t, m.fileBytesBy[modeZeroCopy]), 512, "sendfile is still used")
				require.InDelta(t, float64(size), value(t, m.fileBytesBy[modeZeroCopy])+value(t, m.fileBytesBy[modeCopied]), 0)
			case tc.bad < checkAhead:
				require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
				require.Contains(t, string(body), "damaged")
				require.Empty(t, resp.Header.Get("Content-Range"))
			default:
				require.Equal(t, http.StatusOK, resp.StatusCode)
				require.False(t, whole, "the response is cut before the damage")
				require.LessOrEqual(t, int64(len(body)), tc.bad)
				require.True(t, bytes.Equal(data[:len(body)], body))
			}

			resp, body, whole = fetch(t, http.MethodGet, url, map[string]string{"Range": "bytes=0-99"})
			require.Equal(t, http.StatusPartialContent, resp.StatusCode)
			require.True(t, whole)
			require.Equal(t, data[:100], body)
			resp, _, _ = fetch(t, http.MethodHead, url, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			if tc.bad < 0 {
				return
			}
			around := fmt.Sprintf("bytes=%d-%d", tc.bad-10, tc.bad+10)
			resp, _, _ = fetch(t, http.MethodGet, url, map[string]string{"Range": around})
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			resp, body, whole = fetch(t, http.MethodGet, url, map[string]string{"Range": "bytes=0-9," + strings.TrimPrefix(around, "bytes=")})
			require.Equal(t, http.StatusPartialContent, resp.StatusCode)
			require.False(t, whole, "several ranges: cut at the damaged one")
			require.NotContains(t, string(body), string(data[tc.bad-10:tc.bad+11]))
		})
	}
}
