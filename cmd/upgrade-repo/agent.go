package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/upgrade-repo/upgrade-repo/acquire"
	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/memberlist"
	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd"
	"github.com/upgrade-repo/upgrade-repo/repo"
)

const agentUsage = `usage: upgrade-repo agent (--iso FILE | --iso-url URL --iso-checksum sha512:HEX --cache-dir DIR) [flags]

The per-node agent: it joins the gossip ring, gets the release ISO (a local file, else chunks from
peers in parallel, else the origin URL for what no peer has), verifies its sha512, serves it like
"serve" does, shares it with its peers and, with --containerd-sock, preloads its images.
GET /v1/status reports the node's state as JSON.

`

// agentConfig is the agent's command line.
type agentConfig struct {
	node, listen, advertise, gossipListen, gossipAdvertise, join string
	cacheDir, isoURL, isoChecksum, isoFile, sock, keyFile        string
	grace, settle                                                time.Duration
}

// runAgent runs the per-node agent until the process is signalled.
func runAgent(ctx context.Context, a *app, args []string) error {
	host, _ := os.Hostname()
	var c agentConfig
	fset := flag.NewFlagSet("agent", flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	fset.Usage = func() { fmt.Fprint(a.stderr, agentUsage); fset.PrintDefaults() }
	fset.StringVar(&c.node, "node-name", host, "this node's unique name in the gossip ring")
	fset.StringVar(&c.listen, "listen", ":8080", "the HTTP address to serve the repo, peers and status on")
	fset.StringVar(&c.advertise, "advertise", "", "host:port peers reach the HTTP server at (default: the gossip address with the --listen port)")
	fset.StringVar(&c.gossipListen, "gossip-listen", ":7946", "the gossip address (TCP and UDP)")
	fset.StringVar(&c.gossipAdvertise, "gossip-advertise", "", "the IP other members reach this one at (default: found from the interfaces)")
	fset.StringVar(&c.join, "join", "", "comma-separated gossip seeds, host[:port]; a name resolving to several addresses joins them all")
	fset.StringVar(&c.cacheDir, "cache-dir", "", "where the downloaded ISO is kept (required with --iso-url)")
	fset.StringVar(&c.isoURL, "iso-url", "", "the origin URL of the release ISO, for what no peer has")
	fset.StringVar(&c.isoChecksum, "iso-checksum", "", "the ISO's checksum, sha512:HEX (required with --iso-url)")
	fset.StringVar(&c.isoFile, "iso", "", "a release ISO already on this node")
	fset.StringVar(&c.sock, "containerd-sock", "", "containerd's socket; when set, the release's images are preloaded")
	fset.StringVar(&c.keyFile, "gossip-key-file", "", "a file holding the gossip encryption key (16, 24 or 32 bytes, raw or base64)")
	fset.DurationVar(&c.grace, "grace", 30*time.Second, "how long in-flight requests may run after SIGTERM")
	fset.DurationVar(&c.settle, "settle", 3*time.Second, "how long nodes starting together wait to split the origin's work before asking it")
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := c.validate(fset.NArg()); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return agent(ctx, a, c)
}

func (c *agentConfig) validate(nargs int) error {
	switch {
	case nargs > 0:
		return errors.New("agent takes no arguments")
	case c.node == "":
		return errors.New("--node-name is required")
	case c.isoFile == "" && c.isoURL == "" && c.isoChecksum == "":
		return errors.New("one of --iso FILE or --iso-url URL with --iso-checksum is required")
	case c.isoFile == "" && c.isoChecksum == "":
		return errors.New("--iso-checksum is required with --iso-url")
	case c.isoFile == "" && c.cacheDir == "":
		return errors.New("--cache-dir is required with --iso-url")
	}
	if c.isoChecksum != "" {
		if _, err := peer.ParseChecksum(c.isoChecksum); err != nil {
			return fmt.Errorf("--iso-checksum: %v", err)
		}
	}
	for name, addr := range map[string]string{"--listen": c.listen, "--gossip-listen": c.gossipListen} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s %q: %v", name, addr, err)
		}
	}
	return nil
}

// agentStatus is the body of /v1/status.
type agentStatus struct {
	Node    string          `json:"node"`
	Ready   bool            `json:"ready"`
	Members int             `json:"members"`
	ISO     isoStatus       `json:"iso"`
	Preload *preload.Status `json:"preload,omitempty"`
	Error   string          `json:"error,omitempty"`
}

type isoStatus struct {
	SHA512 string `json:"sha512,omitempty"`
	// State is one of pending, fetching, verified, failed.
	State string `json:"state"`
	peer.Progress
}

// statusBoard holds the agent's status for /v1/status.
type statusBoard struct {
	mu       sync.Mutex
	s        agentStatus
	members  func() int
	preloadr *preload.Preloader
}

func (b *statusBoard) update(f func(*agentStatus)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(&b.s)
}

func (b *statusBoard) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	b.mu.Lock()
	s := b.s
	p := b.preloadr
	b.mu.Unlock()
	s.Members = b.members()
	if p != nil {
		st := p.Status()
		s.Preload = &st
	}
	w.Header().Set("Cache-Control", "no-store")
	_ = writeJSON(w, s)
}

func agent(ctx context.Context, a *app, c agentConfig) error {
	gHost, gPortStr, _ := net.SplitHostPort(c.gossipListen)
	gPort, err := strconv.Atoi(gPortStr)
	if err != nil {
		return fmt.Errorf("%w: --gossip-listen port %q", errUsage, gPortStr)
	}
	if gHost == "" {
		gHost = "0.0.0.0"
	}
	var key []byte
	if c.keyFile != "" {
		if key, err = memberlist.ReadKeyFile(c.keyFile); err != nil {
			return err
		}
	}
	if c.cacheDir != "" {
		if err := os.MkdirAll(c.cacheDir, 0o755); err != nil {
			return fmt.Errorf("create cache dir: %w", err)
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rm, err := repo.NewMetrics(reg)
	if err != nil {
		return err
	}
	pm, err := peer.NewMetrics(reg)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.listen, err)
	}
	advertise := c.advertise
	if advertise == "" {
		// A specific listen host is the address; otherwise memberlist completes it with the
		// gossip advertise address.
		host, port, _ := net.SplitHostPort(ln.Addr().String())
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			host = c.gossipAdvertise
		}
		advertise = net.JoinHostPort(host, port)
	}

	dir := peer.NewDirectory(c.node)
	store := peer.NewStore(dir, nil)
	gopts := []memberlist.Option{memberlist.WithBind(gHost, gPort), memberlist.WithMetrics(pm)}
	if c.gossipAdvertise != "" {
		gopts = append(gopts, memberlist.WithAdvertise(c.gossipAdvertise))
	}
	if key != nil {
		gopts = append(gopts, memberlist.WithKey(key))
	}
	gossip, err := memberlist.New(a.log, c.node, advertise, dir, gopts...)
	if err != nil {
		ln.Close()
		return err
	}
	seeds := splitSeeds(c.join)
	settle := c.settle
	if len(seeds) == 0 {
		settle = 0 // alone by design: nobody to split the work with
	}
	fetcher, err := peer.NewFetcher(a.log, dir, gossip, store, peer.WithMetrics(pm), peer.WithSettle(settle))
	if err != nil {
		ln.Close()
		gossip.Shutdown()
		return err
	}

	board := &statusBoard{members: func() int { return len(gossip.Members()) }}
	board.s.Node = c.node
	board.s.ISO.State = "pending"

	server := repo.NewServer(rm, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), a.log)
	peers := peer.NewHandler(a.log, store, pm)
	mux := http.NewServeMux()
	mux.Handle("/v1/iso/", peers)
	mux.Handle("/v2/", peers)
	mux.Handle("GET /v1/status", board)
	mux.Handle("/", server)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	a.log.Info("agent listening", "node", c.node, "http", ln.Addr().String(), "advertise", gossip.HTTPAddr(), "gossip", gossip.Addr())

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	g.Go(func() error { return gossip.Run(gctx) })
	g.Go(func() error { joinLoop(gctx, a, gossip, seeds); return nil })
	var closeISO func() error
	g.Go(func() error {
		path, sum, err := agentISO(gctx, a, c, store, fetcher, board)
		if err != nil {
			board.update(func(s *agentStatus) { s.ISO.State, s.Error = "failed", err.Error() })
			return err
		}
		h, closer, err := openRelease(path, sum, rm, a.log)
		if err != nil {
			board.update(func(s *agentStatus) { s.Error = err.Error() })
			return err
		}
		closeISO = closer
		server.SetHandler(h)
		board.update(func(s *agentStatus) { s.Ready = true })
		if c.sock == "" {
			return nil
		}
		return agentPreload(gctx, a, c, path, board)
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.grace)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
			return fmt.Errorf("shutdown: in-flight requests cut after %s: %w", c.grace, err)
		}
		return nil
	})
	err = g.Wait()
	if closeISO != nil {
		closeISO()
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func splitSeeds(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// joinLoop joins the seeds, again and again until one answers: in a cluster the headless Service
// has no other endpoint until the other agents start.
func joinLoop(ctx context.Context, a *app, g *memberlist.Node, seeds []string) {
	if len(seeds) == 0 {
		return
	}
	wait := time.Second
	for {
		n, err := g.Join(ctx, seeds)
		if err == nil && (n > 0 || len(g.Members()) > 1) {
			a.log.Info("joined the gossip ring", "contacted", n, "members", len(g.Members()))
			return
		}
		if err != nil {
			a.log.Debug("join gossip ring", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// agentISO gets the verified ISO: a local file, or a fetch from peers and the origin, retried
// until it succeeds or ctx ends.
func agentISO(ctx context.Context, a *app, c agentConfig, store *peer.Store, f *peer.Fetcher, board *statusBoard) (string, acquire.Checksum, error) {
	var sumHex string
	if c.isoChecksum != "" {
		sumHex, _ = peer.ParseChecksum(c.isoChecksum)
	}
	if c.isoFile != "" {
		if sumHex == "" {
			s, err := acquire.Sum(ctx, c.isoFile, nil)
			if err != nil {
				return "", acquire.Checksum{}, err
			}
			sumHex = s.Hex()
		}
		sum, _ := acquire.ParseChecksum("sha512:" + sumHex)
		board.update(func(s *agentStatus) { s.ISO.SHA512, s.ISO.State = sumHex, "verifying" })
		l, err := store.AddComplete(c.isoFile, sumHex, peer.DefaultChunkSize)
		if err != nil {
			return "", sum, err
		}
		board.update(func(s *agentStatus) {
			s.ISO.State = "verified"
			s.ISO.Progress = peer.Progress{Size: l.Size(), Held: l.Size(), Verified: true}
		})
		return c.isoFile, sum, nil
	}
	sum, _ := acquire.ParseChecksum("sha512:" + sumHex)
	req := peer.Request{SHA512: sumHex, OriginURL: c.isoURL, Path: filepath.Join(c.cacheDir, sumHex+".iso")}
	board.update(func(s *agentStatus) { s.ISO.SHA512, s.ISO.State = sumHex, "fetching" })
	wait := time.Second
	for {
		l, err := f.Fetch(ctx, req, func(p peer.Progress) { board.update(func(s *agentStatus) { s.ISO.Progress = p }) })
		if err == nil {
			board.update(func(s *agentStatus) { s.ISO.State, s.Error = "verified", "" })
			return l.Path(), sum, nil
		}
		if ctx.Err() != nil {
			return "", sum, ctx.Err()
		}
		a.log.Warn("fetch ISO, retrying", "err", err, "in", wait)
		board.update(func(s *agentStatus) { s.Error = err.Error() })
		select {
		case <-ctx.Done():
			return "", sum, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Minute)
	}
}

// agentPreload imports the release's images from the local ISO into containerd.
func agentPreload(ctx context.Context, a *app, c agentConfig, path string, board *statusBoard) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	fsys, err := iso.Open(f, st.Size())
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	cs, err := containerd.New(ctx, c.sock, containerd.WithLogger(a.log))
	if err != nil {
		return err
	}
	defer cs.Close()
	p, err := preload.New(cs, []preload.Source{preload.NewFSSource("iso", fsys)},
		preload.WithLogger(a.log), preload.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		return err
	}
	board.mu.Lock()
	board.preloadr = p
	board.mu.Unlock()
	_, _, err = p.Run(ctx, fs.FS(fsys))
	if err != nil && ctx.Err() == nil {
		// The repo keeps serving: the status reports the failure for the sequencer to act on.
		a.log.Error("preload images", "err", err)
		return nil
	}
	return nil
}
