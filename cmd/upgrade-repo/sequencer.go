package main

import (
	"context"
	"errors"
)

// runSequencer is not available in this build yet.
func runSequencer(_ context.Context, _ *app, _ []string) error {
	return errors.New("the sequencer subcommand is not available in this build yet")
}
