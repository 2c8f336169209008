package v1beta1_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// TestOnlyTypes keeps the API package to types and markers: it may import apimachinery and
// nothing else outside the standard library.
func TestOnlyTypes(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		af, err := parser.ParseFile(fset, f, src, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range af.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			std := !strings.Contains(strings.SplitN(path, "/", 2)[0], ".")
			require.True(t, std || strings.HasPrefix(path, "k8s.io/apimachinery/"), "%s imports %s", f, path)
		}
	}
}

func TestAddToScheme(t *testing.T) {
	t.Parallel()
	s := runtime.NewScheme()
	require.NoError(t, v1beta1.AddToScheme(s))
	for _, kind := range []string{"Version", "VersionList", "UpgradePlan", "UpgradePlanList", "RepoNode", "RepoNodeList"} {
		require.True(t, s.Recognizes(v1beta1.GroupVersion.WithKind(kind)), kind)
	}
	// Deepcopy is generated: a copy shares nothing with the original.
	p := &v1beta1.UpgradePlan{Status: v1beta1.UpgradePlanStatus{NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{"n": {State: v1beta1.NodeUpgraded}}}}
	c := p.DeepCopy()
	c.Status.NodeUpgradeStatuses["n"] = v1beta1.NodeUpgradeStatus{}
	require.Equal(t, v1beta1.NodeUpgraded, p.Status.NodeUpgradeStatuses["n"].State)
}
