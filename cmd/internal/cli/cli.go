// Package cli holds what the project's commands share about the command line: the errors that
// pick an exit status, flag parsing with -h, and the process's one logger built from the
// environment. Only the commands under cmd/ import it.
//
// Imports: the standard library only.
package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
)

// ErrUsage marks an error caused by how the command was invoked; ExitStatus gives 2 for it.
var ErrUsage = errors.New("usage")

// ErrTimeout marks a command that stopped waiting at its --timeout; ExitStatus gives 3 for it, so
// that a script tells it from a failure (1).
var ErrTimeout = errors.New("timed out")

// ExitStatus is the process's exit status for the error a command returned: 2 for a usage error,
// 3 for a timeout, 1 for any other, 0 for none and for flag.ErrHelp (the usage was asked for and
// printed).
func ExitStatus(err error) int {
	if ec, ok := errors.AsType[*ExitCodeError](err); ok {
		return ec.Code
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	case errors.Is(err, ErrTimeout):
		return 3
	}
	return 1
}

// ParseFlags parses a command's flags. help is true when -h or --help was given: the usage has
// been printed to stdout, as asked for, and the command returns nil (exit status 0). On any other
// error the usage goes to the flag set's output (the command's stderr) and the error is a usage
// error (exit status 2). The usage is what fset.Usage prints to fset.Output() (every command's
// Usage writes there, never to a stream of its own); the flag list names long flags with two
// dashes, as they are written (LongFlags).
func ParseFlags(stdout io.Writer, fset *flag.FlagSet, args []string) (help bool, err error) {
	// The flag package prints every flag with one dash and has no option to do otherwise, so
	// what it prints while parsing (the usage, on -h or an error) is caught and rewritten.
	out := fset.Output()
	var buf bytes.Buffer
	fset.SetOutput(&buf)
	err = fset.Parse(args)
	fset.SetOutput(out)
	help = errors.Is(err, flag.ErrHelp)
	if help {
		out = stdout
	}
	if buf.Len() > 0 {
		_, _ = io.WriteString(out, LongFlags(buf.String()))
	}
	switch {
	case help:
		return true, nil
	case err != nil:
		return false, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return false, nil
}

// flagLine matches a flag's line in flag.PrintDefaults' output whose name is longer than one
// character.
var flagLine = regexp.MustCompile(`(?m)^  -([^-\s][^\s]+)`)

// LongFlags rewrites a flag list printed by flag.PrintDefaults so that names longer than one
// character have two dashes (`--kubeconfig`), as kubectl and helm show them; `-o` keeps one.
func LongFlags(usage string) string {
	return flagLine.ReplaceAllString(usage, "  --$1")
}

// IsHelp reports whether args asks for a command's usage: -h, --help or help first.
func IsHelp(args []string) bool {
	return len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help")
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

// CheckOutput checks the value of a command's -o (--output) against the formats it writes, with
// one wording for every command: `-o must be text or json, got "x"`, a usage error.
func CheckOutput(got string, formats ...string) error {
	if slices.Contains(formats, got) {
		return nil
	}
	list := strings.Join(formats, ", ")
	if n := len(formats); n > 1 {
		list = strings.Join(formats[:n-1], ", ") + " or " + formats[n-1]
	}
	return fmt.Errorf("%w: -o must be %s, got %q", ErrUsage, list, got)
}

// ExitCodeError is an error that ends the command with exit status Code.
type ExitCodeError struct {
	// Code is the exit status.
	Code int
	// Err is the error.
	Err error
}

// Error returns Err's text.
func (e *ExitCodeError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *ExitCodeError) Unwrap() error { return e.Err }
