// Package cli holds what the project's commands share about the command line: the errors that
// pick an exit status, flag parsing with -h, and the process's one logger built from the
// environment. Only the commands under cmd/ import it.
//
// Imports: the standard library only.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// ErrUsage marks an error caused by how the command was invoked; ExitStatus gives 2 for it.
var ErrUsage = errors.New("usage")

// ErrTimeout marks a command that stopped waiting at its --timeout; ExitStatus gives 3 for it, so
// that a script tells it from a failure (1).
var ErrTimeout = errors.New("timed out")

// ExitStatus is the process's exit status for the error a command returned: 2 for a usage error,
// 3 for a timeout, 1 for any other, 0 for none.
func ExitStatus(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	case errors.Is(err, ErrTimeout):
		return 3
	}
	return 1
}

// ParseFlags parses a command's flags. help is true when -h or --help was given (the flag package
// has printed the usage, and the command returns nil); any other error is a usage error.
func ParseFlags(fset *flag.FlagSet, args []string) (help bool, err error) {
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return false, nil
}

// NewLogger builds the one structured logger of the process. UPGRADE_REPO_LOG_LEVEL (debug, info,
// warn, error) and UPGRADE_REPO_LOG_FORMAT (text, json) are read here and nowhere else.
func NewLogger(w io.Writer) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(os.Getenv("UPGRADE_REPO_LOG_LEVEL"))); err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if strings.EqualFold(os.Getenv("UPGRADE_REPO_LOG_FORMAT"), "json") {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
