package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func agentStatusOf(t *testing.T, addr string) (agentStatus, bool) {
	resp, err := http.Get("http://" + addr + "/v1/status")
	if err != nil {
		return agentStatus{}, false
	}
	defer resp.Body.Close()
	var s agentStatus
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	return s, true
}

func waitReady(t *testing.T, addr string, done <-chan error) agentStatus {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		if s, ok := agentStatusOf(t, addr); ok && s.Ready {
			return s
		}
		select {
		case err := <-done:
			t.Fatalf("agent at %s stopped: %v", addr, err)
		case <-deadline:
			t.Fatalf("agent at %s never turned ready", addr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Two agents: the first gets the release from the origin, the second joins it and gets the whole
// ISO from it; both serve the release, and the origin sent one copy.
func TestAgentsShareTheRelease(t *testing.T) {
	t.Parallel()
	isoPath, sum := packTestISO(t)
	var sent atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(isoPath)
		require.NoError(t, err)
		defer f.Close()
		st, err := f.Stat()
		require.NoError(t, err)
		http.ServeContent(&countingResponse{ResponseWriter: w, n: &sent}, r, "release.iso", st.ModTime(), f)
	}))
	defer origin.Close()
	ctx, cancel := context.WithCancel(t.Context())
	a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}
	start := func(name, join string) (string, string, chan error) {
		httpAddr, gossipAddr := freeAddr(t), freeAddr(t)
		args := []string{"--node-name", name, "--listen", httpAddr, "--gossip-listen", gossipAddr,
			"--cache-dir", t.TempDir(), "--iso-url", origin.URL + "/release.iso", "--iso-checksum", sum.String(),
			"--settle", "200ms"}
		if join != "" {
			args = append(args, "--join", join)
		}
		done := make(chan error, 1)
		go func() { done <- runAgent(ctx, a, args) }()
		return httpAddr, gossipAddr, done
	}
	first, firstGossip, firstDone := start("first", "")
	s := waitReady(t, first, firstDone)
	require.Equal(t, "verified", s.ISO.State)
	require.Equal(t, sum.Hex(), s.ISO.SHA512)
	size := s.ISO.Size
	require.Equal(t, size, s.ISO.FromOrigin)

	second, _, secondDone := start("second", firstGossip)
	s = waitReady(t, second, secondDone)
	require.Equal(t, 2, s.Members)
	require.Equal(t, size, s.ISO.FromPeers)
	require.Zero(t, s.ISO.FromOrigin)
	require.Equal(t, size, sent.Load(), "the origin sent one copy for two nodes")

	resp, err := http.Get("http://" + second + "/v1/release")
	require.NoError(t, err)
	var rel map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rel))
	resp.Body.Close()
	require.Equal(t, "v1.5.2", rel["harvester"])

	cancel()
	require.NoError(t, <-firstDone)
	require.NoError(t, <-secondDone)
}

func TestAgentUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
	}{
		{name: "nothing to serve", args: []string{"--node-name", "n"}},
		{name: "url without checksum", args: []string{"--node-name", "n", "--iso-url", "http://x/r.iso", "--cache-dir", "/tmp"}},
		{name: "bad checksum", args: []string{"--node-name", "n", "--iso-url", "http://x/r.iso", "--cache-dir", "/tmp", "--iso-checksum", "md5:00"}},
		{name: "url without cache", args: []string{"--node-name", "n", "--iso-url", "http://x/r.iso", "--iso-checksum", "sha512:" + strings.Repeat("a", 128)}},
		{name: "bad listen", args: []string{"--node-name", "n", "--iso", "/r.iso", "--listen", "nope"}},
		{name: "argument", args: []string{"--node-name", "n", "--iso", "/r.iso", "extra"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}
			err := runAgent(t.Context(), a, tc.args)
			require.ErrorIs(t, err, errUsage)
		})
	}
}

type countingResponse struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingResponse) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}
