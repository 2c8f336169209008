package httprange_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
)

// Probe learns the size with one GET of the first byte: from Content-Range where ranges are
// served, from Content-Length where they are not (without reading the body), and never with a
// HEAD, which a presigned URL refuses.
func TestProbe(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("x"), 1<<20)
	mod := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    httprange.Info
		err     string
		perm    bool
	}{
		{
			name: "ranges, signed for GET only",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet || r.URL.Query().Get("X-Amz-Signature") != "s" {
					http.Error(w, "signature does not match", http.StatusForbidden)
					return
				}
				w.Header().Set("ETag", `"v1"`)
				http.ServeContent(w, r, "iso", mod, bytes.NewReader(data))
			},
			want: httprange.Info{Size: 1 << 20, Ranges: true, Validator: `etag "v1"`},
		},
		{
			name: "no ranges",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(len(data)))
				w.Header().Set("Last-Modified", mod.Format(http.TimeFormat))
				_, _ = w.Write(data)
			},
			want: httprange.Info{Size: 1 << 20, Validator: "last-modified " + mod.Format(http.TimeFormat)},
		},
		{
			name: "no size at all",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.(http.Flusher).Flush() // chunked: no Content-Length
				_, _ = w.Write(data[:10])
			},
			err: "no Content-Length and no range support",
		},
		{
			name: "weak etag is no validator",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("ETag", `W/"v1"`)
				http.ServeContent(w, r, "iso", time.Time{}, bytes.NewReader(data))
			},
			want: httprange.Info{Size: 1 << 20, Ranges: true},
		},
		{
			name:    "not found",
			handler: func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) },
			err:     "status 404 Not Found", perm: true,
		},
		{
			name:    "unavailable",
			handler: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) },
			err:     "status 503", perm: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tt.handler)
			t.Cleanup(srv.Close)
			info, err := httprange.Probe(t.Context(), srv.Client(), srv.URL+"/release.iso?X-Amz-Signature=s")
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				require.NotContains(t, err.Error(), "X-Amz-Signature", "the URL's secret is never printed")
				var se *httprange.StatusError
				if errors.As(err, &se) {
					require.Equal(t, tt.perm, se.Permanent())
				} else {
					require.ErrorIs(t, err, httprange.ErrNoSize)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, info)
		})
	}
}
