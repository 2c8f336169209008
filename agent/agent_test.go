package agent_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/agent"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
	"github.com/upgrade-repo/upgrade-repo/peer/memberlist"
	"github.com/upgrade-repo/upgrade-repo/release/pack"
)

// deps returns the dependencies of an agent named node on loopback: a real gossip member.
func deps(t *testing.T, node string) agent.Deps {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	log := slog.New(slog.DiscardHandler)
	dir := inventory.NewDirectory(node)
	g, err := memberlist.New(log, node, ln.Addr().String(), dir, memberlist.WithBind("127.0.0.1", 0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Shutdown() })
	return agent.Deps{Log: log, Listener: ln, Directory: dir, Gossip: g, Registry: prometheus.NewRegistry()}
}

func TestNewRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	sum := "sha512:" + strings.Repeat("ab", 64)
	tests := []struct {
		name string
		cfg  agent.Config
		deps func(agent.Deps) agent.Deps
	}{
		{name: "no node", cfg: agent.Config{ISOFile: "r.iso"}},
		{name: "URL without checksum", cfg: agent.Config{Node: "n", ISOURL: "http://o/r.iso", CacheDir: "/c"}},
		{name: "checksum without URL", cfg: agent.Config{Node: "n", ISOChecksum: sum, CacheDir: "/c"}},
		{name: "URL not http", cfg: agent.Config{Node: "n", ISOURL: "ftp://o/r.iso", ISOChecksum: sum, CacheDir: "/c"}},
		{name: "bad checksum", cfg: agent.Config{Node: "n", ISOURL: "http://o/r.iso", ISOChecksum: "md5:00", CacheDir: "/c"}},
		{name: "no cache", cfg: agent.Config{Node: "n", ISOURL: "http://o/r.iso", ISOChecksum: sum}},
		{name: "negative grace", cfg: agent.Config{Node: "n", ISOFile: "r.iso", Grace: -time.Second}},
		{name: "nothing to hold and no cluster", cfg: agent.Config{Node: "n", CacheDir: "/c"}},
		{name: "no listener", cfg: agent.Config{Node: "n", ISOFile: "r.iso"}, deps: func(d agent.Deps) agent.Deps { d.Listener = nil; return d }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := deps(t, "n")
			if tc.deps != nil {
				d = tc.deps(d)
			}
			_, err := agent.New(tc.cfg, d)
			require.Error(t, err)
		})
	}
}

// An agent given a local ISO verifies it, serves the release and reports itself ready; it stops
// with its context.
func TestAgentServesAGivenISO(t *testing.T) {
	t.Parallel()
	isotest.RequireXorriso(t)
	path := filepath.Join(t.TempDir(), "release.iso")
	_, err := pack.Build(t.Context(), pack.Demo("v1.5.2", 2, 4096, 1<<20), path)
	require.NoError(t, err)
	d := deps(t, "n1")
	addr := d.Listener.Addr().String()
	a, err := agent.New(agent.Config{Node: "n1", ISOFile: path, Grace: time.Second}, d)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	var s agent.Status
	deadline := time.After(30 * time.Second)
	for !s.Ready {
		select {
		case err := <-done:
			t.Fatalf("the agent stopped: %v", err)
		case <-deadline:
			t.Fatalf("the agent never turned ready: %+v", s)
		case <-time.After(20 * time.Millisecond):
		}
		s = a.Board().Snapshot()
	}
	require.Equal(t, agent.ISOVerified, s.ISO.State)
	require.Equal(t, 1, s.Members)

	resp, err := http.Get("http://" + addr + "/v1/release")
	require.NoError(t, err)
	var rel map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rel))
	resp.Body.Close()
	require.Equal(t, "v1.5.2", rel["harvester"])
	resp, err = http.Get("http://" + addr + "/v1/status")
	require.NoError(t, err)
	var got agent.Status
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	resp.Body.Close()
	require.True(t, got.Ready)
	require.Equal(t, s.ISO.SHA512, got.ISO.SHA512)
	// /metrics tells the same: the node's repo ready, its ISO Ready and held whole.
	resp, err = http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(metrics), "\nupgrade_repo_agent_ready 1\n")
	require.Contains(t, string(metrics), "\nupgrade_repo_agent_iso_state{state=\"Ready\"} 1\n")
	require.Contains(t, string(metrics), "\nupgrade_repo_agent_iso_held_bytes "+strconv.FormatFloat(float64(s.ISO.Size), 'g', -1, 64)+"\n")

	cancel()
	require.NoError(t, <-done)
}
