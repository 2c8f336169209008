package boundary

import (
	"go/ast"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// allowed is, for every package of the module, the packages of this module its non-test files
// may import: the one list of who depends on whom inside the module. The rules above say what a
// part must never reach, with their reasons; this says, package by package, what it does reach.
// A new package needs an entry here and an "Imports:" line in its doc naming the same packages.
// The programs (cmd/upgrade-repo, cmd/upgrade-repo-serve, hack's and the benchmark release
// builder) wire everything and are left out.
var allowed = map[string][]string{
	"acquire":                           {"checksum", "chunks", "iso", "peer", "peer/cache", "peer/fetch", "peer/inventory", "internal/redact"},
	"agent":                             {"api/v1beta1", "internal/backoff", "checksum", "chunks", "forecast", "internal/httprange", "internal/idle", "iso", "isorelease", "isorepo", "nodestep", "peer", "peer/cache", "peer/fetch", "peer/inventory", "peer/serve", "preload", "internal/printable", "internal/redact", "registry", "release", "repo", "sequencer/report"},
	"api/v1beta1":                       {},
	"internal/backoff":                  {},
	"checksum":                          {},
	"chunks":                            {},
	"cmd/internal/cli":                  {},
	"cmd/internal/kubeclient":           {"api/v1beta1", "cmd/internal/cli", "planctl"},
	"cmd/internal/servecmd":             {"acquire", "checksum", "cmd/internal/cli", "isorepo", "peer", "repo"},
	"forecast":                          {},
	"internal/httprange":                {"internal/backoff", "internal/idle", "internal/redact"},
	"internal/idle":                     {},
	"internal/boundary":                 {},
	"internal/monitoring":               {},
	"internal/pagecache":                {},
	"internal/priority":                 {},
	"iso":                               {},
	"iso/inspect":                       {"iso"},
	"iso/isotest":                       {},
	"isorelease":                        {"internal/httprange", "iso", "internal/redact", "release"},
	"isorepo":                           {"checksum", "chunks", "iso", "repo"},
	"nodestep":                          {"internal/backoff", "checksum"},
	"nodestep/kubeadm":                  {"internal/backoff", "checksum", "nodestep"},
	"peer":                              {},
	"peer/cache":                        {"chunks", "internal/pagecache", "peer", "peer/inventory"},
	"peer/fetch":                        {"internal/backoff", "checksum", "chunks", "internal/httprange", "internal/idle", "peer", "peer/cache", "peer/inventory", "internal/redact"},
	"peer/inventory":                    {"checksum", "chunks"},
	"peer/memberlist":                   {"peer", "peer/inventory"},
	"peer/serve":                        {"internal/httprange", "peer", "peer/cache"},
	"planctl":                           {"api/v1beta1", "internal/backoff", "checksum", "forecast", "internal/httprange", "isorelease", "planview", "policy", "internal/printable", "internal/redact", "release", "sequencer", "sequencer/repoclient", "sequencer/suc"},
	"planctl/planctltest":               {"api/v1beta1"},
	"planview":                          {"api/v1beta1", "forecast", "internal/printable", "policy"},
	"policy":                            {},
	"preload":                           {"internal/backoff", "internal/httprange", "internal/idle", "internal/redact", "release"},
	"preload/containerd":                {"internal/pagecache", "preload", "registry"},
	"preload/containerd/containerdtest": {},
	"preload/preloadtest":               {"preload"},
	"internal/printable":                {},
	"internal/redact":                   {},
	"registry":                          {"internal/httprange", "internal/idle", "peer", "release"},
	"registry/hoststoml":                {},
	"release":                           {},
	"release/pack":                      {"release"},
	"repo":                              {"internal/httprange", "release"},
	"sequencer":                         {"api/v1beta1", "internal/backoff", "checksum", "forecast", "internal/httprange", "isorelease", "nodestep", "planview", "policy", "internal/redact", "release", "sequencer/repoclient", "sequencer/suc"},
	"sequencer/repoclient":              {"isorelease", "internal/redact", "release"},
	"sequencer/report":                  {"api/v1beta1"},
	"sequencer/suc":                     {},
}

// wiring are the programs: they may import every package, and have no entry in allowed.
func wiring(dir string) bool {
	return under("cmd/upgrade-repo", "cmd/upgrade-repo-serve", "hack", "preload/preloadtest/benchrelease")(dir)
}

// packageImports returns, for every package directory of the module (slash-separated, relative to
// the root), the imports of this module that its non-test files have, and the package's doc.
func packageImports(t *testing.T) (imports map[string][]string, docs map[string]string) {
	t.Helper()
	imports, docs = map[string][]string{}, map[string]string{}
	walkGoFiles(t, func(rel string, f *ast.File) {
		dir := path.Dir(rel)
		if _, ok := imports[dir]; !ok {
			imports[dir] = nil
		}
		if f.Doc != nil {
			docs[dir] += f.Doc.Text()
		}
		for _, p := range importPaths(t, f) {
			if own, ok := strings.CutPrefix(p, module+"/"); ok {
				imports[dir] = append(imports[dir], own)
			}
		}
	})
	return imports, docs
}

// TestEveryPackageHasItsRule fails for a package of the module with no entry in allowed, an entry
// for a package that is gone, and an import that its entry does not list.
func TestEveryPackageHasItsRule(t *testing.T) {
	t.Parallel()
	imports, _ := packageImports(t)
	require.Contains(t, imports, "sequencer", "the walk found the module's packages")
	var missing, stale, offenders []string
	for dir, paths := range imports {
		if wiring(dir) {
			continue
		}
		allow, ok := allowed[dir]
		if !ok {
			missing = append(missing, dir)
			continue
		}
		for _, p := range paths {
			if !slices.Contains(allow, p) {
				offenders = append(offenders, dir+" imports "+p)
			}
		}
	}
	for dir := range allowed {
		if _, ok := imports[dir]; !ok {
			stale = append(stale, dir)
		}
	}
	slices.Sort(missing)
	slices.Sort(stale)
	slices.Sort(offenders)
	require.Empty(t, missing, "packages with no entry in allowed")
	require.Empty(t, stale, "entries in allowed for packages that are gone")
	require.Empty(t, offenders, "imports that allowed does not list")
}

var (
	importsLine   = regexp.MustCompile(`(?s)Imports:(.*?)(?:\n\n|$)`)
	parenthetical = regexp.MustCompile(`\([^)]*\)`)
	word          = regexp.MustCompile(`[a-z0-9]+(?:/[a-z0-9]+)*`)
)

// docNames returns the packages of this module that the first clause of an "Imports:" paragraph
// names (up to the first ';' or '.', asides in parentheses left out): a package is named by its
// path (peer/fetch) or, when no other package shares it, its last element (repoclient); "api" is
// api/v1beta1; the package self is not counted. ok is false when the doc has no such paragraph.
func docNames(doc, self string, known []string) (names []string, ok bool) {
	m := importsLine.FindStringSubmatch(doc)
	if m == nil {
		return nil, false
	}
	clause := parenthetical.ReplaceAllString(strings.Join(strings.Fields(m[1]), " "), "")
	if i := strings.IndexAny(clause, ";."); i >= 0 {
		clause = clause[:i]
	}
	last := map[string][]string{"api": {"api/v1beta1"}}
	for _, k := range known {
		e := k[strings.LastIndex(k, "/")+1:]
		last[e] = append(last[e], k)
	}
	for _, w := range word.FindAllString(clause, -1) {
		switch {
		case w == self || len(last[w]) == 1 && last[w][0] == self:
			// a package names itself ("nothing of this module but itself"), never an import
		case slices.Contains(known, w):
			names = append(names, w)
		case len(last[w]) == 1:
			names = append(names, last[w][0])
		}
	}
	slices.Sort(names)
	return slices.Compact(names), true
}

// TestDocsSayTheRule requires every package's doc to state its rule: an "Imports:" line whose first
// clause names exactly the packages of this module that allowed lists for it.
func TestDocsSayTheRule(t *testing.T) {
	t.Parallel()
	_, docs := packageImports(t)
	known := slices.Sorted(maps.Keys(allowed))
	var wrong []string
	for _, dir := range known {
		names, ok := docNames(docs[dir], dir, known)
		if !ok {
			wrong = append(wrong, dir+": no Imports: line in the package doc")
			continue
		}
		want := slices.Sorted(slices.Values(allowed[dir]))
		if !slices.Equal(names, want) {
			wrong = append(wrong, dir+": the doc names "+strings.Join(names, ", ")+"; the rule is "+strings.Join(want, ", "))
		}
	}
	require.Empty(t, wrong)
}

func TestDocNames(t *testing.T) {
	t.Parallel()
	known := []string{"api/v1beta1", "peer", "peer/inventory", "chunks", "checksum", "sequencer/repoclient", "release", "release/pack"}
	names, ok := docNames("Package x does things.\n\nImports: peer (for the checksum form), chunks,\nrepoclient and api; never release.\n", "x", known)
	require.True(t, ok)
	require.Equal(t, []string{"api/v1beta1", "chunks", "peer", "sequencer/repoclient"}, names)
	_, ok = docNames("Package x does things.\n", "x", known)
	require.False(t, ok)
}
