package fetch_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/cache"
	"github.com/upgrade-repo/upgrade-repo/peer/fetch"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
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
	n := startNode(t, "alone", nil, nodeConfig{opts: []fetch.Option{fetch.WithSettle(0), fetch.WithIdleTimeout(500 * time.Millisecond)}})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, _, err := n.fetch(ctx, sha, flaky.URL+"/release.iso")
	require.NoError(t, err)
	n.requireISO(t, data)
	require.GreaterOrEqual(t, stalls.Load(), int64(2))
}

// The directory's view of an owner may lag behind its progress for longer than the stall time
// (gossip falls behind when many members download at once). A fetcher then asks the owner itself:
// an owner that keeps fetching is not taken for stalled, and the fetcher takes from the origin
// exactly the chunks it owns, the owner's from the owner. An owner that stopped making progress,
// or that no longer answers, has its chunks taken from the origin.
func TestOwnerJudgedByItsAnswers(t *testing.T) {
	t.Parallel()
	const chunks, stallAfter = 24, 2 * time.Second
	tests := []struct {
		name string
		// serve is how many chunks the owner's origin sends before it stops answering (0: all,
		// paced).
		serve int
		// dead stops the owner's node once the fetcher's directory has seen it.
		dead bool
		// stalls is true when the owner is to be deemed stalled: the fetcher then takes from the
		// origin more than the chunks it owns, else exactly those.
		stalls bool
	}{
		{name: "progressing"},
		{name: "stalled", serve: 4, stalls: true},
		{name: "dead", serve: 4, dead: true, stalls: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data, sha := isoData(t, chunks*testChunk)
			src := newOrigin(t, data)
			// The owner's origin: one chunk every 100ms, or tc.serve chunks and then nothing
			// until the test ends.
			pace := time.NewTicker(100 * time.Millisecond)
			t.Cleanup(pace.Stop)
			release := make(chan struct{})
			var served atomic.Int64
			slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Range") != "" {
					if tc.serve > 0 && served.Add(1) > int64(tc.serve) {
						select {
						case <-release:
						case <-r.Context().Done():
						}
						http.Error(w, "stopped", http.StatusServiceUnavailable)
						return
					}
					select {
					case <-pace.C:
					case <-r.Context().Done():
						return
					}
				}
				src.srv.Config.Handler.ServeHTTP(w, r)
			}))
			t.Cleanup(slow.Close)
			t.Cleanup(func() { close(release) })

			own := startNode(t, "owner", nil, nodeConfig{opts: []fetch.Option{fetch.WithSettle(0)}})
			ctx, cancel := context.WithCancel(t.Context())
			ownerDone := make(chan struct{})
			held := make(chan struct{})
			var once sync.Once
			go func() {
				defer close(ownerDone)
				_, _ = own.fetcher.Fetch(ctx, fetch.Request{SHA512: sha, OriginURL: slow.URL + "/release.iso",
					Path: filepath.Join(own.cache, "release.iso")}, func(p fetch.Progress) {
					if p.Held >= 2*testChunk {
						once.Do(func() { close(held) })
					}
				})
			}()
			t.Cleanup(func() { cancel(); <-ownerDone })
			select {
			case <-held:
			case <-time.After(30 * time.Second):
				t.Fatal("the owner holds no chunk")
			}

			// The fetcher's directory sees the owner once, holding two chunks or so, and never
			// again: its view stays stale for the whole download.
			dir := inventory.NewDirectory("fetcher")
			require.NoError(t, dir.MergeState(own.dir.LocalState()))
			require.Len(t, dir.ISOHolders(sha), 1)
			members := &peer.StaticMembers{Local: "fetcher", List: []peer.Member{{Name: "fetcher"},
				{Name: "owner", Addr: own.srv.Listener.Addr().String()}}}
			if tc.dead {
				own.stop()
			}
			client := &http.Client{Transport: &http.Transport{}}
			t.Cleanup(client.CloseIdleConnections)
			f, err := fetch.NewFetcher(testLog(), dir, members, cache.NewStore(dir), fetch.WithHTTPClient(client),
				fetch.WithChunkSize(testChunk), fetch.WithSettle(0), fetch.WithStallAfter(stallAfter), fetch.WithToken(testToken))
			require.NoError(t, err)
			mine := newOrigin(t, data)
			// The chunks the fetcher asks its origin for.
			var askedMu sync.Mutex
			asked := map[int]bool{}
			mineSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var from, to int
				if _, err := fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &from, &to); err == nil {
					askedMu.Lock()
					asked[from/testChunk] = true
					askedMu.Unlock()
				}
				mine.srv.Config.Handler.ServeHTTP(w, r)
			}))
			t.Cleanup(mineSrv.Close)
			fctx, fcancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer fcancel()
			var p fetch.Progress
			_, err = f.Fetch(fctx, fetch.Request{SHA512: sha, OriginURL: mineSrv.URL + "/release.iso", Path: filepath.Join(t.TempDir(), "release.iso")},
				func(q fetch.Progress) { p = q })
			require.NoError(t, err)
			require.True(t, p.Verified)

			var owned int64
			var ownersAsked []int // chunks of the owner's share asked from the origin
			for c := range chunks {
				if fetch.Owner(c, []string{"fetcher", "owner"}) == "fetcher" {
					owned += testChunk
				} else if asked[c] {
					ownersAsked = append(ownersAsked, c)
				}
			}
			require.Positive(t, owned)
			require.Less(t, owned, int64(len(data)))
			require.EqualValues(t, len(data), p.FromOrigin+p.FromPeers)
			require.Equal(t, p.FromOrigin, mine.sent.Load(), "the origin sent only what was kept")
			t.Logf("origin sent %d bytes, %.2fx of the %d the fetcher owns; %d from the owner",
				mine.sent.Load(), float64(mine.sent.Load())/float64(owned), owned, p.FromPeers)
			if !tc.stalls {
				// The owner fetches every chunk, as it does not know the fetcher: the fetcher may
				// take some of its own from the owner too, but none of the owner's from the origin.
				require.Empty(t, ownersAsked, "chunks of the owner's share asked from the origin")
				require.LessOrEqual(t, mine.sent.Load(), owned, "the origin sends at most the chunks the fetcher owns")
				return
			}
			require.NotEmpty(t, ownersAsked, "the stalled owner's chunks come from the origin")
			require.Greater(t, mine.sent.Load(), owned)
			if tc.dead {
				require.Zero(t, p.FromPeers, "nothing came from the dead owner")
			}
		})
	}
}
