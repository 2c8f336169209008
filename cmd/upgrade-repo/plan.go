package main

import (
	"context"
	"errors"
)

// runPlan is not available in this build yet.
func runPlan(_ context.Context, _ *app, _ []string) error {
	return errors.New("the plan subcommand is not available in this build yet")
}
