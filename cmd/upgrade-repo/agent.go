package main

import (
	"context"
	"errors"
)

// runAgent is not available in this build yet.
func runAgent(_ context.Context, _ *app, _ []string) error {
	return errors.New("the agent subcommand is not available in this build yet")
}
