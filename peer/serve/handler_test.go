package serve_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/cache"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
	"github.com/upgrade-repo/upgrade-repo/peer/serve"
)

// The ISO paths ask for the ring's token when one is set, and are open without one.
func TestHandlerServesPeersOnly(t *testing.T) {
	t.Parallel()
	sha := strings.Repeat("ab", 64)
	token := peer.Token([]byte("key"))
	require.Len(t, token, 64)
	require.NotEqual(t, token, peer.Token([]byte("another key")))
	require.Empty(t, peer.Token(nil))

	keyed := httptest.NewServer(serve.NewHandler(slog.New(slog.DiscardHandler), cache.NewStore(inventory.NewDirectory("k")), nil, serve.RequireToken(token)))
	t.Cleanup(keyed.Close)
	open := httptest.NewServer(serve.NewHandler(slog.New(slog.DiscardHandler), cache.NewStore(inventory.NewDirectory("o")), nil))
	t.Cleanup(open.Close)
	tests := []struct {
		name string
		url  string
		auth string
		want int
	}{
		{name: "chunks, another token", url: keyed.URL + "/v1/iso/" + sha + "/chunks", auth: "Bearer " + peer.Token([]byte("k2")), want: http.StatusForbidden},
		{name: "chunks, basic auth", url: keyed.URL + "/v1/iso/" + sha + "/chunks", auth: "Basic " + token, want: http.StatusUnauthorized},
		{name: "chunks, no token", url: keyed.URL + "/v1/iso/" + sha + "/chunks", want: http.StatusUnauthorized},
		{name: "chunks, token", url: keyed.URL + "/v1/iso/" + sha + "/chunks", auth: "Bearer " + token, want: http.StatusNotFound},
		{name: "no token set: chunks", url: open.URL + "/v1/iso/" + sha + "/chunks", want: http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, tc.url, nil)
			require.NoError(t, err)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, tc.want, resp.StatusCode)
			if tc.want == http.StatusUnauthorized {
				require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
			}
		})
	}
}
