// Command upgrade-repo-serve is `upgrade-repo serve` alone: the same flags and behaviour, linked
// without the Kubernetes, containerd and gossip packages the other subcommands need, so that a
// process serving a release touches a third of the pages. upgrade-repo runs it in its own place
// when it lies beside it; it can also be run by itself.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/upgrade-repo/upgrade-repo/cmd/internal/cli"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/servecmd"
)

// version is set at link time (-X main.version=...), as upgrade-repo's is.
var version = ""

func main() {
	cli.ReturnServe(os.Stderr, version, os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := servecmd.Run(ctx, cli.NewLogger(os.Stderr), os.Stdout, os.Stderr, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "upgrade-repo serve: %v\n", err)
		os.Exit(cli.ExitStatus(err))
	}
}
