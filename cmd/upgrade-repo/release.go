package main

import (
	"context"
	"errors"
)

// runRelease is not available in this build yet.
func runRelease(_ context.Context, _ *app, _ []string) error {
	return errors.New("the release subcommand is not available in this build yet")
}
