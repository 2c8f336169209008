package boundary

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/upgrade-repo/upgrade-repo"

// rule says which imports the non-test files of a set of packages may not have.
type rule struct {
	name string
	// applies reports whether the rule covers the package in dir (slash-separated, relative to
	// the module root).
	applies func(dir string) bool
	// forbidden reports whether importing path breaks the rule.
	forbidden func(path string) bool
}

func under(dirs ...string) func(string) bool {
	return func(dir string) bool {
		for _, d := range dirs {
			if dir == d || strings.HasPrefix(dir, d+"/") {
				return true
			}
		}
		return false
	}
}

func exactly(dirs ...string) func(string) bool {
	return func(dir string) bool {
		for _, d := range dirs {
			if dir == d {
				return true
			}
		}
		return false
	}
}

func not(f func(string) bool) func(string) bool { return func(s string) bool { return !f(s) } }

func ours(pkgs ...string) func(string) bool {
	return func(path string) bool {
		for _, p := range pkgs {
			if path == module+"/"+p || strings.HasPrefix(path, module+"/"+p+"/") {
				return true
			}
		}
		return false
	}
}

func standard(path string) bool { return !strings.Contains(strings.SplitN(path, "/", 2)[0], ".") }

var rules = []rule{
	{
		name:      "only preload/containerd talks to containerd",
		applies:   not(under("preload/containerd")),
		forbidden: func(p string) bool { return strings.HasPrefix(p, "github.com/containerd/") },
	},
	{
		name:      "only peer/memberlist talks gossip",
		applies:   not(under("peer/memberlist")),
		forbidden: func(p string) bool { return p == "github.com/hashicorp/memberlist" },
	},
	{
		name:      "iso knows only the ISO format",
		applies:   under("iso"),
		forbidden: func(p string) bool { return strings.HasPrefix(p, module+"/") && !strings.HasPrefix(p, module+"/iso") },
	},
	{
		name:      "repo knows fs.FS and HTTP, not where the files come from",
		applies:   under("repo"),
		forbidden: ours("iso", "acquire", "preload", "peer", "sequencer", "api", "policy", "chunks"),
	},
	{
		name:      "peer decides who has what, not how the ISO is read or imported",
		applies:   under("peer"),
		forbidden: ours("iso", "repo", "preload", "acquire", "sequencer", "api", "policy"),
	},
	{
		name:      "peer's own package is the ring's shared vocabulary: nothing else of this module",
		applies:   exactly("peer"),
		forbidden: func(p string) bool { return strings.HasPrefix(p, module+"/") },
	},
	{
		name:      "peer/inventory knows what members say they hold, not where the bytes are or how they move",
		applies:   under("peer/inventory"),
		forbidden: ours("peer/cache", "peer/fetch", "peer/serve", "peer/memberlist", "internal/redact"),
	},
	{
		name:      "peer/cache stores and publishes: it neither downloads nor serves",
		applies:   under("peer/cache"),
		forbidden: ours("peer/fetch", "peer/serve", "peer/memberlist"),
	},
	{
		name:      "peer/fetch downloads over HTTP: it does not serve and is handed its membership",
		applies:   under("peer/fetch"),
		forbidden: ours("peer/serve", "peer/memberlist"),
	},
	{
		name:      "peer/serve sends what the cache holds: it neither fetches nor reads the directory",
		applies:   under("peer/serve"),
		forbidden: ours("peer/fetch", "peer/inventory", "peer/memberlist"),
	},
	{
		name:      "checksum is the ISO's digest: the standard library only",
		applies:   under("checksum"),
		forbidden: func(p string) bool { return !standard(p) },
	},
	{
		name:    "httprange reads and writes ranges: redact, backoff, idle and the standard library only",
		applies: under("internal/httprange"),
		forbidden: func(p string) bool {
			return !standard(p) && !ours("internal/redact", "internal/backoff", "internal/idle")(p)
		},
	},
	{
		name:      "backoff and idle are policies: the standard library only",
		applies:   under("internal/backoff", "internal/idle"),
		forbidden: func(p string) bool { return !standard(p) },
	},
	{
		name:      "isorepo joins the ISO reader to the repo server: never the agent, peer or preload",
		applies:   under("isorepo"),
		forbidden: ours("agent", "peer", "preload", "sequencer", "acquire", "cmd"),
	},
	{
		name:      "isorelease reads a release out of an ISO: never the daemons",
		applies:   under("isorelease"),
		forbidden: ours("agent", "peer", "preload", "sequencer", "acquire", "repo", "cmd"),
	},
	{
		name:      "chunks checks files: the standard library and its hash only",
		applies:   under("chunks"),
		forbidden: func(p string) bool { return !standard(p) && p != "github.com/zeebo/blake3" },
	},
	{
		name:      "policy is pure: the standard library only",
		applies:   under("policy"),
		forbidden: func(p string) bool { return !standard(p) },
	},
	{
		name:    "api holds only types: the standard library and apimachinery",
		applies: under("api"),
		forbidden: func(p string) bool {
			return !standard(p) && !strings.HasPrefix(p, "k8s.io/apimachinery/")
		},
	},
	{
		name:      "the agent decides, its adapters are handed in: no containerd nor gossip adapter",
		applies:   under("agent"),
		forbidden: ours("preload/containerd", "peer/memberlist"),
	},
	{
		name:      "a node step talks to its node, its agent over HTTP and the API server, nothing of the daemons",
		applies:   under("nodestep"),
		forbidden: ours("agent", "peer", "preload", "repo", "sequencer", "iso", "acquire", "chunks"),
	},
	{
		name:      "no library package imports the commands",
		applies:   not(under("cmd", "hack")),
		forbidden: ours("cmd"),
	},
}

// walkGoFiles calls fn with the path (slash-separated, relative to the module root) and the
// imports and doc of every non-test Go file of the module, e2e, testdata, bin and hidden
// directories left out.
func walkGoFiles(t *testing.T, fn func(rel string, f *ast.File)) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "e2e" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, perr := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly|parser.ParseComments)
		require.NoError(t, perr, "every Go file of the module parses")
		rel, _ := filepath.Rel(root, p)
		fn(filepath.ToSlash(rel), f)
		return nil
	})
	require.NoError(t, err)
}

// importPaths returns the import paths of f.
func importPaths(t *testing.T, f *ast.File) []string {
	t.Helper()
	var paths []string
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		require.NoError(t, err)
		paths = append(paths, p)
	}
	return paths
}

func TestBoundaries(t *testing.T) {
	t.Parallel()
	imports := map[string][]string{} // file (relative) -> imports
	dirs := map[string]string{}      // file -> package dir
	walkGoFiles(t, func(rel string, f *ast.File) {
		dirs[rel] = path.Dir(rel)
		imports[rel] = importPaths(t, f)
	})
	require.Contains(t, dirs, "preload/containerd/containerd.go", "the walk found the module's files")
	require.Contains(t, dirs, "peer/memberlist/memberlist.go", "the walk found the module's files")
	require.Contains(t, dirs, "peer/fetch/fetcher.go", "the walk found the module's files")

	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			var offenders []string
			for file, paths := range imports {
				if !r.applies(dirs[file]) {
					continue
				}
				for _, p := range paths {
					if r.forbidden(p) {
						offenders = append(offenders, file+" imports "+p)
					}
				}
			}
			require.Empty(t, offenders)
		})
	}
}

// TestRulesBite checks each rule against an import it must refuse, so a rule that matches nothing
// cannot pass unnoticed.
func TestRulesBite(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ dir, path string }{
		"only preload/containerd talks to containerd":                                                   {"peer", "github.com/containerd/containerd/v2/client"},
		"only peer/memberlist talks gossip":                                                             {"cmd/upgrade-repo", "github.com/hashicorp/memberlist"},
		"iso knows only the ISO format":                                                                 {"iso", module + "/release"},
		"repo knows fs.FS and HTTP, not where the files come from":                                      {"repo", module + "/iso"},
		"peer decides who has what, not how the ISO is read or imported":                                {"peer/fetch", module + "/preload"},
		"peer's own package is the ring's shared vocabulary: nothing else of this module":               {"peer", module + "/peer/inventory"},
		"peer/inventory knows what members say they hold, not where the bytes are or how they move":     {"peer/inventory", module + "/peer/cache"},
		"peer/cache stores and publishes: it neither downloads nor serves":                              {"peer/cache", module + "/peer/fetch"},
		"peer/fetch downloads over HTTP: it does not serve and is handed its membership":                {"peer/fetch", module + "/peer/serve"},
		"peer/serve sends what the cache holds: it neither fetches nor reads the directory":             {"peer/serve", module + "/peer/inventory"},
		"policy is pure: the standard library only":                                                     {"policy", "github.com/stretchr/testify/require"},
		"chunks checks files: the standard library and its hash only":                                   {"chunks", module + "/peer"},
		"isorelease reads a release out of an ISO: never the daemons":                                   {"isorelease", module + "/sequencer"},
		"isorepo joins the ISO reader to the repo server: never the agent, peer or preload":             {"isorepo", module + "/agent"},
		"backoff and idle are policies: the standard library only":                                      {"internal/idle", module + "/internal/redact"},
		"checksum is the ISO's digest: the standard library only":                                       {"checksum", module + "/internal/redact"},
		"httprange reads and writes ranges: redact, backoff, idle and the standard library only":        {"internal/httprange", module + "/peer"},
		"api holds only types: the standard library and apimachinery":                                   {"api/v1beta1", "sigs.k8s.io/controller-runtime"},
		"no library package imports the commands":                                                       {"repo", module + "/cmd/upgrade-repo"},
		"a node step talks to its node, its agent over HTTP and the API server, nothing of the daemons": {"nodestep/kubeadm", module + "/agent"},
		"the agent decides, its adapters are handed in: no containerd nor gossip adapter":               {"agent", module + "/peer/memberlist"},
	}
	require.Len(t, cases, len(rules))
	for _, r := range rules {
		c, ok := cases[r.name]
		require.True(t, ok, r.name)
		require.True(t, r.applies(c.dir) && r.forbidden(c.path), r.name)
	}
}
