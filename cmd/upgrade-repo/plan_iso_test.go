package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
	"github.com/upgrade-repo/upgrade-repo/planview"
)

// planISO builds a release ISO holding releaseYAML and two archives with their image lists.
func planISO(t *testing.T, releaseYAML, common, rke2 string) string {
	t.Helper()
	isotest.RequireXorriso(t)
	src := t.TempDir()
	for p, body := range map[string]string{
		"harvester-release.yaml": releaseYAML,
		"bundle/metadata.yaml": "images:\n  common:\n  - list: harvester/images-lists/common.txt\n    archive: harvester/images/common.tar.zst\n" +
			"  rke2:\n  - list: harvester/images-lists/rke2.txt\n    archive: harvester/images/rke2.tar.zst\n",
		"bundle/harvester/images-lists/common.txt": common,
		"bundle/harvester/images-lists/rke2.txt":   rke2,
		"bundle/harvester/images/common.tar.zst":   string(make([]byte, 3<<20)),
		"bundle/harvester/images/rke2.tar.zst":     string(make([]byte, 1<<20)),
	} {
		require.NoError(t, os.MkdirAll(filepath.Join(src, filepath.Dir(p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(src, p), []byte(body), 0o644))
	}
	return isotest.Build(t, src)
}

// plan --release names an ISO URL: it is judged from the ISO read through ranges, and the plan
// says what its archives hold and which images are new against the installed release's ISO.
func TestPlanFromAnISOURL(t *testing.T) {
	t.Parallel()
	current := planISO(t, planCurrentYAML, "docker.io/rancher/harvester:v1.5.2\ndocker.io/library/nginx:1.27\n", "docker.io/rancher/rke2-runtime:v1.32.7-rke2r1\n")
	target := planISO(t, planTargetYAML, "docker.io/rancher/harvester:v1.6.0\ndocker.io/library/nginx:1.27\n", "docker.io/rancher/rke2-runtime:v1.33.3-rke2r1\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, target) }))
	t.Cleanup(srv.Close)
	url := srv.URL + "/harvester-v1.6.0-amd64.iso?X-Amz-Signature=secret"

	out, err := runPlanTest(t, "--current", "v1.5.2", "--release", url, "--current-release", current)
	require.NoError(t, err)
	for _, want := range []string{
		"Upgrade plan: v1.5.2 -> v1.6.0",
		"common.tar.zst   common   2        3.0 MiB   1",
		"rke2.tar.zst     rke2     1        1.0 MiB   1",
		"Images against the installed release: 2 new, 2 removed, 1 unchanged",
		"  + docker.io/rancher/harvester:v1.6.0",
		"  - docker.io/rancher/rke2-runtime:v1.32.7-rke2r1",
		"The upgrade is allowed.",
	} {
		require.Contains(t, out, want)
	}
	require.Regexp(t, `Note: read \d+\.\d KiB of the \d+\.\d MiB ISO in \d requests, without downloading it`, out)
	require.NotContains(t, out, "secret")

	out, err = runPlanTest(t, "--current", "v1.5.2", "--release", url, "-o", "json")
	require.NoError(t, err)
	var rep planview.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, "v1.6.0", rep.Target)
	require.False(t, rep.Images.Compared)
	require.Len(t, rep.Images.Archives, 2)
	require.Equal(t, planview.Archive{Group: "common", Archive: "common.tar.zst", Images: 2, Size: 3 << 20}, rep.Images.Archives[0])

	// The ISO refuses the installed version: refused without a download.
	_, err = runPlanTest(t, "--current", "v1.4.0", "--release", url)
	require.ErrorIs(t, err, errNotAllowed)
}
