package registry_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/registry"
)

// peerFixture is a release of one image of an 11-byte layer, an honest peer that holds all of
// it, and what a node that holds the image's manifest but lacks its layer needs.
type peerFixture struct {
	ref, layerDigest string
	layer            []byte
	honest           *httptest.Server
	// honestGets counts the honest peer's GETs of the layer; gate, when set, holds each until
	// closed.
	honestGets atomic.Int64
	gate       chan struct{}
}

const peerToken = "ring"

func newPeerFixture(t *testing.T, gated bool) *peerFixture {
	t.Helper()
	f := &peerFixture{ref: "docker.io/library/small:v1", layer: []byte("eleven byte")}
	if gated {
		f.gate = make(chan struct{})
	}
	full := newMemContent()
	_, f.layerDigest = full.add(t, f.ref, f.layer)
	var lists registry.Lists
	lists.Set("v1", []string{f.ref})
	h, err := registry.NewHandler(full, &lists, registry.WithToken(peerToken))
	require.NoError(t, err)
	f.honest = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, f.layerDigest) {
			f.honestGets.Add(1)
			if f.gate != nil {
				<-f.gate
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(f.honest.Close)
	return f
}

// victim serves the fixture's image from a store that lacks its layer, asking first the hostile
// peers (in order), then the honest one.
func (f *peerFixture) victim(t *testing.T, cfg registry.PeersConfig, hostile ...*httptest.Server) (*httptest.Server, *registry.Metrics) {
	t.Helper()
	lacking := newMemContent()
	lacking.add(t, f.ref, f.layer)
	delete(lacking.blobs, f.layerDigest)
	list := []peer.Member{{Name: "a", Addr: "127.0.0.1:1"}}
	for i, s := range hostile {
		list = append(list, peer.Member{Name: "b" + string(rune('0'+i)), Addr: strings.TrimPrefix(s.URL, "http://")})
	}
	list = append(list, peer.Member{Name: "c", Addr: strings.TrimPrefix(f.honest.URL, "http://")})
	m, err := registry.NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	cfg.Token, cfg.Dir, cfg.Metrics = peerToken, t.TempDir(), m
	p, err := registry.NewPeers(&peer.StaticMembers{Local: "a", List: list}, cfg)
	require.NoError(t, err)
	var lists registry.Lists
	lists.Set("v1", []string{f.ref})
	h, err := registry.NewHandler(lacking, &lists, registry.WithPeers(p), registry.WithMetrics(m))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, m
}

// getBlob asks srv for the fixture's layer, giving up after a while.
func (f *peerFixture) getBlob(t *testing.T, srv *httptest.Server) (int, []byte) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(srv.URL + "/v2/library/small/blobs/" + f.layerDigest)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}

// A peer's answer is bounded by the blob's size and by how long the peer may stay silent: a peer
// that floods, lies about the length or stalls is left for the next, and the blob is served.
func TestPeerBlobsAreBounded(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	hostile := map[string]http.HandlerFunc{
		"floods": func(w http.ResponseWriter, _ *http.Request) {
			chunk := bytes.Repeat([]byte{0}, 1<<20)
			for range 64 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		},
		"announces another length": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "12")
			_, _ = w.Write([]byte("eleven byte!"))
		},
		"stalls half-way": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "11")
			_, _ = w.Write([]byte("eleve"))
			w.(http.Flusher).Flush()
			select {
			case <-stop:
			case <-r.Context().Done():
			}
		},
		"stalls before answering": func(_ http.ResponseWriter, r *http.Request) {
			select {
			case <-stop:
			case <-r.Context().Done():
			}
		},
	}
	for name, handler := range hostile {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newPeerFixture(t, false)
			bad := httptest.NewServer(handler)
			t.Cleanup(bad.Close)
			victim, m := f.victim(t, registry.PeersConfig{Idle: 300 * time.Millisecond}, bad)
			code, body := f.getBlob(t, victim)
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, f.layer, body)
			require.LessOrEqual(t, testutil.ToFloat64(m.ReceivedBytes()), float64(2*len(f.layer)), "bytes received from peers")
			require.Equal(t, 1.0, testutil.ToFloat64(m.Refusals()))
		})
	}
}

// Ten clients of one blob the node lacks share one fetch from the peers.
func TestOneFetchPerBlob(t *testing.T) {
	t.Parallel()
	f := newPeerFixture(t, true)
	victim, m := f.victim(t, registry.PeersConfig{})
	const clients = 10
	var wg sync.WaitGroup
	results := make(chan []byte, clients)
	for range clients {
		wg.Go(func() {
			code, body := f.getBlob(t, victim)
			if code == http.StatusOK {
				results <- body
			}
		})
	}
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(m.BlobFetches("started"))+testutil.ToFloat64(m.BlobFetches("joined")) == clients
	}, 10*time.Second, 5*time.Millisecond)
	close(f.gate)
	wg.Wait()
	close(results)
	n := 0
	for body := range results {
		require.Equal(t, f.layer, body)
		n++
	}
	require.Equal(t, clients, n)
	require.Equal(t, int64(1), f.honestGets.Load(), "fetches of the blob from the peer")
	require.Equal(t, 1.0, testutil.ToFloat64(m.BlobFetches("started")))
}
