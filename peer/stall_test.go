package peer_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer"
)

// An origin whose response stops without closing the connection is asked again once the idle
// timeout passes: a lone node does not wait for that chunk for ever.
func TestStalledOriginChunkIsAskedAgain(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, 3*testChunk)
	o := newOrigin(t, data)
	stalled := make(chan struct{})
	var stalls atomic.Int64
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The first request for a range sends half of it, then nothing until the test ends.
		if r.Header.Get("Range") != "" && stalls.Add(1) == 1 {
			w.Header().Set("Content-Range", "bytes 0-"+strconv.Itoa(testChunk-1)+"/"+strconv.Itoa(len(data)))
			w.Header().Set("Content-Length", strconv.Itoa(testChunk))
			w.WriteHeader(http.StatusPartialContent)
			_, _ = w.Write(data[:testChunk/2])
			w.(http.Flusher).Flush()
			select {
			case <-stalled:
			case <-r.Context().Done():
			}
			return
		}
		o.srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(flaky.Close)
	t.Cleanup(func() { close(stalled) }) // runs before the server's Close: the handler must end
	n := startNode(t, "alone", nil, nodeConfig{opts: []peer.FetchOption{peer.WithSettle(0), peer.WithIdleTimeout(500 * time.Millisecond)}})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, _, err := n.fetch(ctx, sha, flaky.URL+"/release.iso")
	require.NoError(t, err)
	n.requireISO(t, data)
	require.GreaterOrEqual(t, stalls.Load(), int64(2))
}
