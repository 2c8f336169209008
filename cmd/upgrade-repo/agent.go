package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/agent"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
	"github.com/upgrade-repo/upgrade-repo/peer/memberlist"
	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd"
)

const agentUsage = `usage: upgrade-repo agent (--iso FILE | --iso-url URL --iso-checksum sha512:HEX --cache-dir DIR) [flags]
       upgrade-repo agent --report --cache-dir DIR [--kubeconfig FILE] [flags]

The per-node agent: it joins the gossip ring, gets the release ISO (a local file, else chunks from
peers in parallel, else the origin URL for what no peer has), verifies its sha512, serves it like
"serve" does, shares it with its peers and, with --containerd-sock, preloads its images from it.
GET /v1/status reports the node's state as JSON.

With --report (on by default inside a cluster) the agent writes its state into the RepoNode named
after --node-name and watches the UpgradePlans: without --iso or --iso-url it gets the ISO a plan
names, it preloads only once the plan lets this node, and it drops the cached ISO once no plan
holds it. Once a plan Succeeded, the images of the releases the node ran before that the new one
does not list and nothing uses are removed (--clean-images, --clean-images-dry-run).

`

// agentConfig is the agent's command line.
type agentConfig struct {
	agent.Config
	listen, advertise, gossipListen, gossipAdvertise, join, sock, keyFile, kubeconfig string
	snapshotter, mirrorListen, stepNamespace, stepAccount                             string
	report, unpack, direct, onePass                                                   bool
	// kube is the cluster to report to, with report.
	kube client.WithWatch
}

// runAgent runs the per-node agent until the process is signalled.
func runAgent(ctx context.Context, a *app, args []string) error {
	host, _ := os.Hostname()
	var c agentConfig
	fset := flag.NewFlagSet("agent", flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	fset.Usage = func() { fmt.Fprint(fset.Output(), agentUsage); fset.PrintDefaults() }
	fset.StringVar(&c.Node, "node-name", host, "this node's unique name in the gossip ring")
	fset.StringVar(&c.listen, "listen", ":8080", "the HTTP address to serve the repo, peers and status on")
	fset.StringVar(&c.advertise, "advertise", "", "host:port peers reach the HTTP server at (default: the gossip address with the --listen port)")
	fset.StringVar(&c.gossipListen, "gossip-listen", ":7946", "the gossip address (TCP and UDP)")
	fset.StringVar(&c.gossipAdvertise, "gossip-advertise", "", "the IP other members reach this one at (default: found from the interfaces)")
	fset.StringVar(&c.join, "join", "", "comma-separated gossip seeds, host[:port]; a name resolving to several addresses joins them all")
	fset.StringVar(&c.CacheDir, "cache-dir", "", "where the downloaded ISO is kept (required with --iso-url)")
	fset.StringVar(&c.ISOURL, "iso-url", "", "the origin URL of the release ISO, for what no peer has")
	fset.StringVar(&c.ISOChecksum, "iso-checksum", "", "the ISO's checksum, sha512:HEX (required with --iso-url)")
	fset.StringVar(&c.ISOFile, "iso", "", "a release ISO already on this node")
	fset.StringVar(&c.sock, "containerd-sock", "", "containerd's socket; when set, the release's images are preloaded")
	fset.StringVar(&c.ContainerdDir, "containerd-dir", "", "a directory on the file system of containerd's root (its content directory), whose free space the node report carries for the pre-flight's disk forecast")
	fset.StringVar(&c.KubeletConfig, "kubelet-config", "", "the kubelet's configuration file (mounted read-only), read for its image garbage collection thresholds")
	fset.BoolVar(&c.unpack, "unpack", true, "also unpack the preloaded images into --snapshotter, so that their first container starts without unpacking")
	fset.StringVar(&c.snapshotter, "snapshotter", containerd.DefaultSnapshotter, "the CRI plugin's snapshotter, which --unpack unpacks into")
	fset.BoolVar(&c.onePass, "one-pass", true, "with --unpack and direct ingest, extract each layer while its blob is written when containerd's snapshotter directory is reachable (else containerd unpacks after each archive)")
	fset.BoolVar(&c.direct, "direct-ingest", true, "write blobs straight into containerd's content directory when it is reachable from this process (else through containerd's content service)")
	fset.StringVar(&c.mirrorListen, "mirror-listen", "", "the address of the release image registry the node's containerd uses as a mirror (needs --containerd-sock; empty: off)")
	fset.StringVar(&c.keyFile, "gossip-key-file", "", "a file holding the gossip encryption key (16, 24 or 32 bytes, raw or base64)")
	fset.DurationVar(&c.Grace, "grace", 30*time.Second, "how long in-flight requests may run after SIGTERM")
	fset.DurationVar(&c.Settle, "settle", 3*time.Second, "how long nodes starting together wait to split the origin's work before asking it")
	fset.DurationVar(&c.PreloadRetry, "preload-retry-for", preload.DefaultRetryFor, "how long the preload retries containerd without progress while it is unavailable (restarting)")
	fset.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig `file` of the cluster to report to (default: the in-cluster configuration)")
	fset.BoolVar(&c.report, "report", kubeclient.InCluster(), "write this node's RepoNode and follow the UpgradePlans (default: on in a cluster or with --kubeconfig)")
	fset.DurationVar(&c.ImageCheckInterval, "image-check-interval", 5*time.Minute, "how often, while the node holds an ISO, containerd is checked for release images that went missing (besides its removal events)")
	fset.BoolVar(&c.CleanImages, "clean-images", true, "once a plan Succeeded, remove from containerd the images of the releases before it that it does not list and no container uses (their lists are kept in --cache-dir)")
	fset.BoolVar(&c.CleanDryRun, "clean-images-dry-run", false, "with --clean-images, only list in the RepoNode and the log what would be removed")
	fset.DurationVar(&c.ReportInterval, "report-interval", 10*time.Second, "how often the RepoNode is rewritten as a heartbeat")
	fset.StringVar(&c.stepNamespace, "step-namespace", os.Getenv("POD_NAMESPACE"), "the `namespace` of the UpgradePlans' node Jobs, whose pods alone may report this node's step (default: $POD_NAMESPACE)")
	fset.StringVar(&c.stepAccount, "step-service-account", "default", "the service `account` the node Jobs run as (the sequencer's --job-service-account)")
	if help, err := parseFlags(a.stdout, fset, args); help || err != nil {
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
		cfg, err := kubeclient.Config(c.kubeconfig, "")
		if err != nil {
			return err
		}
		if c.kube, err = kubeclient.New(cfg); err != nil {
			return err
		}
	}
	return runNodeAgent(ctx, a, c)
}

func (c *agentConfig) validate(nargs int) error {
	switch {
	case nargs > 0:
		return errors.New("agent takes no arguments")
	case c.ISOFile == "" && c.ISOURL == "" && c.ISOChecksum == "" && !c.report:
		return errors.New("one of --iso FILE or --iso-url URL with --iso-checksum is required (or --report to follow the cluster's plans)")
	case c.report && c.ReportInterval <= 0:
		return fmt.Errorf("--report-interval %s: want a positive duration", c.ReportInterval)
	case c.Grace < 0, c.Settle < 0, c.PreloadRetry < 0:
		return fmt.Errorf("--grace %s, --settle %s, --preload-retry-for %s: want durations of zero or more", c.Grace, c.Settle, c.PreloadRetry)
	}
	for name, addr := range map[string]string{"--listen": c.listen, "--gossip-listen": c.gossipListen} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s %q: %w", name, addr, err)
		}
	}
	return c.Validate()
}

// runNodeAgent builds the agent's adapters (gossip, containerd, listener) and runs it.
func runNodeAgent(ctx context.Context, a *app, c agentConfig) error {
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
	deps := agent.Deps{Log: a.log, Seeds: strings.FieldsFunc(c.join, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }), Token: peer.Token(key), Registry: prometheus.NewRegistry(), Kube: c.kube}
	switch {
	case c.kube != nil && c.stepNamespace == "":
		a.log.Warn("node step reports are refused: the node Jobs' namespace is unknown (--step-namespace, $POD_NAMESPACE)")
	case c.kube != nil:
		// The node step's reports are verified with the cluster; without one, they are refused.
		reviewer, err := agent.NewTokenReviewer(c.kube)
		if err != nil {
			return err
		}
		deps.Step = agent.StepAuth{Authenticator: reviewer, Namespace: c.stepNamespace, ServiceAccount: c.stepAccount}
	}
	var images *containerd.Store
	if c.sock != "" {
		copts := []containerd.Option{containerd.WithLogger(a.log), containerd.WithDirectIngest(c.direct), containerd.WithOnePass(c.onePass)}
		if c.unpack {
			copts = append(copts, containerd.WithUnpack(c.snapshotter))
		}
		cs, err := containerd.New(ctx, c.sock, copts...)
		if err != nil {
			return err
		}
		defer cs.Close()
		deps.Images = cs
		images = cs
	}
	deps.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if deps.PeerMetrics, err = peer.NewMetrics(deps.Registry); err != nil {
		return err
	}
	if deps.Listener, err = net.Listen("tcp", c.listen); err != nil {
		return fmt.Errorf("listen on %s: %w", c.listen, err)
	}
	defer deps.Listener.Close()
	advertise := c.advertise
	if advertise == "" {
		// A specific listen host is the address; otherwise memberlist completes it with the
		// gossip advertise address.
		host, port, _ := net.SplitHostPort(deps.Listener.Addr().String())
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			host = c.gossipAdvertise
		}
		advertise = net.JoinHostPort(host, port)
	}
	deps.Directory = inventory.NewDirectory(c.Node)
	gopts := []memberlist.Option{memberlist.WithBind(gHost, gPort), memberlist.WithMetrics(deps.PeerMetrics)}
	if c.gossipAdvertise != "" {
		gopts = append(gopts, memberlist.WithAdvertise(c.gossipAdvertise))
	}
	if key != nil {
		gopts = append(gopts, memberlist.WithKey(key))
	}
	gossip, err := memberlist.New(a.log, c.Node, advertise, deps.Directory, gopts...)
	if err != nil {
		return err
	}
	defer func() { _ = gossip.Shutdown() }()
	deps.Gossip = gossip
	if err := mirrorDeps(&deps, images, c.mirrorListen, c.CacheDir); err != nil {
		return err
	}
	if deps.Mirror != nil {
		defer deps.Mirror.Listener.Close()
	}
	ag, err := agent.New(c.Config, deps)
	if err != nil {
		return err
	}
	return ag.Run(ctx)
}
