package repo

import (
	"bytes"
	"fmt"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A Range header with a great many ranges, or with ranges that overlap, gets the whole file; a
// few disjoint ranges still get their parts.
func TestBoundedRanges(t *testing.T) {
	t.Parallel()
	data := randomBytes(5, 1<<20)
	fsys, backing := newSpanFS(t, map[string][]byte{"big.bin": data, "small.txt": data[:4096]})
	ts, _, _ := newTestServer(t, fsys, WithBackingFile(backing))

	many := make([]string, 60000)
	for i := range many {
		many[i] = fmt.Sprintf("%d-%d", 2*i, 2*i)
	}
	tests := []struct {
		name, file, ranges string
		status             int
		parts              [][2]int // for 206: the byte ranges of the parts
	}{
		{name: "tens of thousands of ranges", file: "big.bin", ranges: strings.Join(many, ","), status: http.StatusOK},
		{name: "one more than the limit", file: "big.bin", ranges: strings.Join(many[:maxRanges+1], ","), status: http.StatusOK},
		{name: "overlapping", file: "big.bin", ranges: "0-99,50-149", status: http.StatusOK},
		{name: "the same range twice", file: "small.txt", ranges: "10-20,10-20", status: http.StatusOK},
		{name: "a suffix over a range", file: "big.bin", ranges: "1048000-1048100,-1000", status: http.StatusOK},
		{name: "open end over a later range", file: "big.bin", ranges: "500000-,600000-600010", status: http.StatusOK},
		{name: "the limit", file: "big.bin", ranges: strings.Join(many[:maxRanges], ","), status: http.StatusPartialContent},
		{name: "disjoint, any order", file: "big.bin", ranges: "100-199,0-9", status: http.StatusPartialContent, parts: [][2]int{{100, 199}, {0, 9}}},
		{name: "adjacent", file: "small.txt", ranges: "0-9,10-19", status: http.StatusPartialContent, parts: [][2]int{{0, 9}, {10, 19}}},
		{name: "malformed is still 416", file: "big.bin", ranges: "x-y,0-1", status: http.StatusRequestedRangeNotSatisfiable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want := data
			if tc.file == "small.txt" {
				want = data[:4096]
			}
			start := time.Now()
			resp, body := get(t, ts.URL+"/"+tc.file, map[string]string{"Range": "bytes=" + tc.ranges})
			require.Equal(t, tc.status, resp.StatusCode)
			require.Less(t, time.Since(start), 2*time.Second)
			switch {
			case tc.status == http.StatusOK:
				require.True(t, bytes.Equal(want, body), "the whole file")
			case tc.parts != nil:
				_, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
				require.NoError(t, err)
				mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
				for _, p := range tc.parts {
					part, err := mr.NextPart()
					require.NoError(t, err)
					got := new(bytes.Buffer)
					_, err = got.ReadFrom(part)
					require.NoError(t, err)
					require.Equal(t, want[p[0]:p[1]+1], got.Bytes())
				}
			}
		})
	}
}

func TestDisjoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec string
		want bool
	}{
		{"0-1", true},
		{"0-1,2-3", true},
		{"2-3,0-1", true},
		{"0-1,1-2", false},
		{"-5,90-", false},
		{"-5,0-10", true},
		{"0-,5-6", false},
		{"200-300,0-10", true}, // the first is past the end: skipped
		{"a-b,0-1,0-1", true},  // malformed: left to http.ServeContent
	} {
		require.Equal(t, tc.want, disjoint(tc.spec, 100), tc.spec)
	}
}
