package main

import (
	"context"
	"errors"
)

// runServe is not available in this build yet.
func runServe(_ context.Context, _ *app, _ []string) error {
	return errors.New("the serve subcommand is not available in this build yet")
}
