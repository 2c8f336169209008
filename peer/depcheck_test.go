package peer_test

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

// TestBoundaries keeps hashicorp/memberlist behind peer/memberlist, and keeps peer itself free of
// the other components (the agent command wires them together).
func TestBoundaries(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	adapter := filepath.Join(root, "peer", "memberlist")
	var offenders []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return nil //nolint:nilerr // a file that does not parse says nothing about imports
		}
		rel, _ := filepath.Rel(root, p)
		inPeer := filepath.Dir(p) == filepath.Join(root, "peer") && !strings.HasSuffix(p, "_test.go")
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == "github.com/hashicorp/memberlist" && filepath.Dir(p) != adapter {
				offenders = append(offenders, rel+" imports "+path)
			}
			for _, other := range []string{"iso", "repo", "preload", "acquire", "sequencer", "api"} {
				if inPeer && (path == "github.com/upgrade-repo/upgrade-repo/"+other || strings.HasPrefix(path, "github.com/upgrade-repo/upgrade-repo/"+other+"/")) {
					offenders = append(offenders, rel+" imports "+path)
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, offenders)
	_, err = os.Stat(adapter)
	require.NoError(t, err)
}
