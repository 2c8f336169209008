package fetch_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha512"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/cache"
	"github.com/upgrade-repo/upgrade-repo/peer/fetch"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
	"github.com/upgrade-repo/upgrade-repo/peer/memberlist"
	"github.com/upgrade-repo/upgrade-repo/peer/serve"
)

func TestMain(m *testing.M) {
	if os.Getenv(hostEnv) != "" {
		os.Exit(runHost())
	}
	// memberlist's Shutdown does not wait for a probe in flight; it ends at its own timeout.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

// testLog discards below warnings; set UPGRADE_REPO_TEST_LOG=1 to see everything.
func testLog() *slog.Logger {
	if os.Getenv("UPGRADE_REPO_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// origin serves one ISO over HTTP and counts the bytes it sends: in sent those of the chunks, in
// probes the requests for the first byte alone, which tell a fetcher the ISO's size.
type origin struct {
	srv    *httptest.Server
	sent   atomic.Int64
	probes atomic.Int64
}

func newOrigin(t *testing.T, data []byte) *origin {
	o := &origin{}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") == "bytes=0-0" {
			o.probes.Add(1)
			http.ServeContent(w, r, "release.iso", time.Time{}, bytes.NewReader(data))
			return
		}
		cw := &countWriter{ResponseWriter: w, n: &o.sent}
		http.ServeContent(cw, r, "release.iso", time.Time{}, bytes.NewReader(data))
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *origin) url() string { return o.srv.URL + "/release.iso" }

type countWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// isoData returns random content of the given size and its sha512.
func isoData(t *testing.T, size int) ([]byte, string) {
	b := make([]byte, size)
	_, err := rand.Read(b)
	require.NoError(t, err)
	s := sha512.Sum512(b)
	return b, hex.EncodeToString(s[:])
}

// node is one member: a directory, a store served over HTTP, a real memberlist member on
// 127.0.0.1 and a fetcher.
type node struct {
	name    string
	dir     *inventory.Directory
	store   *cache.Store
	srv     *httptest.Server
	gossip  *memberlist.Node
	fetcher *fetch.Fetcher
	metrics *peer.Metrics
	reg     *prometheus.Registry
	cache   string
	client  *http.Client
	stop    func()
	stopped sync.Once
}

type nodeConfig struct {
	wrap func(http.Handler) http.Handler
	opts []fetch.Option
}

const testChunk = 256 << 10

// testToken is the token of the test ring: every node requires it and sends it.
var testToken = peer.Token([]byte("the test ring's gossip key"))

func startNode(t *testing.T, name string, seeds []string, cfg nodeConfig) *node {
	t.Helper()
	n := &node{name: name, dir: inventory.NewDirectory(name), cache: t.TempDir(), reg: prometheus.NewRegistry()}
	var err error
	n.metrics, err = peer.NewMetrics(n.reg)
	require.NoError(t, err)
	n.store = cache.NewStore(n.dir)
	var h http.Handler = serve.NewHandler(testLog(), n.store, n.metrics, serve.RequireToken(testToken))
	if cfg.wrap != nil {
		h = cfg.wrap(h)
	}
	n.srv = httptest.NewServer(h)
	n.gossip, err = memberlist.New(testLog(), name, n.srv.Listener.Addr().String(), n.dir,
		memberlist.WithBind("127.0.0.1", 0), memberlist.WithLocalTimers(), memberlist.WithMetrics(n.metrics),
		memberlist.WithBatch(20*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = n.gossip.Run(ctx)
	}()
	n.client = &http.Client{Transport: &http.Transport{}}
	opts := append([]fetch.Option{fetch.WithHTTPClient(n.client), fetch.WithMetrics(n.metrics),
		fetch.WithChunkSize(testChunk), fetch.WithSettle(2 * time.Second), fetch.WithHedgeAfter(2 * time.Second),
		fetch.WithToken(testToken)}, cfg.opts...)
	n.fetcher, err = fetch.NewFetcher(testLog(), n.dir, n.gossip, n.store, opts...)
	require.NoError(t, err)
	n.stop = func() {
		n.stopped.Do(func() {
			cancel()
			<-done
			n.srv.CloseClientConnections()
			n.srv.Close()
			n.client.CloseIdleConnections()
		})
	}
	t.Cleanup(n.stop)
	if len(seeds) > 0 {
		_, err := n.gossip.Join(t.Context(), seeds)
		require.NoError(t, err)
	}
	return n
}

func (n *node) fetch(ctx context.Context, sha, url string) (*cache.LocalISO, fetch.Progress, error) {
	var last fetch.Progress
	l, err := n.fetcher.Fetch(ctx, fetch.Request{SHA512: sha, OriginURL: url, Path: filepath.Join(n.cache, "release.iso")},
		func(p fetch.Progress) { last = p })
	return l, last, err
}

func (n *node) requireISO(t *testing.T, want []byte) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(n.cache, "release.iso"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "%s holds a different ISO", n.name)
}

// waitFor waits, up to 45 seconds, until cond holds, re-checking at each directory change.
func waitFor(t *testing.T, dir *inventory.Directory, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, 45*time.Second, dir, what, cond)
}

// waitWithin waits, up to limit, until cond holds, re-checking at each directory change.
func waitWithin(t *testing.T, limit time.Duration, dir *inventory.Directory, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(limit)
	for !cond() {
		select {
		case <-dir.Changed():
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// metricValue returns the value of a gauge or counter of n's registry, with the given label value
// ("" for none); 0 when it was never set.
func metricValue(t *testing.T, n *node, name, label string) float64 {
	t.Helper()
	mfs, err := n.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
