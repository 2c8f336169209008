package boundary

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// lintConfig is the part of .golangci.yml that names paths.
type lintConfig struct {
	Linters struct {
		Settings struct {
			Depguard struct {
				Rules map[string]struct {
					Files []string `json:"files"`
				} `json:"rules"`
			} `json:"depguard"`
		} `json:"settings"`
		Exclusions lintExclusions `json:"exclusions"`
	} `json:"linters"`
	Formatters struct {
		Exclusions lintExclusions `json:"exclusions"`
	} `json:"formatters"`
}

type lintExclusions struct {
	Paths []string `json:"paths"`
	Rules []struct {
		Path       string `json:"path"`
		PathExcept string `json:"path-except"`
	} `json:"rules"`
}

// TestLintConfigNamesExistingPaths fails when a path-based rule of .golangci.yml (the files of a
// depguard rule, the path of an exclusion) matches no Go file that the linter sees: a rule left
// behind by a move guards nothing and tells the reader something false. hack/lint.sh runs it
// before golangci-lint.
func TestLintConfigNamesExistingPaths(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(root, ".golangci.yml"))
	require.NoError(t, err)
	var cfg lintConfig
	require.NoError(t, yaml.Unmarshal(raw, &cfg))
	files := lintedFiles(t, root)
	require.NotEmpty(t, cfg.Linters.Exclusions.Rules, "the exclusions were read")
	require.Empty(t, stalePaths(t, cfg, root, files), ".golangci.yml names paths that match no Go file of the module")
}

// TestDependencyRulesInOnePlace fails when .golangci.yml enables depguard or holds its rules: the
// rules of who may import whom are this package's (rules, allowed), and a second copy elsewhere
// would drift from them.
func TestDependencyRulesInOnePlace(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", ".golangci.yml"))
	require.NoError(t, err)
	var cfg struct {
		Linters struct {
			Enable []string `json:"enable"`
		} `json:"linters"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &cfg))
	require.NotEmpty(t, cfg.Linters.Enable, "the linters were read")
	require.NotContains(t, cfg.Linters.Enable, "depguard", "the dependency rules are internal/boundary's")
	var lc lintConfig
	require.NoError(t, yaml.Unmarshal(raw, &lc))
	require.Empty(t, lc.Linters.Settings.Depguard.Rules, "the dependency rules are internal/boundary's")
}

// TestStalePathsBite checks the check against a rule that names a package that does not exist.
func TestStalePathsBite(t *testing.T) {
	t.Parallel()
	var cfg lintConfig
	require.NoError(t, yaml.Unmarshal([]byte(`
linters:
  settings:
    depguard:
      rules:
        containerd:
          files: ["$all", "!$test", "!**/preload/containerd/**", "!**/peer/containerd/**", "**/iso/*.go"]
  exclusions:
    rules:
      - path: _test\.go
      - path: ^peer/containerd/
`), &cfg))
	files := []string{"/m/preload/containerd/containerd.go", "/m/iso/iso.go", "/m/iso/iso_test.go"}
	require.ElementsMatch(t, []string{
		`depguard rule "containerd": "!**/peer/containerd/**"`,
		`exclusion path "^peer/containerd/"`,
	}, stalePaths(t, cfg, "/m", files))
}

// lintedFiles returns the absolute, slash-separated paths of the module's Go files, as
// golangci-lint sees them: no hidden, underscore, testdata or bin directories, no nested module.
func lintedFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p == root {
				return nil
			}
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "bin" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") {
			files = append(files, filepath.ToSlash(p))
		}
		return nil
	})
	require.NoError(t, err)
	return files
}

// stalePaths returns the path-based rules of cfg that match none of files (absolute, under root).
func stalePaths(t *testing.T, cfg lintConfig, root string, files []string) []string {
	t.Helper()
	var stale []string
	for name, r := range cfg.Linters.Settings.Depguard.Rules {
		for _, pattern := range r.Files {
			g := strings.TrimPrefix(pattern, "!")
			if g == "$all" || g == "$test" {
				continue
			}
			re, err := regexp.Compile(globRegexp(g))
			require.NoError(t, err, pattern)
			if !anyMatch(re, files, "") {
				stale = append(stale, "depguard rule "+strconv.Quote(name)+": "+strconv.Quote(pattern))
			}
		}
	}
	rel := filepath.ToSlash(root) + "/"
	for _, ex := range []lintExclusions{cfg.Linters.Exclusions, cfg.Formatters.Exclusions} {
		paths := append([]string(nil), ex.Paths...)
		for _, r := range ex.Rules {
			paths = append(paths, r.Path, r.PathExcept)
		}
		for _, p := range paths {
			if p == "" {
				continue
			}
			re, err := regexp.Compile(p)
			require.NoError(t, err, p)
			if !anyMatch(re, files, rel) {
				stale = append(stale, "exclusion path "+strconv.Quote(p))
			}
		}
	}
	return stale
}

// anyMatch reports whether re matches one of files, with prefix trimmed from each.
func anyMatch(re *regexp.Regexp, files []string, prefix string) bool {
	for _, f := range files {
		if re.MatchString(strings.TrimPrefix(f, prefix)) {
			return true
		}
	}
	return false
}

// globRegexp translates a depguard file glob into a regular expression over absolute paths: "**"
// matches anything, "*" and "?" anything within one path element; "$test" names test files.
func globRegexp(g string) string {
	g = strings.ReplaceAll(g, "$test", "**/*_test.go")
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(g); i++ {
		switch c := g[i]; {
		case c == '*' && i+1 < len(g) && g[i+1] == '*':
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return b.String()
}
