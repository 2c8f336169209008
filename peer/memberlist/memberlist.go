// Package memberlist is the gossip adapter of package peer: it runs a hashicorp/memberlist ring,
// carries each node's HTTP address in its metadata, exchanges full directory inventories in the
// push/pull state and relays batched directory deltas in the broadcast queue. It is the only
// package that imports hashicorp/memberlist.
//
// Imports: peer, peer/inventory and hashicorp/memberlist; nothing else of this module.
package memberlist

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"

	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
)

// maxDelta bounds one directory delta so that it fits a gossip UDP packet (~1400 bytes) with the
// framing memberlist adds.
const maxDelta = 1200

// Node is this process's member of the gossip ring.
type Node struct {
	log     *slog.Logger
	dir     *inventory.Directory
	metrics *peer.Metrics
	ml      *memberlist.Memberlist
	queue   *memberlist.TransmitLimitedQueue
	meta    []byte
	batch   time.Duration

	closeOnce sync.Once
	addr      string
	logs      *slogWriter // memberlist's log lines, rate-limited

	// memberlist's *Node values change under its own lock; the events delegate copies what is
	// needed into this table instead.
	mu      sync.Mutex
	members map[string]peer.Member
}

var _ peer.Membership = (*Node)(nil)

type options struct {
	bindAddr  string
	bindPort  int
	advertise string
	key       []byte
	metrics   *peer.Metrics
	local     bool
	batch     time.Duration
}

// Option configures a Node.
type Option func(*options)

// WithBind sets the gossip address and port to listen on (default 0.0.0.0:7946; port 0 picks one).
func WithBind(addr string, port int) Option {
	return func(o *options) { o.bindAddr, o.bindPort = addr, port }
}

// WithAdvertise sets the address other members reach this one at (default: found from the bind
// address).
func WithAdvertise(addr string) Option { return func(o *options) { o.advertise = addr } }

// WithKey encrypts gossip with an AES key of 16, 24 or 32 bytes; every member needs the same key.
func WithKey(key []byte) Option { return func(o *options) { o.key = key } }

// WithMetrics records the number of members, the directory size and the bytes gossip sends.
func WithMetrics(m *peer.Metrics) Option { return func(o *options) { o.metrics = m } }

// WithLocalTimers uses memberlist's timers for a loopback network, with faster gossip: for tests.
func WithLocalTimers() Option { return func(o *options) { o.local = true } }

// WithBatch sets how long local directory changes are gathered before they are broadcast
// (default 100ms).
func WithBatch(d time.Duration) Option { return func(o *options) { o.batch = d } }

// New starts a gossip member named name whose HTTP server is at httpAddr (host:port), publishing
// and learning inventories through dir. The member is alone until Join.
func New(log *slog.Logger, name, httpAddr string, dir *inventory.Directory, opts ...Option) (*Node, error) {
	o := options{bindAddr: "0.0.0.0", bindPort: 7946, batch: 100 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	if name == "" || name != dir.Self() {
		return nil, fmt.Errorf("gossip member %q: the name must be the directory's (%q)", name, dir.Self())
	}
	httpAddr, err := completeHost(httpAddr, o.advertise, o.bindAddr)
	if err != nil {
		return nil, fmt.Errorf("gossip member %q: %w", name, err)
	}
	n := &Node{log: log, dir: dir, metrics: o.metrics, meta: []byte(httpAddr), batch: o.batch,
		members: map[string]peer.Member{}}
	if len(n.meta) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("gossip member %q: HTTP address %q too long", name, httpAddr)
	}
	cfg := memberlist.DefaultLANConfig()
	if o.local {
		cfg = memberlist.DefaultLocalConfig()
		cfg.GossipInterval = 50 * time.Millisecond
		cfg.PushPullInterval = 2 * time.Second
	}
	cfg.Name = name
	cfg.BindAddr, cfg.BindPort = o.bindAddr, o.bindPort
	cfg.AdvertisePort = o.bindPort
	if o.advertise != "" {
		cfg.AdvertiseAddr = o.advertise
	}
	cfg.SecretKey = o.key
	cfg.Delegate = (*delegate)(n)
	cfg.Events = (*events)(n)
	cfg.Logger = NewLogger(log)
	tr, err := newCountingTransport(o.bindAddr, o.bindPort, cfg.Logger, o.metrics)
	if err != nil {
		return nil, fmt.Errorf("start gossip member %q: %w", name, err)
	}
	cfg.Transport = tr
	if o.bindPort == 0 {
		cfg.BindPort = tr.GetAutoBindPort()
		cfg.AdvertisePort = cfg.BindPort
	}
	n.logs, _ = cfg.Logger.Writer().(*slogWriter)
	n.queue = &memberlist.TransmitLimitedQueue{RetransmitMult: cfg.RetransmitMult, NumNodes: func() int {
		if n.ml == nil {
			return 1
		}
		return n.ml.NumMembers()
	}}
	ml, err := memberlist.Create(cfg)
	if err != nil {
		_ = tr.Shutdown() // the error below says what failed
		return nil, fmt.Errorf("start gossip member %q: %w", name, err)
	}
	n.ml = ml
	ln := ml.LocalNode()
	n.addr = net.JoinHostPort(ln.Addr.String(), strconv.Itoa(int(ln.Port)))
	n.metrics.SetMembers(1)
	return n, nil
}

// Addr returns the gossip host:port other members reach this one at.
func (n *Node) Addr() string { return n.addr }

// HTTPAddr returns the HTTP host:port this member advertises.
func (n *Node) HTTPAddr() string { return string(n.meta) }

// completeHost gives an HTTP address without a specific host ("", "0.0.0.0", "::") the address
// other members reach this one at: the gossip advertise address, the bind address, or the
// private IP memberlist itself would pick.
func completeHost(httpAddr, advertise, bind string) (string, error) {
	host, port, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return "", fmt.Errorf("HTTP address %q: %w", httpAddr, err)
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return httpAddr, nil
	}
	switch ip := net.ParseIP(bind); {
	case advertise != "":
		host = advertise
	case ip != nil && !ip.IsUnspecified():
		host = bind
	default:
		host, err = sockaddr.GetPrivateIP()
		if err != nil || host == "" {
			return "", fmt.Errorf("HTTP address %q: no private IP to advertise, set one", httpAddr)
		}
	}
	return net.JoinHostPort(host, port), nil
}

// LocalName returns this member's name.
func (n *Node) LocalName() string { return n.dir.Self() }

// Members returns the live members with their HTTP addresses, this one included, sorted by name.
func (n *Node) Members() []peer.Member {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]peer.Member, 0, len(n.members))
	for _, m := range n.members {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Join contacts the seeds (host or host:port, default port 7946). A host name resolving to several
// addresses, such as a headless Service, is expanded to all of them. It returns how many members
// were reached; reaching none is an error unless no seed other than this node was given.
func (n *Node) Join(ctx context.Context, seeds []string) (int, error) {
	var addrs []string
	self := n.Addr()
	for _, s := range seeds {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			host, port = s, "7946"
		}
		ips, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			n.log.Warn("resolve gossip seed", "seed", s, "err", err)
			continue
		}
		for _, ip := range ips {
			if a := net.JoinHostPort(ip, port); a != self {
				addrs = append(addrs, a)
			}
		}
	}
	if len(addrs) == 0 {
		return 0, nil
	}
	joined, err := n.ml.Join(addrs)
	if joined == 0 && err != nil {
		return 0, fmt.Errorf("join gossip seeds %v: %w", addrs, err)
	}
	n.syncOthers(addrs)
	return joined, nil
}

// syncOthers exchanges full state with every member whose inventory the directory lacks after a
// join: a join exchanges state with the seeds only, and the other members' inventories would come
// only with their periodic push/pull, up to half a minute later. Until then a node could take
// everything from its seed with nobody to vouch for the bytes.
func (n *Node) syncOthers(contacted []string) {
	seen := map[string]bool{n.Addr(): true}
	for _, a := range contacted {
		seen[a] = true
	}
	var others []string
	for _, m := range n.ml.Members() {
		a := net.JoinHostPort(m.Addr.String(), strconv.Itoa(int(m.Port)))
		if m.Name == n.dir.Self() || seen[a] || n.dir.Knows(m.Name) {
			continue
		}
		seen[a] = true
		others = append(others, a)
	}
	if len(others) == 0 {
		return
	}
	if _, err := n.ml.Join(others); err != nil {
		n.log.Debug("exchange state with the other members", "members", len(others), "err", err)
	}
}

// Run broadcasts the local directory changes, batched, until ctx ends; then it leaves the ring
// and shuts the member down.
func (n *Node) Run(ctx context.Context) error {
	defer func() { _ = n.Shutdown() }() // the ring is being left; a failed shutdown changes nothing
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := n.ml.Leave(time.Second); err != nil {
				n.log.Debug("leave gossip ring", "err", err)
			}
			return nil
		case <-n.dir.Pending():
			// Gather the changes of the next moments into as few packets as possible.
			t := time.NewTimer(n.batch)
			select {
			case <-ctx.Done():
				t.Stop()
				continue
			case <-t.C:
			}
			for _, msg := range n.dir.TakeDeltas(maxDelta) {
				n.queue.QueueBroadcast(newBroadcast(msg))
			}
		case <-tick.C:
		}
		n.metrics.SetMembers(len(n.Members()))
		n.metrics.SetDirectoryEntries(n.dir.Len())
	}
}

// Shutdown stops the member at once, without leaving gracefully; it is safe to call twice.
func (n *Node) Shutdown() error {
	var err error
	n.closeOnce.Do(func() { err = n.ml.Shutdown() })
	return err
}

// broadcast is one directory delta of several items in the broadcast queue: it replaces nothing
// (a UniqueBroadcast, which the queue adds without comparing it with every queued one).
type broadcast []byte

func (b broadcast) Invalidates(memberlist.Broadcast) bool { return false }
func (b broadcast) Message() []byte                       { return b }
func (b broadcast) Finished()                             {}
func (b broadcast) UniqueBroadcast()                      {}

// namedBroadcast is a directory delta of one item (the usual one: an ISO's chunk bitmap while it
// downloads): a newer one of the same member and item replaces it in the queue, so that the
// queue holds at most one per member and item however fast bitmaps change, and members are sent
// current bitmaps rather than a backlog of stale ones.
type namedBroadcast struct {
	msg  []byte
	name string
}

func (b namedBroadcast) Invalidates(memberlist.Broadcast) bool { return false }
func (b namedBroadcast) Message() []byte                       { return b.msg }
func (b namedBroadcast) Finished()                             {}
func (b namedBroadcast) Name() string                          { return b.name }

// newBroadcast wraps a delta for the queue. Only a delta newer than all that the node knows of its
// item is ever queued (a local change, or news passed on), so replacing by name drops only older
// states.
func newBroadcast(msg []byte) memberlist.Broadcast {
	if name, ok := inventory.DeltaSubject(msg); ok {
		return namedBroadcast{msg: msg, name: name}
	}
	return broadcast(msg)
}

// delegate implements memberlist.Delegate on a Node.
type delegate Node

func (d *delegate) NodeMeta(limit int) []byte {
	if len(d.meta) > limit {
		return nil
	}
	return d.meta
}

func (d *delegate) NotifyMsg(b []byte) {
	changed, err := d.dir.ApplyDelta(b)
	if err != nil {
		d.log.Debug("drop directory delta", "err", err)
		return
	}
	if changed {
		// Pass news on, so that it reaches every member even if its sender reached only a few.
		d.queue.QueueBroadcast(newBroadcast(bytes.Clone(b)))
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.queue.GetBroadcasts(overhead, limit)
}

func (d *delegate) LocalState(bool) []byte { return d.dir.LocalState() }

func (d *delegate) MergeRemoteState(buf []byte, _ bool) {
	if err := d.dir.MergeState(buf); err != nil {
		d.log.Debug("drop directory state", "err", err)
	}
}

// events implements memberlist.EventDelegate on a Node.
type events Node

func (e *events) NotifyJoin(m *memberlist.Node)   { e.set(m) }
func (e *events) NotifyUpdate(m *memberlist.Node) { e.set(m) }
func (e *events) NotifyLeave(m *memberlist.Node) {
	e.mu.Lock()
	delete(e.members, m.Name)
	e.mu.Unlock()
	e.dir.Forget(m.Name)
}

func (e *events) set(m *memberlist.Node) {
	e.mu.Lock()
	e.members[m.Name] = peer.Member{Name: m.Name, Addr: string(m.Meta)}
	e.mu.Unlock()
	if m.Name != e.dir.Self() {
		e.dir.Restore(m.Name)
	}
}

// ReadKeyFile reads a gossip encryption key: 16, 24 or 32 bytes, raw or base64-encoded.
func ReadKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read gossip key: %w", err)
	}
	if k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b))); err == nil && validKeyLen(len(k)) {
		return k, nil
	}
	if validKeyLen(len(b)) {
		return b, nil
	}
	return nil, fmt.Errorf("gossip key %s: want 16, 24 or 32 bytes, raw or base64, got %d bytes", path, len(b))
}

func validKeyLen(n int) bool { return n == 16 || n == 24 || n == 32 }

// NewLogger returns a standard logger that forwards memberlist's "[LEVEL] memberlist: message"
// lines to log at the matching slog level. Lines above debug are rate-limited by kind (10 a
// minute; see logLimiter): memberlist logs a line for every bad packet it receives.
func NewLogger(l *slog.Logger) *log.Logger { return log.New(newSlogWriter(l), "", 0) }

type slogWriter struct {
	log   *slog.Logger
	limit *logLimiter
}

func newSlogWriter(l *slog.Logger) *slogWriter { return &slogWriter{log: l, limit: newLogLimiter()} }

var _ io.Writer = (*slogWriter)(nil)

func (w *slogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for _, lv := range []struct {
		tag   string
		level slog.Level
	}{{"[DEBUG]", slog.LevelDebug}, {"[TRACE]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo}, {"[WARN]", slog.LevelWarn}, {"[ERR]", slog.LevelError}, {"[ERROR]", slog.LevelError}} {
		if rest, ok := strings.CutPrefix(line, lv.tag); ok {
			level, line = lv.level, strings.TrimSpace(rest)
			break
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	if level <= slog.LevelDebug || !w.log.Enabled(context.Background(), level) {
		w.log.Log(context.Background(), level, "gossip", "detail", line)
		return len(p), nil
	}
	ok, suppressed := w.limit.allow(line)
	switch {
	case !ok:
	case suppressed > 0:
		w.log.Log(context.Background(), level, "gossip", "detail", line, "suppressed", suppressed)
	default:
		w.log.Log(context.Background(), level, "gossip", "detail", line)
	}
	return len(p), nil
}
