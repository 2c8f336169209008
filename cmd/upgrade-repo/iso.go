package main

import (
	"context"
	"errors"
)

// runISO is not available in this build yet.
func runISO(_ context.Context, _ *app, _ []string) error {
	return errors.New("the iso subcommand is not available in this build yet")
}
