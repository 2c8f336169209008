package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
)

func TestPreloadCommand(t *testing.T) {
	d := containerdtest.Start(t)
	isotest.RequireXorriso(t)
	shared := preloadtest.NewLayer(t, 32<<10, false, 1)
	a := preloadtest.NewImage(t, "docker.io/library/alpha:v1", preloadtest.ImageOptions{OS: "linux", Arch: "amd64", Shared: sharedLayers(shared), Own: 1, Seed: 1})
	b := preloadtest.NewImage(t, "docker.io/rancher/beta:v2", preloadtest.ImageOptions{Shared: sharedLayers(shared), Own: 1, Seed: 2})
	c := preloadtest.NewImage(t, "docker.io/library/gamma:v3", preloadtest.ImageOptions{OS: "linux", Arch: "amd64", OCI: true, Own: 2, Seed: 3})
	dir := t.TempDir()
	preloadtest.WriteRelease(t, dir,
		preloadtest.Archive{Group: "common", Name: "common.tar.zst", Refs: []string{a.Ref, b.Ref},
			Data: preloadtest.Zstd(t, preloadtest.DockerArchive(t, a, b))},
		preloadtest.Archive{Group: "rke2", Name: "rke2.tar.zst", Refs: []string{c.Ref},
			Data: preloadtest.Zstd(t, preloadtest.OCIArchive(t, c))})
	image := isotest.Build(t, dir)

	preloadCmd := func(t *testing.T, args ...string) (string, error) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), append([]string{"preload", "--containerd-sock", d.Socket}, args...), &stdout, &stderr)
		t.Logf("stderr:\n%s", stderr.String())
		return stdout.String(), err
	}

	// Steps run in order: each depends on what the previous one imported.
	out, err := preloadCmd(t, "--iso", image, "--dry-run")
	require.NoError(t, err)
	require.Contains(t, out, "import   common   common.tar.zst   2 of 2 listed images are missing")
	require.Contains(t, out, "import   rke2     rke2.tar.zst     1 of 1 listed images are missing: docker.io/library/gamma:v3")

	out, err = preloadCmd(t, "--iso", image, "-o", "json", "--concurrency", "2")
	require.NoError(t, err)
	var res struct {
		Plan   preload.Plan   `json:"plan"`
		Status preload.Status `json:"status"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, preload.StatePreloaded, res.Status.State)
	require.Equal(t, 3, res.Status.ImagesPresent)
	require.Positive(t, res.Status.BytesRead)
	require.Len(t, res.Plan.Imports(), 2)

	out, err = preloadCmd(t, "--iso", image)
	require.NoError(t, err)
	require.Contains(t, out, "skip     common   common.tar.zst   all 2 listed images are present")
	require.Contains(t, out, "ImagePreloaded: 3 of 3 images present, 0 bytes read")

	// Another namespace has none of the images, and an ISO lacking them cannot fill it.
	empty := t.TempDir()
	preloadtest.WriteRelease(t, empty, preloadtest.Archive{Group: "common", Name: "common.tar.zst", Refs: []string{a.Ref}, Data: []byte("not zstd")})
	_, err = preloadCmd(t, "--iso", isotest.Build(t, empty), "--namespace", "other")
	require.ErrorIs(t, err, preload.ErrIncomplete)
	require.ErrorContains(t, err, "archive bundle/common/images/common.tar.zst from iso")

	// The repo Service alone, over HTTP, into a namespace of its own.
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	out, err = preloadCmd(t, "--repo", srv.URL, "--namespace", "from-repo")
	require.NoError(t, err)
	require.Contains(t, out, "ImagePreloaded: 3 of 3 images present")

	_, err = preloadCmd(t)
	require.ErrorIs(t, err, errUsage)
	_, err = preloadCmd(t, "--iso", image, "-o", "yaml")
	require.ErrorIs(t, err, errUsage)
	for _, bad := range [][]string{{"--nice", "20"}, {"--max-bytes-per-second", "-1"}, {"--snapshotter", ""}} {
		_, err = preloadCmd(t, append([]string{"--iso", image}, bad...)...)
		require.ErrorIs(t, err, errUsage, "%q", bad)
	}

	// Capped, streamed through containerd's content service and not unpacked.
	out, err = preloadCmd(t, "--iso", image, "--namespace", "capped", "--max-bytes-per-second", "4000000",
		"--direct-ingest=false", "--unpack=false")
	require.NoError(t, err)
	require.Contains(t, out, "ImagePreloaded: 3 of 3 images present")
}

func sharedLayers(l ...v1.Layer) []v1.Layer { return l }

func TestPreloadGCPercent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		percent int
		ok      bool
	}{
		{name: "untuned", env: nil, percent: lowGCPercent, ok: true},
		{name: "empty values count as unset", env: map[string]string{"GOGC": "", "GOMEMLIMIT": ""}, percent: lowGCPercent, ok: true},
		{name: "GOGC set", env: map[string]string{"GOGC": "200"}},
		{name: "GOGC off", env: map[string]string{"GOGC": "off"}},
		{name: "GOMEMLIMIT set", env: map[string]string{"GOMEMLIMIT": "100MiB"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			percent, ok := preloadGCPercent(func(k string) string { return tt.env[k] })
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.percent, percent)
		})
	}
}
