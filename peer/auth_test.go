package peer_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer"
)

// Blobs go only to requests with the ring's token, and only the listed ones; the ISO paths ask for
// the token when one is set; a node without a token serves no blob at all.
func TestHandlerServesPeersOnly(t *testing.T) {
	t.Parallel()
	mem := &peer.MemBlobs{}
	shared := mem.Put([]byte("a layer of the release"))
	private := mem.Put([]byte("a layer of a private image"))
	listed := peer.NewListedBlobs(mem)
	require.Empty(t, listed.Set([]string{shared, private}))
	require.Equal(t, []string{private}, listed.Set([]string{shared}))
	_, sha := isoData(t, 10)
	token := peer.Token([]byte("key"))
	require.Len(t, token, 64)
	require.NotEqual(t, token, peer.Token([]byte("another key")))
	require.Empty(t, peer.Token(nil))

	keyed := httptest.NewServer(peer.NewHandler(testLog(), peer.NewStore(peer.NewDirectory("k"), listed), nil, peer.RequireToken(token)))
	t.Cleanup(keyed.Close)
	open := httptest.NewServer(peer.NewHandler(testLog(), peer.NewStore(peer.NewDirectory("o"), listed), nil))
	t.Cleanup(open.Close)
	tests := []struct {
		name string
		url  string
		auth string
		want int
	}{
		{name: "listed blob, token", url: keyed.URL + "/v2/x/blobs/" + shared, auth: "Bearer " + token, want: http.StatusOK},
		{name: "listed blob, no token", url: keyed.URL + "/v2/x/blobs/" + shared, want: http.StatusUnauthorized},
		{name: "listed blob, another token", url: keyed.URL + "/v2/x/blobs/" + shared, auth: "Bearer " + peer.Token([]byte("k2")), want: http.StatusForbidden},
		{name: "listed blob, basic auth", url: keyed.URL + "/v2/x/blobs/" + shared, auth: "Basic " + token, want: http.StatusUnauthorized},
		{name: "unlisted blob, token", url: keyed.URL + "/v2/x/blobs/" + private, auth: "Bearer " + token, want: http.StatusNotFound},
		{name: "chunks, no token", url: keyed.URL + "/v1/iso/" + sha + "/chunks", want: http.StatusUnauthorized},
		{name: "chunks, token", url: keyed.URL + "/v1/iso/" + sha + "/chunks", auth: "Bearer " + token, want: http.StatusNotFound},
		{name: "no token set: blob", url: open.URL + "/v2/x/blobs/" + shared, auth: "Bearer " + token, want: http.StatusForbidden},
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
