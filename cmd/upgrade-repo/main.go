// Command upgrade-repo serves a release ISO to a Kubernetes cluster, shares it between nodes, preloads the images into each node's containerd and sequences the upgrade.
//
// main only wires: it builds the process context and the logger, picks the subcommand and turns
// its error into an exit status. Each subcommand lives in a file of its own, parses its flags and
// builds the parts that do the work (agent.New for the node's daemon, the sequencer's Reconciler,
// preload.New, ...) and the adapters they are handed (peer/memberlist, preload/containerd). It
// may import every package; no package imports it (boundary test).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/upgrade-repo/upgrade-repo/cmd/internal/cli"
)

// app carries what every subcommand shares: the standard streams and the process logger.
type app struct {
	stdout io.Writer
	stderr io.Writer
	log    *slog.Logger
}

// command is one subcommand: its one-line summary and its entry point.
type command struct {
	summary string
	run     func(ctx context.Context, a *app, args []string) error
}

// commands lists the subcommands; each one's run function lives in a file named after it.
func commands() map[string]command {
	return map[string]command{
		"iso":       {"inspect an ISO image without mounting it (ls, stat, cat, info, extract, verify)", runISO},
		"serve":     {"serve one release ISO over HTTP", runServe},
		"release":   {"build release ISOs (release pack)", runRelease},
		"preload":   {"import a release's images into containerd", runPreload},
		"agent":     {"the per-node agent: acquire, serve, share and preload the release", runAgent},
		"mirror":    {"configure the node's containerd to pull the release's images from its agent (mirror hosts)", runMirror},
		"plan":      {"check whether an upgrade is allowed and show what it would change", runPlan},
		"sequencer": {"the controller that drives UpgradePlans through their phases", runSequencer},
		"step":      {"a release's node step in an UpgradePlan's node Job (step kubeadm)", runStep},
		"upgrade":   {"apply, follow, pause, resume, retry, skip or abort an upgrade, or upgrade one node (upgrade apply|status|pause|resume|retry|skip|node|abort)", runUpgrade},
		"version":   {"print the version of this binary", runVersion},
	}
}

// errUsage marks an error caused by how the command was invoked; main exits 2 for it.
var errUsage = cli.ErrUsage

// errTimeout marks a command that stopped waiting at its --timeout (upgrade apply, upgrade
// status -w); main exits 3 for it, so that a script tells it from a failure (1).
var errTimeout = cli.ErrTimeout

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		execLeanServe(os.Args[2:])
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "upgrade-repo: %v\n", err)
		os.Exit(cli.ExitStatus(err))
	}
}

// run dispatches to the subcommand named by args[0].
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmds := commands()
	if done, err := helpOrMissing(stdout, stderr, args, func(w io.Writer) { usage(w, cmds) }, "a subcommand is required"); done {
		return err
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = append([]string{"version"}, args[1:]...) // as helm and kubectl take it
	}
	c, ok := cmds[args[0]]
	if !ok {
		usage(stderr, cmds)
		return fmt.Errorf("%w: unknown subcommand %q", errUsage, args[0])
	}
	a := &app{stdout: stdout, stderr: stderr, log: cli.NewLogger(stderr)}
	if err := c.run(ctx, a, args[1:]); !errors.Is(err, flag.ErrHelp) {
		return err
	}
	return nil // a command's usage, asked for and printed
}

// helpOrMissing handles what a command with subcommands does before it dispatches: given none, it
// prints its usage to stderr and returns a usage error that says missing; asked for its usage
// (-h, --help, help), it prints it to stdout. done is false when args names a subcommand.
func helpOrMissing(stdout, stderr io.Writer, args []string, usage func(io.Writer), missing string) (done bool, err error) {
	switch {
	case len(args) == 0:
		usage(stderr)
		return true, fmt.Errorf("%w: %s", errUsage, missing)
	case cli.IsHelp(args):
		usage(stdout)
		return true, nil
	}
	return false, nil
}

// checkOutput checks a command's -o (cli.CheckOutput).
func checkOutput(got string, formats ...string) error {
	return cli.CheckOutput(got, formats...)
}

// parseFlags parses a subcommand's flags (cli.ParseFlags).
func parseFlags(stdout io.Writer, fset *flag.FlagSet, args []string) (help bool, err error) {
	return cli.ParseFlags(stdout, fset, args)
}

func usage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "usage: upgrade-repo <subcommand> [flags]")
	fmt.Fprintln(w)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
}
