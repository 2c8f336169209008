package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/upgrade-repo/upgrade-repo/agent"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd"
	"github.com/upgrade-repo/upgrade-repo/registry"
	"github.com/upgrade-repo/upgrade-repo/registry/hoststoml"
)

const mirrorUsage = `usage: upgrade-repo mirror hosts --config-dir DIR --mirror URL --registries R1,R2,...

Writes containerd's hosts.toml under DIR for each registry, pointing at URL (the node's agent's
release image registry, --mirror-listen of "agent"), so that the node's containerd pulls the
release's images from it first. A hosts.toml that upgrade-repo did not write is left as it is.

`

// runMirror runs "mirror hosts".
func runMirror(_ context.Context, a *app, args []string) error {
	if done, err := helpOrMissing(a.stdout, a.stderr, args, func(w io.Writer) { fmt.Fprint(w, mirrorUsage) }, "mirror takes the subcommand hosts"); done {
		return err
	}
	if args[0] != "hosts" {
		fmt.Fprint(a.stderr, mirrorUsage)
		return fmt.Errorf("%w: mirror takes the subcommand hosts", errUsage)
	}
	var dir, url, regs string
	fset := flag.NewFlagSet("mirror hosts", flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	fset.Usage = func() { fmt.Fprint(fset.Output(), mirrorUsage); fset.PrintDefaults() }
	fset.StringVar(&dir, "config-dir", "/etc/containerd/certs.d", "containerd's registry configuration directory (its CRI registry config_path)")
	fset.StringVar(&url, "mirror", "", "the URL the node's containerd reaches its agent's registry at, such as http://10.0.0.5:5050")
	fset.StringVar(&regs, "registries", "", "comma-separated registries to mirror, such as docker.io,registry.suse.com")
	if help, err := parseFlags(a.stdout, fset, args[1:]); help || err != nil {
		return err
	}
	list := strings.FieldsFunc(regs, func(r rune) bool { return r == ',' || r == ' ' })
	if url == "" || len(list) == 0 || fset.NArg() > 0 {
		return fmt.Errorf("%w: --mirror and --registries are required, and nothing else", errUsage)
	}
	if err := hoststoml.Write(dir, url, list); err != nil {
		return err
	}
	a.log.Info("containerd mirror configured", "dir", dir, "mirror", url, "registries", list)
	return nil
}

// mirrorDeps builds the agent's release image registry over the node's containerd, on listen
// (empty: off).
func mirrorDeps(deps *agent.Deps, cs *containerd.Store, listen, cacheDir string) error {
	if listen == "" {
		return nil
	}
	if cs == nil {
		return fmt.Errorf("%w: --mirror-listen needs --containerd-sock", errUsage)
	}
	m, err := registry.NewMetrics(deps.Registry)
	if err != nil {
		return err
	}
	peers, err := registry.NewPeers(deps.Gossip, registry.PeersConfig{
		// A peer that stays silent is left for the next one; a large blob may take its time.
		Client: &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 30 * time.Second, IdleConnTimeout: time.Minute}},
		Token:  deps.Token, Dir: cacheDir, Log: deps.Log, Metrics: m,
	})
	if err != nil {
		return err
	}
	lists := &registry.Lists{}
	h, err := registry.NewHandler(cs, lists, registry.WithPeers(peers), registry.WithToken(deps.Token),
		registry.WithLogger(deps.Log), registry.WithMetrics(m))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	deps.Mirror = &agent.Mirror{Handler: h, Lists: lists, Listener: ln}
	return nil
}
