package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README and docs/ show `upgrade-repo ...` command lines in code blocks and inline code. These
// tests keep them honest: every subcommand and verb they name exists, and every flag they pass is
// one that the command's --help lists, so a renamed or removed flag fails here, not in an
// operator's terminal.

// docCommand is one `upgrade-repo ...` command line found in a Markdown file.
type docCommand struct {
	line int      // 1-based line of the command's start
	args []string // the words after "upgrade-repo"
}

// verbsOf lists, for the subcommands that take a verb, the verbs they take.
func verbsOf(cmd string) []string {
	switch cmd {
	case "iso":
		return []string{"ls", "stat", "cat", "info", "extract", "verify"}
	case "release":
		return []string{"pack"}
	case "mirror":
		return []string{"hosts"}
	case "step":
		return []string{"kubeadm"}
	case "upgrade":
		var vs []string
		for v := range upgradeVerbs() {
			vs = append(vs, v)
		}
		return vs
	}
	return nil
}

var (
	fenceRE  = regexp.MustCompile("^\\s*(```|~~~)")
	inlineRE = regexp.MustCompile("`([^`]+)`")
	// A flag in a --help listing: Go's flag package prints "  -name" (or "  --name") at the start
	// of a line.
	helpFlagRE = regexp.MustCompile(`(?m)^\s+--?([A-Za-z0-9][A-Za-z0-9-]*)`)
	envRE      = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)
)

// extractCommands finds the `upgrade-repo ...` command lines of a Markdown document: in fenced
// code blocks (backslash continuations joined, shell comments dropped), and in inline code
// outside them.
func extractCommands(md string) []docCommand {
	var out []docCommand
	lines := strings.Split(md, "\n")
	inFence := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if fenceRE.MatchString(l) {
			inFence = !inFence
			continue
		}
		if !inFence {
			for _, m := range inlineRE.FindAllStringSubmatch(l, -1) {
				if args, ok := commandArgs(strings.ReplaceAll(m[1], `\|`, "|")); ok {
					out = append(out, docCommand{line: i + 1, args: args})
				}
			}
			continue
		}
		start := i
		full := stripComment(l)
		for strings.HasSuffix(strings.TrimSpace(full), `\`) && i+1 < len(lines) {
			i++
			full = strings.TrimSuffix(strings.TrimSpace(full), `\`) + " " + stripComment(lines[i])
		}
		if args, ok := commandArgs(full); ok {
			out = append(out, docCommand{line: start + 1, args: args})
		}
	}
	return out
}

// stripComment drops a shell comment: a # at the start of the line or after a blank, outside quotes.
func stripComment(l string) string {
	var quote rune
	for i, r := range l {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return l[:i]
		}
	}
	return l
}

// commandArgs returns the words after "upgrade-repo" when s is an upgrade-repo command line (after
// an optional prompt, sudo and environment assignments), up to the first shell operator.
func commandArgs(s string) ([]string, bool) {
	words := shellWords(s)
	for len(words) > 0 && (words[0] == "$" || words[0] == "sudo" || envRE.MatchString(words[0])) {
		words = words[1:]
	}
	if len(words) == 0 || words[0] != "upgrade-repo" {
		return nil, false
	}
	var args []string
	for _, w := range words[1:] {
		if w == "|" || w == "||" || w == "&&" || w == ";" || strings.HasPrefix(w, ">") || strings.HasPrefix(w, "2>") {
			break
		}
		args = append(args, w)
	}
	return args, true
}

// shellWords splits s on blanks, keeping quoted strings and $(...) together, and drops the
// brackets that mark optional parts in a usage line ([--iso FILE]).
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	var quote rune
	depth := 0
	flush := func() {
		if w := strings.Trim(cur.String(), "[]"); w != "" {
			words = append(words, w)
		}
		cur.Reset()
	}
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '(' && i > 0 && s[i-1] == '$':
			depth++
		case r == ')' && depth > 0:
			depth--
		case (r == ' ' || r == '\t') && depth == 0:
			flush()
			continue
		}
		cur.WriteRune(r)
	}
	flush()
	return words
}

// helpCache holds the flags each command path's --help lists, shared by the parallel tests.
var helpCache = struct {
	sync.Mutex
	flags map[string]map[string]bool
}{flags: map[string]map[string]bool{}}

// helpFlags runs `upgrade-repo PATH --help` in process and returns the flags its usage lists.
func helpFlags(ctx context.Context, path []string) (map[string]bool, error) {
	key := strings.Join(path, " ")
	helpCache.Lock()
	defer helpCache.Unlock()
	if f, ok := helpCache.flags[key]; ok {
		return f, nil
	}
	var out bytes.Buffer
	err := run(ctx, append(slices.Clone(path), "--help"), &out, &out)
	if err != nil && strings.Contains(err.Error(), "unknown") {
		return nil, err
	}
	flags := map[string]bool{"h": true, "help": true}
	for _, m := range helpFlagRE.FindAllStringSubmatch(out.String(), -1) {
		flags[m[1]] = true
	}
	helpCache.flags[key] = flags
	return flags, nil
}

// checkCommand says what is wrong with args (the words after "upgrade-repo"), or nil.
func checkCommand(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return nil // the bare binary, as in `upgrade-repo` or a usage line
	}
	if strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-h", "--help", "-version", "--version":
			return nil // the top level's own flags (see run)
		}
		return fmt.Errorf("flag %s before a subcommand", args[0])
	}
	if _, ok := commands()[args[0]]; !ok {
		return fmt.Errorf("unknown subcommand %q", args[0])
	}
	path := args[:1]
	rest := args[1:]
	if verbs := verbsOf(args[0]); verbs != nil && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		if !slices.Contains(verbs, rest[0]) {
			return fmt.Errorf("unknown verb %q of %s", rest[0], args[0])
		}
		path = args[:2]
		rest = args[2:]
	}
	var flagged []string
	for _, w := range rest {
		if len(w) < 2 || w[0] != '-' || w == "--" {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
		if name == "" || strings.ContainsAny(name[:1], "0123456789") {
			continue // a negative number, not a flag
		}
		flagged = append(flagged, name)
	}
	if len(flagged) == 0 {
		return nil
	}
	flags, err := helpFlags(ctx, path)
	if err != nil {
		return fmt.Errorf("%s --help: %w", strings.Join(path, " "), err)
	}
	for _, name := range flagged {
		if !flags[name] {
			return fmt.Errorf("%s has no flag --%s", strings.Join(path, " "), name)
		}
	}
	return nil
}

func TestCheckCommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		line    string
		wantErr string // empty: the command is valid
	}{
		{name: "known flags", line: "upgrade-repo upgrade status to-v1-6-0 -o json --context prod"},
		{name: "short and long forms", line: "upgrade-repo iso ls -R -l release.iso /bundle"},
		{name: "flag=value", line: "upgrade-repo serve --listen=127.0.0.1:0 --iso release.iso"},
		{name: "subcommand alone", line: "upgrade-repo upgrade"},
		{name: "optional parts in brackets", line: "upgrade-repo agent --node-name n [--iso /local/copy.iso]"},
		{name: "command substitution kept whole", line: "upgrade-repo upgrade apply --iso-url U --iso-checksum sha512:$(sha512sum r.iso | cut -d' ' -f1)"},
		{name: "a flag that does not exist", line: "upgrade-repo upgrade status --no-such-flag", wantErr: "upgrade status has no flag --no-such-flag"},
		{name: "a flag of another verb", line: "upgrade-repo upgrade pause to-v1-6-0 --iso-url U", wantErr: "upgrade pause has no flag --iso-url"},
		{name: "a misspelt flag", line: "upgrade-repo serve --lisen 127.0.0.1:8080", wantErr: "serve has no flag --lisen"},
		{name: "the top level's --version", line: "upgrade-repo --version"},
		{name: "another flag before a subcommand", line: "upgrade-repo --kubeconfig k upgrade status", wantErr: "flag --kubeconfig before a subcommand"},
		{name: "an unknown subcommand", line: "upgrade-repo frobnicate --yes", wantErr: `unknown subcommand "frobnicate"`},
		{name: "an unknown verb", line: "upgrade-repo upgrade explode to-v1-6-0", wantErr: `unknown verb "explode" of upgrade`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args, ok := commandArgs(tt.line)
			require.True(t, ok, "an upgrade-repo command")
			err := checkCommand(t.Context(), args)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestExtractCommands(t *testing.T) {
	t.Parallel()
	md := strings.Join([]string{
		"Run `upgrade-repo upgrade status -w` to follow it; `upgrade-repo-serve` is another binary.",
		"```sh",
		"# a comment naming upgrade-repo --nothing",
		"sudo upgrade-repo preload --iso release.iso \\",
		"  --dry-run   # what and why",
		"helm install upgrade-repo charts/upgrade-repo --set a=b",
		"GOGC=10 upgrade-repo iso cat r.iso /x > out.yaml",
		"```",
		"Inline in a table: `upgrade-repo iso ls -o json\\|text`.",
	}, "\n")
	want := []docCommand{
		{line: 1, args: []string{"upgrade", "status", "-w"}},
		{line: 4, args: []string{"preload", "--iso", "release.iso", "--dry-run"}},
		{line: 7, args: []string{"iso", "cat", "r.iso", "/x"}},
		{line: 9, args: []string{"iso", "ls", "-o", "json|text"}},
	}
	require.Equal(t, want, extractCommands(md))
}

// TestDocsCommandsExist checks every upgrade-repo command line of README.md and docs/*.md.
func TestDocsCommandsExist(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	total := 0
	var problems []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, f)
		for _, c := range extractCommands(string(b)) {
			total++
			if err := checkCommand(t.Context(), c.args); err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: upgrade-repo %s: %v", rel, c.line, strings.Join(c.args, " "), err))
			}
		}
	}
	// The README and docs show dozens; finding few means the parser, not the docs, broke.
	require.Empty(t, problems, "commands the docs show that the binary does not have")
	require.GreaterOrEqual(t, total, 40, "upgrade-repo command lines found in %d files", len(files))
	t.Logf("checked %d upgrade-repo command lines in %d files", total, len(files))
}
