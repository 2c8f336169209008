package memberlist

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
)

// memberlist's Shutdown does not wait for a probe in flight; it ends at its own timeout.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

func start(t *testing.T, name string, key []byte, opts ...Option) *Node {
	t.Helper()
	dir := inventory.NewDirectory(name)
	opts = append([]Option{WithBind("127.0.0.1", 0), WithLocalTimers(), WithKey(key), WithBatch(10 * time.Millisecond)}, opts...)
	n, err := New(slog.New(slog.DiscardHandler), name, "127.0.0.1:8080", dir, opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return n
}

// Members sharing a key gossip, encrypted; a member with another key cannot join them.
func TestEncryptedGossip(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{7}, 32)
	a, b := start(t, "a", key), start(t, "b", key)
	n, err := b.Join(t.Context(), []string{a.Addr()})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	sha := string(bytes.Repeat([]byte("ab"), 64))
	require.NoError(t, a.dir.SetISO(inventory.ISO{SHA512: sha, Size: 1 << 20, ChunkSize: 1 << 20, Complete: true}))
	deadline := time.After(20 * time.Second)
	for len(b.dir.ISOHolders(sha)) == 0 {
		select {
		case <-b.dir.Changed():
		case <-deadline:
			t.Fatal("the ISO never reached b")
		}
	}
	require.Equal(t, []peer.Member{{Name: "a", Addr: "127.0.0.1:8080"}, {Name: "b", Addr: "127.0.0.1:8080"}}, b.Members())

	stranger := start(t, "stranger", bytes.Repeat([]byte{8}, 32))
	_, err = stranger.Join(t.Context(), []string{a.Addr()})
	require.Error(t, err)
	require.Len(t, a.Members(), 2)
}

func TestReadKeyFile(t *testing.T) {
	t.Parallel()
	raw := bytes.Repeat([]byte{1}, 16)
	tests := []struct {
		name    string
		content []byte
		want    []byte
		wantErr bool
	}{
		{name: "base64", content: []byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32)) + "\n"), want: bytes.Repeat([]byte{2}, 32)},
		{name: "raw", content: raw, want: raw},
		{name: "too short", content: []byte("short"), wantErr: true},
		{name: "empty", content: nil, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(t.TempDir(), "key")
			require.NoError(t, os.WriteFile(p, tc.content, 0o600))
			got, err := ReadKeyFile(p)
			if tc.wantErr {
				require.ErrorContains(t, err, p)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	_, err := ReadKeyFile(filepath.Join(t.TempDir(), "missing"))
	require.Error(t, err)
}

func TestLoggerBridge(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := NewLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	l.Printf("[DEBUG] memberlist: quiet")
	l.Printf("[WARN] memberlist: Refuting a suspect message")
	l.Printf("[ERR] memberlist: Failed to send")
	out := buf.String()
	require.NotContains(t, out, "quiet")
	require.Contains(t, out, `level=WARN msg=gossip detail="Refuting a suspect message"`)
	require.Contains(t, out, `level=ERROR msg=gossip detail="Failed to send"`)
}

func TestHTTPAddressIsCompleted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, http, advertise, bind, want string
	}{
		{name: "specific", http: "10.0.0.5:8080", want: "10.0.0.5:8080"},
		{name: "from advertise", http: ":8080", advertise: "10.1.2.3", bind: "0.0.0.0", want: "10.1.2.3:8080"},
		{name: "from bind", http: "0.0.0.0:8080", bind: "127.0.0.4", want: "127.0.0.4:8080"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := completeHost(tc.http, tc.advertise, tc.bind)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	_, err := completeHost("no-port", "", "")
	require.Error(t, err)
}

// The bytes gossip sends are counted by transport: a join exchanges full state over a stream, and
// probes and deltas travel as packets.
func TestGossipBytesCounted(t *testing.T) {
	t.Parallel()
	m, err := peer.NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	a, b := start(t, "a", nil), start(t, "b", nil, WithMetrics(m))
	_, err = b.Join(t.Context(), []string{a.Addr()})
	require.NoError(t, err)
	require.Positive(t, testutil.ToFloat64(m.GossipSentBytes.WithLabelValues("stream")), "the join's full-state exchange")
	digest := string(bytes.Repeat([]byte("cd"), 64))
	require.NoError(t, b.dir.SetISO(inventory.ISO{SHA512: digest, Size: 100, ChunkSize: 10, Complete: true}))
	deadline := time.After(20 * time.Second)
	for len(a.dir.ISOHolders(digest)) == 0 {
		select {
		case <-a.dir.Changed():
		case <-deadline:
			t.Fatal("the ISO's entry never reached a")
		}
	}
	// b counts a packet once its send returns, which can be after a has applied it.
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.GossipSentBytes.WithLabelValues("packet")) > 0 },
		5*time.Second, 10*time.Millisecond, "probes and the delta")
}
