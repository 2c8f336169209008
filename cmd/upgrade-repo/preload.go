package main

import (
	"context"
	"errors"
)

// runPreload is not available in this build yet.
func runPreload(_ context.Context, _ *app, _ []string) error {
	return errors.New("the preload subcommand is not available in this build yet")
}
