package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/release/pack"
)

// testRelease is the release ISO of the run. hack/e2e.sh builds it with `upgrade-repo release
// pack --spec testdata/release.yaml` before installing the chart, since the chart names it.
type testRelease struct {
	// iso is the ISO's path on the host, tree the directory of its files: the expected content
	// of every file the servers serve.
	iso, tree string
	// checksum is the ISO's `sha512:HEX`; size its length.
	checksum string
	size     int64
	// res is what `release pack -o json` reported: archives, images and files.
	res *pack.Result
	// seeds are the nodes whose agent cache held the ISO before the chart was installed.
	seeds map[string]bool
}

var (
	releaseOnce sync.Once
	releaseVal  *testRelease
	releaseErr  error
)

// releaseISO returns the run's release ISO, as hack/e2e.sh describes it in E2E_RELEASE_DIR,
// E2E_ISO_CHECKSUM and E2E_SEED_NODES.
func releaseISO(t *testing.T) *testRelease {
	t.Helper()
	env(t)
	releaseOnce.Do(func() { releaseVal, releaseErr = loadRelease(os.Getenv("E2E_RELEASE_DIR")) })
	require.NoError(t, releaseErr)
	return releaseVal
}

func loadRelease(dir string) (*testRelease, error) {
	if dir == "" {
		return nil, fmt.Errorf("E2E_RELEASE_DIR is not set: hack/e2e.sh builds the release")
	}
	r := &testRelease{
		iso:      filepath.Join(dir, "release.iso"),
		tree:     filepath.Join(dir, "tree"),
		checksum: os.Getenv("E2E_ISO_CHECKSUM"),
		seeds:    map[string]bool{},
	}
	if !strings.HasPrefix(r.checksum, "sha512:") {
		return nil, fmt.Errorf("E2E_ISO_CHECKSUM %q is not sha512:HEX", r.checksum)
	}
	st, err := os.Stat(r.iso)
	if err != nil {
		return nil, fmt.Errorf("release iso: %w", err)
	}
	r.size = st.Size()
	b, err := os.ReadFile(filepath.Join(dir, "release.json"))
	if err != nil {
		return nil, fmt.Errorf("release pack report: %w", err)
	}
	r.res = &pack.Result{}
	if err := json.Unmarshal(b, r.res); err != nil {
		return nil, fmt.Errorf("release pack report %s: %w", filepath.Join(dir, "release.json"), err)
	}
	if len(r.res.Files) == 0 || len(r.res.Archives) == 0 {
		return nil, fmt.Errorf("release pack report %s lists no files or archives", filepath.Join(dir, "release.json"))
	}
	for _, n := range strings.Split(os.Getenv("E2E_SEED_NODES"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			r.seeds[n] = true
		}
	}
	return r, nil
}

// refs returns every image reference of the release.
func (r *testRelease) refs() []string {
	var out []string
	for _, a := range r.res.Archives {
		out = append(out, a.Refs()...)
	}
	return out
}
