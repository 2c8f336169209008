package memberlist

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
)

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Garbage sent to the gossip port of a real member is logged a few lines a minute, not a line
// a packet.
func TestGarbageOnTheGossipPortIsLoggedBriefly(t *testing.T) {
	t.Parallel()
	for _, keyed := range []bool{true, false} {
		t.Run(fmt.Sprintf("keyed=%v", keyed), func(t *testing.T) {
			t.Parallel()
			var key []byte
			if keyed {
				key = bytes.Repeat([]byte{7}, 32)
			}
			var logs lockedBuffer
			dir := inventory.NewDirectory("a")
			n, err := New(slog.New(slog.NewTextHandler(&logs, nil)), "a", "127.0.0.1:8080", dir,
				WithBind("127.0.0.1", 0), WithLocalTimers(), WithKey(key))
			require.NoError(t, err)
			t.Cleanup(func() { _ = n.Shutdown() })

			conn, err := net.Dial("udp", n.Addr())
			require.NoError(t, err)
			defer conn.Close()
			const packets = 2000
			garbage := make([]byte, 512)
			sent := 0
			deadline := time.After(30 * time.Second)
			// UDP may drop packets: send until memberlist has seen as many lines as packets.
			for n.logs.limit.seen.Load() < packets {
				if sent < 50*packets {
					_, _ = rand.Read(garbage)
					garbage[0] = byte(sent % 32) // every message type, and unknown ones
					_, _ = conn.Write(garbage)
					sent++
					continue
				}
				select {
				case <-deadline:
					t.Fatalf("memberlist logged %d lines for %d packets", n.logs.limit.seen.Load(), sent)
				case <-time.After(10 * time.Millisecond):
				}
			}
			lines := strings.Count(logs.String(), "\n")
			t.Logf("%d packets sent, %d lines seen, %d logged", sent, n.logs.limit.seen.Load(), lines)
			require.LessOrEqual(t, lines, 200, logs.String())
			require.Positive(t, lines, "the garbage is still reported")
		})
	}
}

// The limiter passes burst lines of a kind per window, and the next one after a window with
// drops says how many were dropped; other kinds are not held back.
func TestLogLimiter(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	l := newLogLimiter()
	l.now = func() time.Time { return now }
	passed := 0
	for i := range 1000 {
		if ok, _ := l.allow(fmt.Sprintf("Decrypt packet failed: bad from=10.0.%d.%d:%d", i/256, i%256, 40000+i)); ok {
			passed++
		}
	}
	require.Equal(t, logBurst, passed)
	ok, _ := l.allow("Suspect node-b has failed, no acks received")
	require.True(t, ok, "another kind is not held back")

	now = now.Add(logWindow)
	ok, suppressed := l.allow("Decrypt packet failed: bad from=10.9.9.9:1")
	require.True(t, ok)
	require.Equal(t, 1000-logBurst, suppressed)

	// However many kinds the lines make up, the limiter's memory stays bounded.
	for i := range 10 * logKinds {
		l.allow(fmt.Sprintf("%c%c%c unknown complaint", 'a'+i%26, 'a'+i/26%26, 'a'+i/676%26))
	}
	require.LessOrEqual(t, len(l.kinds), logKinds+1)
}
