package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
	"github.com/upgrade-repo/upgrade-repo/internal/priority"
	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/planview"
	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd"
)

const preloadUsage = `usage: upgrade-repo preload (--iso FILE | --repo URL) [flags]

Import the release's images into containerd: archives whose listed images are all present are
skipped, the others are streamed from the ISO (or from the repo Service, with resume) into
containerd's import. Exits 0 only when every listed image is present afterwards.
Unless GOGC or GOMEMLIMIT is set, the garbage collector runs at GOGC=10 to keep memory low.

On a node that runs workloads, --max-bytes-per-second caps the rate (of uncompressed bytes, what
is written to disk) and --nice lowers the CPU and I/O priority of every thread of the process.

`

// runPreload imports a release's images into the node's containerd, once.
func runPreload(ctx context.Context, a *app, args []string) error {
	fset := flag.NewFlagSet("preload", flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	fset.Usage = func() { fmt.Fprint(fset.Output(), preloadUsage); fset.PrintDefaults() }
	isoFile := fset.String("iso", "", "the release ISO on this node (read first)")
	repo := fset.String("repo", "", "base URL of the repo Service, used when the ISO lacks an archive or none is given")
	sock := fset.String("containerd-sock", "/run/containerd/containerd.sock", "containerd's socket (RKE2: /run/k3s/containerd/containerd.sock)")
	ns := fset.String("namespace", containerd.DefaultNamespace, "containerd namespace")
	concurrency := fset.Int("concurrency", 2, "archives imported at once")
	retryFor := fset.Duration("retry-for", preload.DefaultRetryFor, "how long transient errors (containerd restarting, the repo unavailable) are retried without progress")
	copyDir := fset.String("copy-to", "", "also place the archives in this directory (RKE2: /var/lib/rancher/rke2/agent/images)")
	unpack := fset.Bool("unpack", true, "also unpack the images into --snapshotter, so that their first container starts without unpacking")
	snapshotter := fset.String("snapshotter", containerd.DefaultSnapshotter, "the CRI plugin's snapshotter, which --unpack unpacks into")
	onePass := fset.Bool("one-pass", true, "with --unpack and direct ingest, extract each layer while its blob is written when containerd's snapshotter directory is reachable (else containerd unpacks after each archive)")
	direct := fset.Bool("direct-ingest", true, "write blobs straight into containerd's content directory when it is reachable from this process (else through containerd's content service)")
	maxRate := fset.Int64("max-bytes-per-second", 0, "cap on the uncompressed bytes imported per second, all archives together (0: none)")
	nice := fset.Int("nice", 0, "lower the CPU priority to this nice value (1-19) and the I/O priority to best-effort's lowest level; 0 leaves both")
	dryRun := fset.Bool("dry-run", false, "print what would be imported and why, change nothing")
	output := fset.String("o", "text", "output format: text or json")
	if help, err := parseFlags(a.stdout, fset, args); help || err != nil {
		return err
	}
	switch {
	case fset.NArg() > 0:
		return fmt.Errorf("%w: preload takes no arguments, got %q", errUsage, fset.Args())
	case *isoFile == "" && *repo == "":
		return fmt.Errorf("%w: preload needs --iso FILE or --repo URL", errUsage)
	case *output != "text" && *output != "json":
		return checkOutput(*output, "text", "json")
	case *concurrency < 1:
		return fmt.Errorf("%w: --concurrency must be at least 1", errUsage)
	case *retryFor < 0:
		return fmt.Errorf("%w: --retry-for %s: want a duration of zero or more", errUsage, *retryFor)
	case *maxRate < 0:
		return fmt.Errorf("%w: --max-bytes-per-second must be zero or more", errUsage)
	case *nice < 0 || *nice > 19:
		return fmt.Errorf("%w: --nice %d: want 0 to 19", errUsage, *nice)
	case *unpack && *snapshotter == "":
		return fmt.Errorf("%w: --unpack needs a --snapshotter", errUsage)
	}
	if *nice > 0 {
		if err := priority.Lower(*nice, priority.IOClassBestEffort, 7); err != nil {
			return err
		}
	}

	var (
		sources []preload.Source
		meta    fs.FS
	)
	if *isoFile != "" {
		fsys, f, err := iso.OpenFile(*isoFile)
		if err != nil {
			return err
		}
		defer f.Close()
		meta = fsys
		sources = append(sources, preload.NewFSSource("iso", fsys))
	}
	if *repo != "" {
		src, err := preload.NewHTTPSource(*repo, nil)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if meta == nil {
			meta = src.FS()
		}
		sources = append(sources, src)
	}

	if percent, ok := preloadGCPercent(os.Getenv); ok {
		defer debug.SetGCPercent(debug.SetGCPercent(percent))
	}
	copts := []containerd.Option{containerd.WithNamespace(*ns), containerd.WithLogger(a.log), containerd.WithDirectIngest(*direct), containerd.WithOnePass(*onePass)}
	if *unpack {
		copts = append(copts, containerd.WithUnpack(*snapshotter))
	}
	store, err := connectContainerd(ctx, a, *sock, *retryFor, copts...)
	if err != nil {
		return err
	}
	defer store.Close()
	p, err := preload.New(store, sources,
		preload.WithLogger(a.log),
		preload.WithRegisterer(prometheus.NewRegistry()),
		preload.WithConcurrency(*concurrency),
		preload.WithRetry(*retryFor, 0),
		preload.WithCopyDir(*copyDir),
		preload.WithMaxBytesPerSecond(*maxRate))
	if err != nil {
		return err
	}

	if *dryRun {
		plan, err := p.Plan(ctx, meta)
		if err != nil {
			return err
		}
		if *output == "json" {
			return planview.Encode(a.stdout, map[string]any{"plan": plan})
		}
		return printPlan(a.stdout, plan)
	}

	start := time.Now()
	stop := logProgress(ctx, a, p)
	plan, st, runErr := p.Run(ctx, meta)
	stop()
	if *output == "json" {
		if err := planview.Encode(a.stdout, map[string]any{"plan": plan, "status": st}); err != nil {
			return err
		}
	} else {
		if plan != nil {
			if err := printPlan(a.stdout, plan); err != nil {
				return err
			}
		}
		fmt.Fprintln(a.stdout, st.Summary(time.Since(start)))
	}
	return runErr
}

// connectContainerd connects to containerd at sock, waiting up to retryFor while it is
// unavailable (restarting), as the preload itself does.
func connectContainerd(ctx context.Context, a *app, sock string, retryFor time.Duration, opts ...containerd.Option) (*containerd.Store, error) {
	p := backoff.Policy{Initial: time.Second, Max: time.Second, Total: retryFor}
	if retryFor <= 0 {
		p.Attempts = 1
	}
	var store *containerd.Store
	err := backoff.Retry(ctx, p, func(ctx context.Context) error {
		var err error
		store, err = containerd.New(ctx, sock, opts...)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, preload.ErrTransient):
			return backoff.Permanent(err)
		}
		a.log.Info("containerd unavailable, retrying", "err", err)
		return err
	})
	return store, err
}

// lowGCPercent is the GC target of a preload. An import's memory is mostly buffers that live as
// long as their archive (the zstd window, copy and gRPC message buffers) and little else is
// allocated, so collecting at 10% heap growth keeps the heap near what is live at little CPU cost
// (with the default of 100 the heap would grow to twice the live buffers).
const lowGCPercent = 10

// preloadGCPercent returns the GC target preload sets, and false when the user has tuned the
// garbage collector through GOGC or GOMEMLIMIT, which then stand.
func preloadGCPercent(getenv func(string) string) (int, bool) {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return 0, false
	}
	return lowGCPercent, true
}

// printPlan writes plan as a table (preload.Plan.WriteRows).
func printPlan(w io.Writer, plan *preload.Plan) error {
	tw := planview.NewTable(w)
	plan.WriteRows(tw)
	return tw.Flush()
}

// logProgress logs the preload's progress every ten seconds until the returned stop is called.
func logProgress(ctx context.Context, a *app, p *preload.Preloader) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				st := p.Status()
				a.log.Info("preload progress", "images", st.ImagesPresent, "imagesTotal", st.ImagesTotal,
					"bytes", st.BytesRead, "bytesTotal", st.BytesTotal)
			}
		}
	}()
	return func() { cancel(); <-done }
}
