package memberlist

import (
	"fmt"
	"log"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/upgrade-repo/upgrade-repo/peer"
)

// countingTransport is memberlist's own network transport that counts the bytes it sends:
// packets (UDP: probes, acks, gossip, directory deltas) and streams (TCP: push/pull exchanges of
// full state, in both directions, and fallback probes).
type countingTransport struct {
	*memberlist.NetTransport
	metrics *peer.Metrics

	streams chan net.Conn
	stop    chan struct{} // closed at Shutdown: accepted streams are closed, no longer handed on
	done    chan struct{} // closed once the listeners are closed
	once    sync.Once
	wg      sync.WaitGroup
}

var _ memberlist.NodeAwareTransport = (*countingTransport)(nil)

// newCountingTransport listens on addr:port (port 0 picks one, the same for TCP and UDP).
func newCountingTransport(addr string, port int, logger *log.Logger, m *peer.Metrics) (*countingTransport, error) {
	cfg := &memberlist.NetTransportConfig{BindAddrs: []string{addr}, BindPort: port, Logger: logger}
	// A port picked for TCP may be taken for UDP by the time it is bound; memberlist retries the
	// same way.
	tries := 1
	if port == 0 {
		tries = 10
	}
	var nt *memberlist.NetTransport
	var err error
	for range tries {
		if nt, err = memberlist.NewNetTransport(cfg); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listen for gossip on %s port %d: %w", addr, port, err)
	}
	t := &countingTransport{NetTransport: nt, metrics: m, streams: make(chan net.Conn),
		stop: make(chan struct{}), done: make(chan struct{})}
	t.wg.Add(1)
	go t.forwardStreams()
	return t, nil
}

// forwardStreams hands the accepted connections on, counting what is written to them. It keeps
// taking connections until the listeners are closed, as the listener blocks until one is taken.
func (t *countingTransport) forwardStreams() {
	defer t.wg.Done()
	in := t.NetTransport.StreamCh()
	for {
		select {
		case <-t.done:
			return
		case c := <-in:
			select {
			case t.streams <- t.count(c):
			case <-t.stop:
				_ = c.Close()
			}
		}
	}
}

func (t *countingTransport) count(c net.Conn) net.Conn {
	return &countingConn{Conn: c, metrics: t.metrics}
}

// WriteTo sends a packet.
func (t *countingTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	ts, err := t.NetTransport.WriteTo(b, addr)
	if err == nil {
		t.metrics.GossipSent(peer.TransportPacket, len(b))
	}
	return ts, err
}

// WriteToAddress sends a packet.
func (t *countingTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	ts, err := t.NetTransport.WriteToAddress(b, a)
	if err == nil {
		t.metrics.GossipSent(peer.TransportPacket, len(b))
	}
	return ts, err
}

// DialTimeout opens a stream to another member.
func (t *countingTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout opens a stream to another member.
func (t *countingTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	c, err := t.NetTransport.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	return t.count(c), nil
}

// StreamCh returns the streams other members opened.
func (t *countingTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown closes the listeners and stops handing streams on.
func (t *countingTransport) Shutdown() error {
	var err error
	t.once.Do(func() {
		close(t.stop)
		err = t.NetTransport.Shutdown()
		close(t.done)
		t.wg.Wait()
	})
	return err
}

// countingConn counts the bytes written to a gossip stream.
type countingConn struct {
	net.Conn
	metrics *peer.Metrics
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.metrics.GossipSent(peer.TransportStream, n)
	return n, err
}
