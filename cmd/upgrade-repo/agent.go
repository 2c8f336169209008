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
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/acquire"
	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/chunks"
	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/memberlist"
	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd"
	"github.com/upgrade-repo/upgrade-repo/redact"
	"github.com/upgrade-repo/upgrade-repo/repo"
	"github.com/upgrade-repo/upgrade-repo/sequencer/report"
)

const agentUsage = `usage: upgrade-repo agent (--iso FILE | --iso-url URL --iso-checksum sha512:HEX --cache-dir DIR) [flags]
       upgrade-repo agent --report --cache-dir DIR [--kubeconfig FILE] [flags]

The per-node agent: it joins the gossip ring, gets the release ISO (a local file, else chunks from
peers in parallel, else the origin URL for what no peer has), verifies its sha512, serves it like
"serve" does, shares it with its peers and, with --containerd-sock, preloads its images from it.
GET /v1/status reports the node's state as
JSON.

With --report (on by default inside a cluster) the agent writes its state into the RepoNode named
after --node-name and follows the UpgradePlans in flight: without --iso or --iso-url it gets the
ISO a plan names, it preloads only once the plan lets this node, and it drops the cached ISO once
no plan holds it.

`

// agentConfig is the agent's command line.
type agentConfig struct {
	node, listen, advertise, gossipListen, gossipAdvertise, join string
	cacheDir, isoURL, isoChecksum, isoFile, sock, keyFile        string
	grace, settle                                                time.Duration
	// preloadRetry is how long the preload retries containerd while it is unavailable.
	preloadRetry time.Duration

	// kubeconfig and report: with report, the agent reports to and follows the cluster that
	// kube (built from kubeconfig, or the in-cluster configuration) talks to.
	kubeconfig     string
	report         bool
	reportInterval time.Duration
	kube           client.Client
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
	fset.DurationVar(&c.preloadRetry, "preload-retry-for", preload.DefaultRetryFor, "how long the preload retries containerd without progress while it is unavailable (restarting)")
	fset.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig `file` of the cluster to report to (default: the in-cluster configuration)")
	_, inClusterErr := rest.InClusterConfig()
	fset.BoolVar(&c.report, "report", inClusterErr == nil, "write this node's RepoNode and follow the UpgradePlans (default: on in a cluster or with --kubeconfig)")
	fset.DurationVar(&c.reportInterval, "report-interval", 10*time.Second, "how often the RepoNode is rewritten as a heartbeat and the UpgradePlans are read")
	if help, err := parseFlags(fset, args); help || err != nil {
		return err
	}
	reportSet := false
	fset.Visit(func(f *flag.Flag) { reportSet = reportSet || f.Name == "report" })
	if !reportSet && c.kubeconfig != "" {
		c.report = true
	}
	if err := c.validate(fset.NArg()); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if c.report {
		cfg, err := sequencerRESTConfig(c.kubeconfig)
		if err != nil {
			return err
		}
		s, err := planScheme()
		if err != nil {
			return err
		}
		if c.kube, err = client.New(cfg, client.Options{Scheme: s}); err != nil {
			return fmt.Errorf("connect to the cluster: %w", err)
		}
	}
	return agent(ctx, a, c)
}

func (c *agentConfig) validate(nargs int) error {
	switch {
	case nargs > 0:
		return errors.New("agent takes no arguments")
	case c.node == "":
		return errors.New("--node-name is required")
	case c.isoFile == "" && c.isoURL == "" && c.isoChecksum == "" && !c.report:
		return errors.New("one of --iso FILE or --iso-url URL with --iso-checksum is required (or --report to follow the cluster's plans)")
	case c.isoFile == "" && c.isoURL != "" && c.isoChecksum == "":
		return errors.New("--iso-checksum is required with --iso-url")
	case c.isoFile == "" && c.isoURL == "" && c.isoChecksum != "":
		return errors.New("--iso-url is required with --iso-checksum")
	case c.isoFile == "" && c.cacheDir == "":
		return errors.New("--cache-dir is required unless --iso is given")
	case c.report && c.reportInterval <= 0:
		return fmt.Errorf("--report-interval %s: want a positive duration", c.reportInterval)
	case c.grace < 0:
		return fmt.Errorf("--grace %s: want a duration of zero or more", c.grace)
	case c.settle < 0:
		return fmt.Errorf("--settle %s: want a duration of zero or more", c.settle)
	case c.preloadRetry < 0:
		return fmt.Errorf("--preload-retry-for %s: want a duration of zero or more", c.preloadRetry)
	}
	if c.isoFile == "" && c.isoURL != "" {
		if err := acquire.CheckURL(c.isoURL); err != nil {
			return fmt.Errorf("--iso-url: %w", err)
		}
	}
	if c.isoChecksum != "" {
		if _, err := peer.ParseChecksum(c.isoChecksum); err != nil {
			return fmt.Errorf("--iso-checksum: %w", err)
		}
	}
	for name, addr := range map[string]string{"--listen": c.listen, "--gossip-listen": c.gossipListen} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s %q: %w", name, addr, err)
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
	// Plan is the UpgradePlan whose ISO the agent holds, when it follows the cluster's plans.
	Plan string `json:"plan,omitempty"`
}

type isoStatus struct {
	SHA512 string `json:"sha512,omitempty"`
	// State is one of pending, fetching, verifying, verified, failed.
	State string `json:"state"`
	peer.Progress
}

// statusBoard holds the agent's status for /v1/status and the RepoNode.
type statusBoard struct {
	mu       sync.Mutex
	s        agentStatus
	members  func() int
	preloadr *preload.Preloader
	// checksum is the ISO checksum the RepoNode reports, written as the plan wrote it: the
	// sequencer compares the two strings.
	checksum string
	// preloadErr says why a preload could not even start (no preloader to report it).
	preloadErr string
}

func (b *statusBoard) update(f func(*agentStatus)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(&b.s)
}

func (b *statusBoard) snapshot() agentStatus {
	b.mu.Lock()
	s := b.s
	p := b.preloadr
	b.mu.Unlock()
	s.Members = b.members()
	if p != nil {
		st := p.Status()
		s.Preload = &st
	}
	return s
}

func (b *statusBoard) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	_ = writeJSON(w, b.snapshot())
}

// isoStates maps the agent's ISO states to the RepoNode's.
var isoStates = map[string]v1beta1.ISOState{
	"pending":   v1beta1.ISOPending,
	"fetching":  v1beta1.ISODownloading,
	"verifying": v1beta1.ISOVerifying,
	"verified":  v1beta1.ISOReady,
	"failed":    v1beta1.ISOFailed,
}

// repoNode is the board as a RepoNode status; url is the node's repo base URL.
func (b *statusBoard) repoNode(url string) v1beta1.RepoNodeStatus {
	s := b.snapshot()
	b.mu.Lock()
	sum := b.checksum
	b.mu.Unlock()
	if sum == "" {
		sum = s.ISO.SHA512
	}
	var st v1beta1.RepoNodeStatus
	st.ISO = v1beta1.RepoNodeISO{
		Checksum: sum, State: isoStates[s.ISO.State],
		BytesDone: s.ISO.Held, BytesTotal: s.ISO.Size, BytesFromPeers: s.ISO.FromPeers, BytesFromOrigin: s.ISO.FromOrigin,
	}
	if st.ISO.State == "" {
		st.ISO.State = v1beta1.ISOPending
	}
	if st.ISO.State == v1beta1.ISOFailed {
		st.ISO.Message = s.Error
	}
	if s.Ready {
		st.Repo = v1beta1.RepoNodeRepo{Ready: true, URL: url}
	}
	b.mu.Lock()
	preloadErr := b.preloadErr
	b.mu.Unlock()
	if preloadErr != "" && s.Preload == nil {
		st.Preload = v1beta1.RepoNodePreload{State: v1beta1.PreloadFailed, Reason: "PreloadNotStarted", Message: preloadErr}
	}
	if p := s.Preload; p != nil {
		st.Preload = v1beta1.RepoNodePreload{
			State: v1beta1.PreloadState(p.State), Reason: p.Reason, Message: p.Message,
			ImagesDone: int64(p.ImagesPresent), ImagesTotal: int64(p.ImagesTotal),
			BytesDone: p.BytesRead, BytesTotal: p.BytesTotal,
		}
		switch st.Preload.State {
		case v1beta1.PreloadRunning, v1beta1.PreloadDone, v1beta1.PreloadFailed:
		default:
			// A preload that has not planned yet has no state the RepoNode knows.
			st.Preload.State = ""
		}
	}
	return st
}

// agentNode is one running agent's parts, shared by its goroutines.
type agentNode struct {
	a      *app
	c      agentConfig
	board  *statusBoard
	store  *peer.Store
	dir    *peer.Directory
	fetch  *peer.Fetcher
	server *repo.Server
	rm     *repo.Metrics
	cs     *containerd.Store // nil without --containerd-sock
	plans  *instructionBox   // nil without --report
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
	var cs *containerd.Store
	if c.sock != "" {
		if cs, err = containerd.New(ctx, c.sock, containerd.WithLogger(a.log)); err != nil {
			return err
		}
		defer cs.Close()
	}
	// Peers prove membership with a token derived from the gossip key (see peer.Handler).
	token := peer.Token(key)

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
	var n *agentNode // set below; damage is found only once the ISO is served
	store := peer.NewStore(dir, peer.WithStoreLogger(a.log),
		peer.WithOnDamage(func(sha string, d *chunks.DamageError) { n.damaged(sha, d) }))
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
	fetcher, err := peer.NewFetcher(a.log, dir, gossip, store, peer.WithMetrics(pm), peer.WithSettle(settle),
		peer.WithToken(token))
	if err != nil {
		ln.Close()
		_ = gossip.Shutdown()
		return err
	}

	board := &statusBoard{members: func() int { return len(gossip.Members()) }}
	board.s.Node = c.node
	board.s.ISO.State = "pending"

	server := repo.NewServer(rm, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), a.log)
	peers := peer.NewHandler(a.log, store, pm, peer.RequireToken(token))
	mux := http.NewServeMux()
	mux.Handle("/v1/iso/", peers)
	mux.Handle("GET /v1/status", board)
	mux.Handle("/", server)
	srv := &http.Server{Handler: repo.MergeSlashes(mux), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	a.log.Info("agent listening", "node", c.node, "http", ln.Addr().String(), "advertise", gossip.HTTPAddr(), "gossip", gossip.Addr(), "report", c.kube != nil)

	n = &agentNode{a: a, c: c, board: board, store: store, dir: dir, fetch: fetcher, server: server, rm: rm, cs: cs}
	if c.kube != nil {
		n.plans = newInstructionBox()
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	g.Go(func() error { return gossip.Run(gctx) })
	g.Go(func() error { joinLoop(gctx, a, gossip, seeds); return nil })
	if n.plans != nil {
		url := "http://" + gossip.HTTPAddr() + "/"
		g.Go(func() error { n.followPlans(gctx); return nil })
		g.Go(func() error { n.reportLoop(gctx, url); return nil })
	}
	g.Go(func() error {
		if c.isoFile == "" && c.isoURL == "" {
			n.followISOs(gctx)
			return nil
		}
		return n.holdGiven(gctx)
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
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// holdGiven gets and serves the ISO named on the command line and preloads it (once a plan lets
// this node, when following the cluster). The ISO is never dropped: the operator chose it.
func (n *agentNode) holdGiven(ctx context.Context) error {
	path, sum, err := agentISO(ctx, n.a, n.c, n.store, n.fetch, n.board)
	if err != nil {
		n.board.update(func(s *agentStatus) { s.ISO.State, s.Error = "failed", err.Error() })
		return err
	}
	h, closer, err := openRelease(path, sum, n.rm, n.a.log, n.verifier(sum.Hex()))
	if err != nil {
		n.board.update(func(s *agentStatus) { s.ISO.State, s.Error = "failed", err.Error() })
		return err
	}
	defer func() { _ = closer() }()
	n.server.SetHandler(h)
	n.board.update(func(s *agentStatus) { s.Ready = true })
	if err := n.preloadWhenAllowed(ctx, path, sum.Hex()); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// followISOs holds, one after the other, the ISOs the UpgradePlans ask for: it waits for a plan
// to name one, gets it, serves it, preloads it when allowed, and drops it once no plan holds it.
func (n *agentNode) followISOs(ctx context.Context) {
	for {
		in, err := n.plans.wait(ctx, func(in report.Instruction) bool { return in.ISOURL != "" })
		if err != nil {
			return // the agent is stopping
		}
		var msg string
		hex, err := peer.ParseChecksum(in.ISOChecksum)
		if err != nil {
			msg = fmt.Sprintf("plan %s names ISO %s with an unusable checksum: %v", in.Plan, redact.URL(in.ISOURL), err)
		} else if err = acquire.CheckURL(in.ISOURL); err != nil {
			// An origin that is not http(s) would be retried for ever.
			msg = fmt.Sprintf("plan %s names an unusable ISO origin: %v", in.Plan, err)
		}
		if err != nil {
			n.a.log.Error("follow upgrade plan", "plan", in.Plan, "url", redact.URL(in.ISOURL), "err", err)
			n.board.update(func(s *agentStatus) { s.Plan, s.ISO, s.Error = in.Plan, isoStatus{State: "failed"}, msg })
			n.board.mu.Lock()
			n.board.checksum = in.ISOChecksum
			n.board.mu.Unlock()
			if _, err := n.plans.wait(ctx, func(x report.Instruction) bool { return x.ISOChecksum != in.ISOChecksum || x.ISOURL != in.ISOURL }); err != nil {
				return // the agent is stopping
			}
			n.reset()
			continue
		}
		n.holdPlanned(ctx, in, hex)
		if ctx.Err() != nil {
			return
		}
	}
}

// holdPlanned gets, serves and (when allowed) preloads the ISO of in, and returns once no plan
// holds it any more, or ctx ends; then it drops the ISO from the cache unless ctx ended.
func (n *agentNode) holdPlanned(ctx context.Context, in report.Instruction, hex string) {
	hctx, release := context.WithCancel(ctx)
	defer release()
	go func() {
		// Released only on a successful read of the plans that no longer lists the ISO: an API
		// server that cannot be reached never makes the agent drop what a plan may still need.
		_, err := n.plans.wait(hctx, func(x report.Instruction) bool { return !heldBy(x, hex) })
		if err == nil {
			release()
		}
	}()
	n.a.log.Info("holding the ISO of an upgrade plan", "plan", in.Plan, "url", redact.URL(in.ISOURL), "sha512", hex)
	n.board.mu.Lock()
	n.board.checksum = in.ISOChecksum
	n.board.s.Plan = in.Plan
	n.board.mu.Unlock()
	c := n.c
	c.isoURL, c.isoChecksum = in.ISOURL, "sha512:"+hex
	path, sum, err := agentISO(hctx, n.a, c, n.store, n.fetch, n.board)
	if err == nil {
		var h *repo.Handler
		var closer func() error
		if h, closer, err = openRelease(path, sum, n.rm, n.a.log, n.verifier(hex)); err != nil {
			n.a.log.Error("open the ISO of an upgrade plan", "plan", in.Plan, "err", err)
			n.board.update(func(s *agentStatus) { s.ISO.State, s.Error = "failed", err.Error() })
		} else {
			n.server.SetHandler(h)
			n.board.update(func(s *agentStatus) { s.Ready = true })
			_ = n.preloadWhenAllowed(hctx, path, hex)
			<-hctx.Done()
			n.server.SetHandler(nil)
			_ = closer()
		}
	}
	<-hctx.Done()
	if ctx.Err() != nil {
		return
	}
	n.a.log.Info("no plan holds the ISO any more, dropping it", "plan", in.Plan, "sha512", hex)
	if err := n.store.Remove(hex, true); err != nil && !errors.Is(err, peer.ErrNotFound) {
		n.a.log.Warn("drop the cached ISO", "sha512", hex, "err", err)
	}
	n.reset()
}

// reset returns the board to an agent that holds no ISO.
func (n *agentNode) reset() {
	n.board.mu.Lock()
	defer n.board.mu.Unlock()
	n.board.s.Ready, n.board.s.ISO, n.board.s.Error, n.board.s.Plan = false, isoStatus{State: "pending"}, "", ""
	n.board.checksum = ""
	n.board.preloadr = nil
	n.board.preloadErr = ""
}

// heldBy reports whether a plan of in still holds the ISO with the sha512 hex.
func heldBy(in report.Instruction, hex string) bool {
	for _, h := range in.Held {
		if x, err := peer.ParseChecksum(h); err == nil && x == hex {
			return true
		}
	}
	return false
}

// preloadWhenAllowed preloads the ISO at path, at once without a cluster, else once a plan that
// holds this ISO lists the node. It returns only ctx's error.
func (n *agentNode) preloadWhenAllowed(ctx context.Context, path, hex string) error {
	if n.cs == nil {
		return nil
	}
	if n.plans != nil {
		allowed := func(in report.Instruction) bool {
			x, err := peer.ParseChecksum(in.ISOChecksum)
			return in.Preload && err == nil && x == hex
		}
		if _, err := n.plans.wait(ctx, allowed); err != nil {
			return err
		}
	}
	agentPreload(ctx, n.a, n.cs, path, n.board, n.c.preloadRetry)
	return ctx.Err()
}

// followPlans reads what the UpgradePlans ask of this node every report interval.
func (n *agentNode) followPlans(ctx context.Context) {
	lastErr := ""
	for {
		in, err := report.Instructions(ctx, n.c.kube, n.c.node)
		switch {
		case err != nil && ctx.Err() == nil:
			if err.Error() != lastErr {
				n.a.log.Warn("read upgrade plans", "err", err)
			}
			lastErr = err.Error()
		case err == nil:
			lastErr = ""
			n.plans.set(in)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.c.reportInterval):
		}
	}
}

// reportLoop writes the node's RepoNode at once when its state changes, and every report interval
// otherwise (progress and heartbeat).
func (n *agentNode) reportLoop(ctx context.Context, url string) {
	w, err := report.NewWriter(n.c.kube, n.c.node)
	if err != nil {
		n.a.log.Error("report to the cluster", "err", err)
		return
	}
	look := min(time.Second, n.c.reportInterval)
	var last v1beta1.RepoNodeStatus
	var lastAt time.Time
	lastErr := ""
	for {
		st := n.board.repoNode(url)
		st.ISO.Checksum = n.asPlanWrites(st.ISO.Checksum)
		st.Cache = cacheUsage(n.c.cacheDir)
		if !sameState(st, last) || time.Since(lastAt) >= n.c.reportInterval {
			if err := w.Write(ctx, st); err != nil {
				if ctx.Err() != nil {
					return
				}
				if err.Error() != lastErr {
					n.a.log.Warn("write the node report", "err", err)
				}
				lastErr = err.Error()
			} else {
				last, lastAt, lastErr = st, time.Now(), ""
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(look):
		}
	}
}

// cacheUsage reports the free and total space of dir's file system, for the sequencer's
// pre-flight check; zero when dir is empty or cannot be read.
func cacheUsage(dir string) v1beta1.RepoNodeCache {
	if dir == "" {
		return v1beta1.RepoNodeCache{}
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return v1beta1.RepoNodeCache{Path: dir}
	}
	bs := int64(fs.Bsize) //nolint:unconvert // Bsize is not int64 on every platform.
	return v1beta1.RepoNodeCache{Path: dir, FreeBytes: int64(fs.Bavail) * bs, TotalBytes: int64(fs.Blocks) * bs}
}

// asPlanWrites returns the ISO checksum sum written as the plans write it, when one of them holds
// that ISO: the sequencer compares the strings, and a plan may write "sha512:HEX" or HEX.
func (n *agentNode) asPlanWrites(sum string) string {
	hex, err := peer.ParseChecksum(sum)
	if err != nil {
		return sum
	}
	n.plans.mu.Lock()
	in := n.plans.in
	n.plans.mu.Unlock()
	for _, h := range append([]string{in.ISOChecksum}, in.Held...) {
		if x, err := peer.ParseChecksum(h); err == nil && x == hex {
			return h
		}
	}
	return sum
}

// sameState reports whether two reports differ at most in progress counts.
func sameState(a, b v1beta1.RepoNodeStatus) bool {
	return a.ISO.Checksum == b.ISO.Checksum && a.ISO.State == b.ISO.State && a.ISO.Message == b.ISO.Message &&
		a.Repo == b.Repo && a.Preload.State == b.Preload.State && a.Preload.Reason == b.Preload.Reason &&
		a.Preload.Message == b.Preload.Message
}

// instructionBox holds the last instruction read from the plans and wakes those waiting on it.
type instructionBox struct {
	mu      sync.Mutex
	in      report.Instruction
	known   bool
	changed chan struct{}
}

func newInstructionBox() *instructionBox { return &instructionBox{changed: make(chan struct{})} }

func (b *instructionBox) set(in report.Instruction) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.known && reflect.DeepEqual(b.in, in) {
		return
	}
	b.in, b.known = in, true
	close(b.changed)
	b.changed = make(chan struct{})
}

// wait returns the first instruction read (the current one included) that satisfies ok, or
// ctx's error.
func (b *instructionBox) wait(ctx context.Context, ok func(report.Instruction) bool) (report.Instruction, error) {
	for {
		b.mu.Lock()
		in, known, ch := b.in, b.known, b.changed
		b.mu.Unlock()
		if known && ok(in) {
			return in, nil
		}
		select {
		case <-ctx.Done():
			return report.Instruction{}, ctx.Err()
		case <-ch:
		}
	}
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

// agentPreload imports the release's images from the local ISO into containerd. A failure is logged and left in the status for the sequencer:
// the repo keeps serving.
func agentPreload(ctx context.Context, a *app, cs *containerd.Store, path string, board *statusBoard, retryFor time.Duration) {
	err := func() error {
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
		p, err := preload.New(cs, []preload.Source{preload.NewFSSource("iso", fsys)},
			preload.WithLogger(a.log), preload.WithRegisterer(prometheus.NewRegistry()), preload.WithRetry(retryFor, 0))
		if err != nil {
			return err
		}
		board.mu.Lock()
		board.preloadr = p
		board.mu.Unlock()
		_, _, err = p.Run(ctx, fs.FS(fsys))
		return err
	}()
	if err != nil && ctx.Err() == nil {
		a.log.Error("preload images", "err", err)
		board.mu.Lock()
		if board.preloadr == nil {
			board.preloadErr = err.Error()
		}
		board.mu.Unlock()
	}
}
