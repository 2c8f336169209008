package peer_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer"
)

// A blob asked for with a list of ranges comes whole; one range still comes as asked.
func TestBlobRanges(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	mem := &peer.MemBlobs{}
	d := mem.Put(data)
	listed := peer.NewListedBlobs(mem)
	listed.Set([]string{d})
	token := peer.Token([]byte("key"))
	ts := httptest.NewServer(peer.NewHandler(testLog(), peer.NewStore(peer.NewDirectory("k"), listed), nil, peer.RequireToken(token)))
	t.Cleanup(ts.Close)
	many := make([]string, 20000)
	for i := range many {
		many[i] = strconv.Itoa(2*i) + "-" + strconv.Itoa(2*i)
	}
	for _, tc := range []struct {
		name, ranges string
		status       int
		want         []byte
	}{
		{"one range", "bytes=16-31", http.StatusPartialContent, data[16:32]},
		{"many ranges", "bytes=" + strings.Join(many, ","), http.StatusOK, data},
		{"two ranges", "bytes=0-0,2-2", http.StatusOK, data},
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.URL+"/v2/x/blobs/"+d, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Range", tc.ranges)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, tc.status, resp.StatusCode, tc.name)
		require.True(t, bytes.Equal(tc.want, body), tc.name)
	}
}
