package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/chunks"
	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
	"github.com/upgrade-repo/upgrade-repo/internal/idle"
	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/cache"
	"github.com/upgrade-repo/upgrade-repo/peer/fetch"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
	"github.com/upgrade-repo/upgrade-repo/peer/serve"
	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/repo"
	"github.com/upgrade-repo/upgrade-repo/sequencer/report"
)

// Config is what an agent is told to do.
type Config struct {
	// Node is this node's name: its name in the gossip ring and its RepoNode's.
	Node string
	// CacheDir is where downloaded ISOs are kept; required unless ISOFile is set.
	CacheDir string
	// ISOFile is a release ISO already on the node; ISOURL and ISOChecksum name one to download.
	// With neither, the agent holds the ISOs the UpgradePlans name (Deps.Kube is then required).
	ISOFile, ISOURL, ISOChecksum string
	// Grace is how long in-flight requests may run once Run's context ends.
	Grace time.Duration
	// Settle is how long nodes starting together wait to split the origin's work (none without
	// seeds).
	Settle time.Duration
	// PreloadRetry is how long the preload retries the image store while it is unavailable.
	PreloadRetry time.Duration
	// ReportInterval is how often the RepoNode is rewritten as a heartbeat.
	ReportInterval time.Duration
	// ImageCheckInterval is how often, while the node holds an ISO, the image store is checked
	// for release images that went missing, besides the store's removal events (zero: 5m).
	ImageCheckInterval time.Duration
	// CleanImages removes from the image store, once a plan Succeeded, the images of the
	// releases the node ran before that the new release does not list and nothing uses (see
	// clean.go); it needs CacheDir, where the releases' image lists are kept.
	CleanImages bool
	// CleanDryRun only reports what CleanImages would remove.
	CleanDryRun bool
	// ContainerdDir is a directory, as the agent sees it, on the file system of containerd's
	// root (its content directory), whose free space the report carries; empty reports none.
	ContainerdDir string
	// KubeletConfig is the kubelet's configuration file, read for its image garbage collection
	// thresholds; empty reports none.
	KubeletConfig string
}

// Validate reports the first setting that cannot work, or nil.
func (c Config) Validate() error {
	switch {
	case c.Node == "":
		return errors.New("the node name is required")
	case c.ISOFile == "" && c.ISOURL != "" && c.ISOChecksum == "":
		return errors.New("the ISO's checksum is required with its URL")
	case c.ISOFile == "" && c.ISOURL == "" && c.ISOChecksum != "":
		return errors.New("the ISO's URL is required with its checksum")
	case c.ISOFile == "" && c.CacheDir == "":
		return errors.New("a cache directory is required unless a local ISO is given")
	case c.Grace < 0:
		return fmt.Errorf("grace %s: want a duration of zero or more", c.Grace)
	case c.Settle < 0:
		return fmt.Errorf("settle %s: want a duration of zero or more", c.Settle)
	case c.ImageCheckInterval < 0:
		return fmt.Errorf("image check interval %s: want a duration of zero or more", c.ImageCheckInterval)
	case c.PreloadRetry < 0:
		return fmt.Errorf("preload retry %s: want a duration of zero or more", c.PreloadRetry)
	}
	if c.ISOFile == "" && c.ISOURL != "" {
		if err := fetch.CheckURL(c.ISOURL); err != nil {
			return err
		}
	}
	// A file that is not there yet may come (a volume mounted late); one that is something else
	// never becomes an ISO.
	if err := iso.CheckFile(c.ISOFile); c.ISOFile != "" && errors.Is(err, iso.ErrNotFile) {
		return fmt.Errorf("ISO file: %w", err)
	}
	if c.ISOChecksum != "" {
		if _, err := checksum.Parse(c.ISOChecksum); err != nil {
			return fmt.Errorf("ISO checksum: %w", err)
		}
	}
	return nil
}

// Gossip is the agent's member of the gossip ring (peer/memberlist.Node). Its methods are safe
// for concurrent use.
type Gossip interface {
	peer.Membership
	// Run gossips until ctx ends, then leaves the ring.
	Run(ctx context.Context) error
	// Join contacts the seeds (host[:port]) and returns how many answered.
	Join(ctx context.Context, seeds []string) (int, error)
	// HTTPAddr is the host:port the other members reach this node's HTTP server at.
	HTTPAddr() string
}

// Deps are the agent's dependencies, built by the command.
type Deps struct {
	// Log receives every log line (required).
	Log *slog.Logger
	// Listener is where the HTTP server serves the repo, the peers, /v1/status and /v1/step
	// (required). Run closes it.
	Listener net.Listener
	// Directory is the gossip directory the Gossip member carries (required).
	Directory *inventory.Directory
	// Gossip is this node's member of the ring (required).
	Gossip Gossip
	// Seeds are the gossip seeds to join, again and again until one answers; none: alone.
	Seeds []string
	// Token is the bearer token of the ring's members (peer.Token of the gossip key); empty: open.
	Token string
	// Registry receives the repo's, the peers' and the node's metrics (upgrade_repo_agent_: the
	// ISO's and the preload's state and progress) and is served as /metrics (required).
	Registry *prometheus.Registry
	// PeerMetrics are the peer metrics, registered on Registry (nil: none).
	PeerMetrics *peer.Metrics
	// Images is the node's image store the release is preloaded into; nil: no preload.
	Images preload.Store
	// Mirror is the release image registry the agent serves; nil: none.
	Mirror *Mirror
	// Kube is the cluster the agent reports to and whose UpgradePlans it watches; nil: none.
	// It must know the v1beta1 kinds.
	Kube client.WithWatch
	// Step says whose reports POST /v1/step takes: the node Jobs' pods on this node, their token
	// verified by its Authenticator. Without an Authenticator every report is refused.
	Step StepAuth
}

// Agent is one node's daemon. Create it with New and run it with Run, once.
type Agent struct {
	cfg    Config
	log    *slog.Logger
	ln     net.Listener
	gossip Gossip
	seeds  []string
	images preload.Store
	// registry is the agent's metrics registry; guardReg is set once a preload guard's metrics
	// are registered on it.
	registry *prometheus.Registry
	guardReg atomic.Bool
	// lists keeps the image lists of the releases preloaded (nil without a cache directory);
	// cleaner removes earlier releases' images (nil when off). See clean.go.
	lists   *preload.ListArchive
	cleaner *preload.Cleaner

	board       *Board
	store       *cache.Store
	fetch       *fetch.Fetcher
	server      *repo.Server
	repoMetrics *repo.Metrics
	http        *http.Server

	mirror *Mirror
	// digests are what the verified ISOs' archives say the releases' images are (digests.go).
	digests imageDigests

	kube   client.WithWatch
	plans  *instructions // nil without Kube
	report *reporter     // nil without Kube
}

// New returns the agent of cfg over deps. It validates cfg and starts nothing.
func New(cfg Config, deps Deps) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	switch {
	case deps.Log == nil, deps.Listener == nil, deps.Directory == nil, deps.Gossip == nil, deps.Registry == nil:
		return nil, errors.New("new agent: the logger, listener, directory, gossip member and registry are required")
	case deps.Mirror != nil && (deps.Mirror.Handler == nil || deps.Mirror.Lists == nil):
		return nil, errors.New("new agent: the mirror needs its handler and lists")
	case cfg.ISOFile == "" && cfg.ISOURL == "" && deps.Kube == nil:
		return nil, errors.New("new agent: without an ISO of its own, the agent follows the cluster's plans: a cluster client is required")
	case deps.Step.Authenticator != nil && (deps.Step.Namespace == "" || deps.Step.ServiceAccount == ""):
		return nil, errors.New("new agent: step reports are verified against the node Jobs' namespace and service account: both are required")
	case deps.Kube != nil && cfg.ReportInterval <= 0:
		return nil, fmt.Errorf("new agent: report interval %s: want a positive duration", cfg.ReportInterval)
	}
	a := &Agent{cfg: cfg, log: deps.Log, ln: deps.Listener, gossip: deps.Gossip, seeds: deps.Seeds, images: deps.Images, kube: deps.Kube, registry: deps.Registry, mirror: deps.Mirror}
	a.board = NewBoard(cfg.Node, func() int { return len(deps.Gossip.Members()) })
	if deps.Images != nil {
		a.board.ingest = func() v1beta1.IngestPath { return ingestPath(deps.Images) }
		a.board.unpack = func() v1beta1.UnpackPath { return unpackPath(deps.Images) }
	}
	a.store = cache.NewStore(deps.Directory, cache.WithLogger(a.log), cache.WithOnDamage(a.damaged))
	settle := cfg.Settle
	if len(deps.Seeds) == 0 {
		settle = 0 // alone by design: nobody to split the work with
	}
	var err error
	a.fetch, err = fetch.NewFetcher(a.log, deps.Directory, deps.Gossip, a.store, fetch.WithMetrics(deps.PeerMetrics),
		fetch.WithSettle(settle), fetch.WithToken(deps.Token))
	if err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	if err := a.setupClean(deps.Registry); err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	if a.repoMetrics, err = repo.NewMetrics(deps.Registry); err != nil {
		return nil, fmt.Errorf("new agent: %w", err)
	}
	if err := deps.Registry.Register(newBoardCollector(a.board)); err != nil {
		return nil, fmt.Errorf("new agent: register the node's metrics: %w", err)
	}
	a.server = repo.NewServer(a.repoMetrics, promhttp.HandlerFor(deps.Registry, promhttp.HandlerOpts{}), a.log)
	peers := serve.NewHandler(a.log, a.store, deps.PeerMetrics, serve.RequireToken(deps.Token))
	step := &stepHandler{board: a.board, gate: newStepGate(deps.Step, cfg.Node, time.Now), log: a.log, now: time.Now}
	var v2 http.Handler
	if deps.Mirror != nil {
		v2 = deps.Mirror.Handler
	}
	a.http = newServer(routes(peers, a.board, step, &a.digests, a.server, v2))
	if deps.Kube != nil {
		a.plans = newInstructions()
		w, err := report.NewWriter(deps.Kube, cfg.Node)
		if err != nil {
			return nil, fmt.Errorf("new agent: %w", err)
		}
		a.report = &reporter{
			w: w, board: a.board, plans: a.plans, url: "http://" + deps.Gossip.HTTPAddr() + "/",
			cacheDir: cfg.CacheDir, containerdDir: cfg.ContainerdDir, kubeletConfig: cfg.KubeletConfig, interval: cfg.ReportInterval, look: min(time.Second, cfg.ReportInterval),
			warn: a.log.Warn,
		}
	}
	return a, nil
}

// Bounds of the agent's HTTP servers (see newServer).
const (
	// readTimeout bounds the reading of a request, headers and body: the agent's requests carry
	// no body but a node step's small report.
	readTimeout = time.Minute
	// writeIdle is how long a response may make no progress before its connection is cut: not a
	// bound of the whole response, since a release ISO of several GB goes out in one.
	writeIdle = time.Minute
	// idleTimeout is how long a kept-alive connection may wait for its next request.
	idleTimeout = 2 * time.Minute
)

// newServer returns an HTTP server of h with the agent's read, write and idle bounds; the write
// bound is the listener's, which Serve must be given wrapped by idle.Listener with writeIdle.
func newServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: readTimeout, IdleTimeout: idleTimeout}
}

// routes returns the agent's HTTP handler: the peers' ISOs, the status, the node step's reports,
// the image digests of the ISOs it read (ImageDigestsPath) and, for every other path, the repo's files. The step's route takes every method (and refuses
// all but POST itself), so that no request to it reaches the ISO's files, and it answers whether
// or not the node serves an ISO. The release image registry, when there is one, has /v2/.
func routes(peers, status, step, digests, files, v2 http.Handler) http.Handler {
	mux := http.NewServeMux()
	if v2 != nil {
		mux.Handle("/v2/", v2)
	}
	mux.Handle("/v1/iso/", peers)
	mux.Handle("GET /v1/status", status)
	mux.Handle(StepPath, step)
	mux.Handle("GET "+ImageDigestsPath+"{sha512}", digests)
	mux.Handle("/", files)
	return repo.MergeSlashes(mux)
}

// Board returns the agent's status board.
func (a *Agent) Board() *Board { return a.board }

// Run serves, gossips, holds the ISO and reports until ctx ends, then shuts the HTTP server down
// within the grace period. It returns nil after a shutdown that ctx asked for, else the first
// error that stopped the agent.
func (a *Agent) Run(ctx context.Context) error {
	if a.cfg.CacheDir != "" {
		if err := os.MkdirAll(a.cfg.CacheDir, 0o755); err != nil {
			a.ln.Close()
			return fmt.Errorf("create cache dir: %w", err)
		}
	}
	a.log.Info("agent listening", "node", a.cfg.Node, "http", a.ln.Addr().String(), "advertise", a.gossip.HTTPAddr(), "report", a.kube != nil)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := a.http.Serve(idle.Listener(a.ln, writeIdle)); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	g.Go(func() error { return a.gossip.Run(gctx) })
	g.Go(func() error { return a.serveMirror(gctx) })
	g.Go(func() error { a.join(gctx); return nil })
	if a.kube != nil {
		// client-go's informer logs through the logger its context carries: this agent's.
		wctx := klog.NewContext(gctx, logr.FromSlogHandler(a.log.Handler()))
		g.Go(func() error { watchPlans(wctx, a.kube, a.cfg.Node, a.plans); return nil })
		g.Go(func() error { a.report.run(gctx); return nil })
		g.Go(func() error { a.followVersions(gctx, versionsEvery); return nil })
		if a.store != nil && a.fetch != nil {
			g.Go(func() error { a.keepPrevious(gctx); return nil })
		}
		// A client of its own, bounded by forecastTimeout, for the few ranges of the origin's ISO.
		g.Go(func() error { a.forecastISO(gctx, &http.Client{}); return nil })
	}
	g.Go(func() error {
		if a.cfg.ISOFile == "" && a.cfg.ISOURL == "" {
			a.followISOs(gctx)
			return nil
		}
		return a.holdGiven(gctx)
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.Grace)
		defer cancel()
		if err := a.http.Shutdown(sctx); err != nil {
			a.http.Close()
			return fmt.Errorf("shutdown: in-flight requests cut after %s: %w", a.cfg.Grace, err)
		}
		return nil
	})
	err := g.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// join joins the seeds, again and again until one answers: in a cluster the headless Service
// has no other endpoint until the other agents start.
func (a *Agent) join(ctx context.Context) {
	if len(a.seeds) == 0 {
		return
	}
	// Retried until it joins or ctx ends: the error Retry returns then is ctx's, not worth a log.
	_ = backoff.Retry(ctx, backoff.Policy{Initial: time.Second, Max: 30 * time.Second, Jitter: 0.2}, func(ctx context.Context) error {
		n, err := a.gossip.Join(ctx, a.seeds)
		if err != nil {
			a.log.Debug("join gossip ring", "err", err)
			return err
		}
		if n == 0 && len(a.gossip.Members()) <= 1 {
			return errNoSeedAnswered
		}
		a.log.Info("joined the gossip ring", "contacted", n, "members", len(a.gossip.Members()))
		return nil
	})
}

// errNoSeedAnswered is join's reason to try again when no seed could be contacted.
var errNoSeedAnswered = errors.New("no seed answered")

// verifier returns the chunk check of the held ISO with the given sha512, or nil.
func (a *Agent) verifier(sha512 string) *chunks.Verifier {
	if l, ok := a.store.ISO(sha512); ok {
		return l.Verifier()
	}
	return nil
}

// damaged reports an ISO found damaged on disk while it is served: the damaged chunk is refused
// and withdrawn from what peers are told (see cache.Store); the node reports the ISO as failed,
// naming the chunk, until a restart verifies the file again and fetches it anew.
func (a *Agent) damaged(sha512 string, d *chunks.DamageError) {
	a.board.update(func(s *Status) {
		if s.ISO.SHA512 != sha512 {
			return
		}
		s.ISO.State = ISOFailed
		s.ISO.Verified = false
		s.Error = "the cached ISO is damaged on disk, restart the agent to fetch it again: " + d.Error()
	})
}

// unpacker is an image store that unpacks the images it imports (preload/containerd's Store),
// and says whether it extracts their layers in one pass.
type unpacker interface {
	Unpacking() bool
	OnePass() bool
}

// unpackPath says how store unpacks images: OnePass, Containerd, or empty when it does not.
func unpackPath(store preload.Store) v1beta1.UnpackPath {
	u, ok := store.(unpacker)
	switch {
	case !ok || !u.Unpacking():
		return ""
	case u.OnePass():
		return v1beta1.UnpackOnePass
	}
	return v1beta1.UnpackContainerd
}

// directIngester is an image store that can write blobs into its content directory itself
// (preload/containerd's Store), and says whether it does now.
type directIngester interface {
	DirectIngest() bool
}

// ingestPath says how store writes image blobs: Direct when it writes them into the content
// directory itself, ContentService otherwise.
func ingestPath(store preload.Store) v1beta1.IngestPath {
	if d, ok := store.(directIngester); ok && d.DirectIngest() {
		return v1beta1.IngestDirect
	}
	return v1beta1.IngestContentService
}
