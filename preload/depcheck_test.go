package preload_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOnlyTheAdapterImportsContainerd keeps containerd's client behind preload/containerd: no
// other package of the module imports it.
func TestOnlyTheAdapterImportsContainerd(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	adapter := filepath.Join(root, "preload", "containerd")
	var offenders []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "e2e") {
				return filepath.SkipDir
			}
			if p == adapter {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		for _, path := range importPaths(p) {
			if strings.HasPrefix(path, "github.com/containerd/") {
				rel, _ := filepath.Rel(root, p)
				offenders = append(offenders, rel+" imports "+path)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, offenders, "only preload/containerd may import containerd")
	_, err = os.Stat(filepath.Join(adapter, "containerd.go"))
	require.NoError(t, err, "the adapter is where this test expects it")
}

// importPaths returns the paths the Go file at p imports, none when it does not parse: a file
// being edited elsewhere says nothing about imports.
func importPaths(p string) []string {
	f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
	if err != nil {
		return nil
	}
	paths := make([]string, 0, len(f.Imports))
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err == nil {
			paths = append(paths, path)
		}
	}
	return paths
}
