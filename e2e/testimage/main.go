// Command testimage is the program of the end-to-end tests' own image, built FROM scratch by
// hack/e2e.sh. Its subcommands play the parts of the world around upgrade-repo:
//
//	testimage origin DIR [ADDR]   serve the files of DIR over HTTP, like a release's download site
//	                              (ranges and conditional requests through http.ServeContent)
//	testimage upgrade             the test upgrade image of an UpgradePlan: run by the sequencer's
//	                              Jobs, it records that it ran. A node Job (UPGRADE_NODE_NAME set,
//	                              the node's root at /host) appends a line to
//	                              /host/var/lib/upgrade-repo-e2e/upgraded/NODE; every Job prints
//	                              the release it was given.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testimage: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if len(args) == 0 {
		return errors.New("usage: testimage origin DIR [ADDR] | testimage upgrade")
	}
	switch args[0] {
	case "origin":
		if len(args) < 2 || len(args) > 3 {
			return errors.New("usage: testimage origin DIR [ADDR]")
		}
		addr := ":8080"
		if len(args) == 3 {
			addr = args[2]
		}
		return origin(ctx, log, args[1], addr)
	case "upgrade":
		return upgrade(log, time.Now())
	default:
		return fmt.Errorf("unknown subcommand %q", args[0])
	}
}

// origin serves dir on addr until ctx ends, logging every request.
func origin(ctx context.Context, log *slog.Logger, dir, addr string) error {
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("origin: %w", err)
	}
	files := http.FileServer(http.Dir(dir))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		log.Info("request", "method", r.Method, "path", r.URL.Path, "range", r.Header.Get("Range"), "remote", r.RemoteAddr)
		files.ServeHTTP(w, r)
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("origin serving", "dir", dir, "addr", addr)
	select {
	case err := <-errc:
		return fmt.Errorf("origin: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// upgrade records one run of the upgrade image: on the node for a node Job, in the log always.
func upgrade(log *slog.Logger, now time.Time) error {
	node := os.Getenv("UPGRADE_NODE_NAME")
	version := os.Getenv("UPGRADE_RELEASE_HARVESTER")
	log.Info("upgrade ran", "node", node, "version", version)
	if node == "" {
		return nil
	}
	dir := "/host/var/lib/upgrade-repo-e2e/upgraded"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("upgrade: %w", err)
	}
	f, err := os.OpenFile(dir+"/"+node, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("upgrade: %w", err)
	}
	if _, err := fmt.Fprintf(f, "%s %s\n", now.UTC().Format(time.RFC3339Nano), version); err != nil {
		f.Close()
		return fmt.Errorf("upgrade: record on %s: %w", node, err)
	}
	return f.Close()
}
