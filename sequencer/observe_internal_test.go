package sequencer

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The free-space preflight learns the ISO's size the way the fetcher does, from its first byte,
// so it works for a presigned URL, signed for GET only, that refuses a HEAD.
func TestISOSizeWithoutHEAD(t *testing.T) {
	t.Parallel()
	iso := bytes.Repeat([]byte{7}, 3<<20)
	signedGETOnly := func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Query().Get("X-Amz-Signature") != "sig" {
			http.Error(w, "SignatureDoesNotMatch", http.StatusForbidden)
			return
		}
		http.ServeContent(w, r, "release.iso", time.Time{}, bytes.NewReader(iso))
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
		query   string
		want    int64
	}{
		{name: "presigned, HEAD refused", handler: signedGETOnly, query: "?X-Amz-Signature=sig", want: int64(len(iso))},
		{name: "presigned, signature wrong", handler: signedGETOnly, query: "?X-Amz-Signature=other", want: 0},
		{name: "no ranges, whole body announced", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "3145728")
			_, _ = w.Write(iso)
		}, want: int64(len(iso))},
		{name: "gone", handler: func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var heads int
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodHead {
					heads++
				}
				tt.handler(w, r)
			}))
			t.Cleanup(srv.Close)
			r := &Reconciler{log: slog.New(slog.DiscardHandler), http: srv.Client()}
			require.Equal(t, tt.want, r.isoSize(t.Context(), srv.URL+"/release.iso"+tt.query))
			require.Zero(t, heads, "no HEAD request")
		})
	}
}
