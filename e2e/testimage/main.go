// Command testimage is the program of the end-to-end tests' own image, built FROM scratch by
// hack/e2e.sh. Its subcommands play the parts of the world around upgrade-repo:
//
//	testimage origin DIR [ADDR]   serve the files of DIR over HTTP, like a release's download site
//	                              (ranges and conditional requests through http.ServeContent)
//	testimage upgrade [--repo=require|try|skip] [--reboot=true|false] [--reboot-delay=5s]
//	                              the test upgrade image of an UpgradePlan, run by the sequencer's
//	                              Jobs; it behaves like a real release's steps (see upgrade below).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
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
		return errors.New("usage: testimage origin DIR [ADDR] | testimage upgrade | testimage hello")
	}
	switch args[0] {
	case "hello":
		// The release's runnable image: a container that starts, says so and exits 0.
		_, err := fmt.Println("hello from the release image")
		return err
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
		fs := flag.NewFlagSet("upgrade", flag.ContinueOnError)
		repo := fs.String("repo", "require", "read the release's metadata from UPGRADE_REPO_URL: require, try or skip")
		reboot := fs.Bool("reboot", true, "reboot the node after a node step's work")
		delay := fs.Duration("reboot-delay", 5*time.Second, "how long a node step goes on after its work before it reboots the node")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *repo != "require" && *repo != "try" && *repo != "skip" {
			return fmt.Errorf("--repo=%s: want require, try or skip", *repo)
		}
		s := step{
			root: "/host", proc: "/proc", node: os.Getenv("UPGRADE_NODE_NAME"),
			version: os.Getenv("UPGRADE_RELEASE_HARVESTER"), repoURL: os.Getenv("UPGRADE_REPO_URL"),
			repo: *repo, rebootDelay: *delay,
		}
		if *reboot {
			// PID 1 of the pod's PID namespace is the node's init: node Jobs run with hostPID.
			s.reboot = func() error { return syscall.Kill(1, sigReboot) }
		}
		return upgrade(ctx, log, s)
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

// step is one run of the upgrade image.
type step struct {
	// root is where the node's / is mounted (node Jobs); proc is the node's /proc (hostPID).
	root, proc string
	// node is UPGRADE_NODE_NAME (empty for the cluster Job); version is the release's Harvester
	// version; repoURL is the repo the sequencer points the Job at.
	node, version, repoURL string
	// repo says whether reading the release's metadata from repoURL is required, tried or skipped.
	repo string
	// reboot, when set, reboots the node once a node step's work is done; the reboot is expected
	// to kill the process.
	reboot func() error
	// rebootDelay is how long the step goes on before it reboots. A real step runs for minutes;
	// one that reboots within a second of its container's start can leave containerd's CRI
	// record of the container at "created" (containerd 1.6 in kind), and the kubelet then shows
	// its pod as Pending for ever after the reboot instead of failing it.
	rebootDelay time.Duration
}

// Where a node step keeps its records on the node.
const (
	// markerDir holds one file per node, a line "TIME VERSION" for every time the work ran: the
	// e2e asserts it holds exactly one.
	markerDir = "/var/lib/upgrade-repo-e2e/upgraded"
	// stateDir holds one file per release version: the boot identity the work was done in.
	stateDir = "/var/lib/upgrade-repo-e2e/upgrade-state"
)

// sigReboot is systemd's SIGRTMIN+5 (glibc's SIGRTMIN is 34): start reboot.target. In a kind node
// systemd ends with reboot(2), which in the node container's PID namespace kills PID 1, so the
// container exits and docker (or the e2e harness) starts it again: the node reboots.
const sigReboot = syscall.Signal(34 + 5)

// upgrade runs one step like a release's real steps do. The cluster Job (no node) reads the
// release's metadata from the repo and logs what it was given. A node Job is idempotent across
// reboots and retries:
//
//   - its work (reading the release's metadata from the repo, appending a line to the node's
//     marker file) runs once per version: before rebooting it records, on the node, that the
//     work for the version is done and the boot identity it ran in;
//   - then it reboots the node by signalling the node's PID 1 and waits to be killed by the
//     reboot, so the Job's pod fails and the Job runs a new pod after the node is back;
//   - a run that finds the work done in an earlier boot exits 0 at once: the step succeeded;
//   - a run that finds it done in this boot (the pod retried before the reboot happened) does
//     not redo the work but reboots again.
func upgrade(ctx context.Context, log *slog.Logger, s step) error {
	log = log.With("node", s.node, "version", s.version)
	log.Info("upgrade ran", "repo", s.repoURL)
	if s.node == "" {
		return s.readRepo(ctx, log)
	}
	if s.version == "" {
		return errors.New("upgrade: UPGRADE_RELEASE_HARVESTER is empty")
	}
	boot, err := bootIdentity(s.proc)
	if err != nil {
		return err
	}
	state := filepath.Join(s.root, stateDir, strings.ReplaceAll(s.version, "/", "_"))
	done, err := os.ReadFile(state)
	switch {
	case err == nil && strings.TrimSpace(string(done)) != boot:
		log.Info("upgrade done in an earlier boot: nothing to do", "doneIn", strings.TrimSpace(string(done)), "boot", boot)
		return nil
	case err == nil:
		log.Info("upgrade done in this boot, the reboot is still due", "boot", boot)
	case errors.Is(err, os.ErrNotExist):
		if err := s.readRepo(ctx, log); err != nil {
			return err
		}
		if err := appendLine(filepath.Join(s.root, markerDir, s.node), time.Now().UTC().Format(time.RFC3339Nano)+" "+s.version); err != nil {
			return fmt.Errorf("upgrade: record on %s: %w", s.node, err)
		}
		if err := writeFileSync(state, boot+"\n"); err != nil {
			return fmt.Errorf("upgrade: record the boot: %w", err)
		}
		log.Info("upgrade work done", "boot", boot)
	default:
		return fmt.Errorf("upgrade: %w", err)
	}
	if s.reboot == nil {
		return nil
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("upgrade: stopped before rebooting %s", s.node)
	case <-time.After(s.rebootDelay):
	}
	if err := s.reboot(); err != nil {
		return fmt.Errorf("upgrade: reboot %s: %w", s.node, err)
	}
	log.Info("rebooting the node", "boot", boot)
	// The reboot kills this process; succeeding here would let the Job finish before the reboot.
	select {
	case <-ctx.Done():
		return fmt.Errorf("upgrade: stopped while %s reboots", s.node)
	case <-time.After(10 * time.Minute):
		return fmt.Errorf("upgrade: %s did not reboot within 10 minutes", s.node)
	}
}

// readRepo reads harvester-release.yaml from the repo and checks it names the step's version, as
// a real step reads the release from its node's repo. Unreachable, it retries for two minutes.
func (s step) readRepo(ctx context.Context, log *slog.Logger) error {
	if s.repo == "skip" || s.repoURL == "" {
		return nil
	}
	url := strings.TrimRight(s.repoURL, "/") + "/harvester-iso/harvester-release.yaml"
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cl := &http.Client{Timeout: 10 * time.Second}
	var last error
	for attempt := 1; ; attempt++ {
		last = func() error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := cl.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", url, resp.Status)
			}
			if s.version != "" && !strings.Contains(string(body), "harvester: "+s.version) {
				return fmt.Errorf("%s names another release than %s", url, s.version)
			}
			return nil
		}()
		if last == nil {
			log.Info("release metadata read from the repo", "url", url, "attempts", attempt)
			return nil
		}
		log.Warn("read the release metadata from the repo", "url", url, "attempt", attempt, "err", last)
		select {
		case <-ctx.Done():
			if s.repo == "try" {
				log.Warn("repo unreachable; going on without it (--repo=try)", "url", url, "err", last)
				return nil
			}
			return fmt.Errorf("upgrade: read %s: %w", url, last)
		case <-time.After(3 * time.Second):
		}
	}
}

// bootIdentity names the node's current boot: the host kernel's boot_id together with the start
// time of the node's PID 1. A kind node shares the host's kernel, so the boot_id alone does not
// change when its container restarts; the start time of its init does.
func bootIdentity(proc string) (string, error) {
	id, err := os.ReadFile(filepath.Join(proc, "sys/kernel/random/boot_id"))
	if err != nil {
		return "", fmt.Errorf("boot identity: %w", err)
	}
	stat, err := os.ReadFile(filepath.Join(proc, "1/stat"))
	if err != nil {
		return "", fmt.Errorf("boot identity: %w", err)
	}
	// Fields after the command (which may hold spaces) start at the state, field 3; the start
	// time is field 22.
	rest := string(stat)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 20 {
		return "", fmt.Errorf("boot identity: short %s/1/stat: %q", proc, stat)
	}
	return strings.TrimSpace(string(id)) + "/" + f[19], nil
}

// appendLine appends line to the file at p, creating it and its directory, and syncs it.
func appendLine(p, line string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(f, line+"\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeFileSync replaces the file at p with data durably: a synced temporary file renamed into
// place, then the directory synced, so a reboot right after finds either nothing or all of it.
func writeFileSync(p, data string) error {
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := p + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(f, data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
