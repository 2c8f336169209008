package repo

import (
	"errors"
	"net/http"
	"sort"
	"strings"

	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
)

// maxRanges bounds the byte ranges of one request. Every range is a part of a multipart
// response, with its own headers and a seek; a request listing tens of thousands of them costs
// seconds of CPU and a response many times the size asked for. Clients that fetch in parts ask
// for one range, or a few; Apache refuses more than 200 (MaxRanges).
const maxRanges = 100

// boundRanges returns r, or a copy of r without its Range header when the header asks for more
// than maxRanges ranges or for ranges that overlap (RFC 9110 section 14.2 lets a server ignore a
// Range header, and names both as abuse): the whole file is then served, with 200. Headers that
// do not parse are left to http.ServeContent, which answers 416 to them. size is the file's size.
func boundRanges(r *http.Request, size int64) *http.Request {
	h := r.Header.Get("Range")
	if h == "" {
		return r
	}
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok {
		return r
	}
	// Counted before anything is parsed: the header may hold a megabyte of ranges.
	if strings.Count(spec, ",") >= maxRanges || !disjoint(spec, size) {
		r = r.Clone(r.Context())
		r.Header.Del("Range")
		r.Header.Del("If-Range")
	}
	return r
}

// disjoint reports whether the ranges of spec (at most maxRanges), as they apply to a file of
// size bytes, overlap nowhere. A range that does not parse counts as disjoint: it is not this
// function's to refuse.
func disjoint(spec string, size int64) bool {
	if !strings.Contains(spec, ",") {
		return true
	}
	var rs [][2]int64
	for _, part := range strings.Split(spec, ",") {
		off, n, err := httprange.ParseRange("bytes="+strings.TrimSpace(part), size)
		if errors.Is(err, httprange.ErrUnsatisfiable) {
			continue // skipped by http.ServeContent
		}
		if err != nil {
			return true
		}
		rs = append(rs, [2]int64{off, off + n - 1})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i][0] < rs[j][0] })
	for i := 1; i < len(rs); i++ {
		if rs[i][0] <= rs[i-1][1] {
			return false
		}
	}
	return true
}
