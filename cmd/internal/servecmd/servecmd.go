// Package servecmd is the serve command: one release ISO served over HTTP, from its flags to its
// shutdown. Both `upgrade-repo serve` and the lean `upgrade-repo-serve` run it; the latter is
// linked with nothing else (no Kubernetes client, no containerd, no gossip), so a node or a
// laptop serving a release holds a third of the memory the full binary's pages take.
//
// Imports: cli, acquire, checksum, isorepo, peer and repo, which it wires together.
package servecmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/upgrade-repo/upgrade-repo/acquire"
	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/cli"
	"github.com/upgrade-repo/upgrade-repo/isorepo"
	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/repo"
)

// Usage is the serve command's usage text, before its flags.
const Usage = `usage: upgrade-repo serve (--iso FILE | --iso-url URL --iso-checksum sha512:HEX --cache-dir DIR) [flags]

Serve one release ISO over HTTP: its files (also under /harvester-iso/), the release metadata
(/v1/release, /v1/bundle, /v1/images), /livez, /readyz and /metrics. With --iso-url the ISO is
downloaded into the cache (resumed, verified) first; /readyz turns ready once it is verified and
indexed. SIGTERM stops accepting connections and gives in-flight downloads --grace to finish.

`

// gcPercent is the garbage collector's goal for a serving process, unless GOGC sets one. Serving
// keeps a few MiB live and allocates a few KiB per request, so at Go's default (100) the collector
// runs every 4 MiB of requests; at 200 it runs half as often, for about 4 MiB more of peak RSS
// (bench-serve: about a tenth more small-file requests per second; 300 and 400 gave no more).
const gcPercent = 200

// Run parses the serve command's flags from args and serves until ctx is done. Usage errors wrap
// cli.ErrUsage (their usage goes to stderr); -h, --help or help prints the usage to stdout and
// returns nil.
func Run(ctx context.Context, log *slog.Logger, stdout, stderr io.Writer, args []string) error {
	fset := flag.NewFlagSet("serve", flag.ContinueOnError)
	fset.SetOutput(stderr)
	fset.Usage = func() { fmt.Fprint(fset.Output(), Usage); fset.PrintDefaults() }
	isoFile := fset.String("iso", "", "the release ISO to serve")
	isoURL := fset.String("iso-url", "", "the URL to download the release ISO from")
	isoSum := fset.String("iso-checksum", "", "the ISO's checksum, sha512:HEX (required with --iso-url, verified with --iso)")
	cacheDir := fset.String("cache-dir", "", "where a downloaded ISO is kept (required with --iso-url)")
	listen := fset.String("listen", "127.0.0.1:8080", "the address to serve on")
	grace := fset.Duration("grace", 30*time.Second, "how long in-flight requests may run after SIGTERM")
	if len(args) == 1 && args[0] == "help" {
		args = []string{"-h"} // upgrade-repo-serve help, as upgrade-repo help
	}
	if help, err := cli.ParseFlags(stdout, fset, args); help || err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return fmt.Errorf("%w: serve takes no arguments, got %q", cli.ErrUsage, fset.Args())
	}
	if *grace < 0 {
		return fmt.Errorf("%w: --grace %s: want a duration of zero or more", cli.ErrUsage, *grace)
	}
	src := acquire.Source{Path: *isoFile, URL: *isoURL, CacheDir: *cacheDir}
	if *isoSum != "" {
		sum, err := checksum.Parse(*isoSum)
		if err != nil {
			return fmt.Errorf("%w: --iso-checksum: %w", cli.ErrUsage, err)
		}
		src.Checksum = sum
	}
	if err := src.Validate(); err != nil {
		return fmt.Errorf("%w: %w", cli.ErrUsage, err)
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	return Serve(ctx, log, src, ln, *grace, nil)
}

// Serve serves the release of src on ln until ctx is done, then shuts down within grace. ready,
// when not nil, is called once the release is verified and indexed.
func Serve(ctx context.Context, log *slog.Logger, src acquire.Source, ln net.Listener, grace time.Duration, ready func()) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rm, err := repo.NewMetrics(reg)
	if err != nil {
		ln.Close()
		return err
	}
	pm, err := peer.NewMetrics(reg)
	if err != nil {
		ln.Close()
		return err
	}
	server := repo.NewServer(rm, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), log)
	srv := &http.Server{Handler: server, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	log.Info("listening", "addr", ln.Addr().String())

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(server.Listener(ln, srv)); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	var closeISO func() error
	g.Go(func() error {
		ver, err := acquire.Acquire(gctx, src, acquire.WithLogger(log), acquire.WithMetrics(pm))
		if err != nil {
			return err
		}
		h, closer, err := isorepo.Open(ver.Path, src.Checksum, rm, log, ver.Verifier)
		if err != nil {
			_ = ver.Close()
			return err
		}
		closeISO = func() error { return errors.Join(closer(), ver.Close()) }
		server.SetHandler(h)
		if ready != nil {
			ready()
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		log.Info("shutting down", "grace", grace)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
			return fmt.Errorf("shutdown: in-flight requests cut after %s: %w", grace, err)
		}
		return nil
	})
	err = g.Wait()
	if closeISO != nil {
		if cerr := closeISO(); cerr != nil {
			log.Warn("closing the ISO failed", "err", cerr)
		}
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
