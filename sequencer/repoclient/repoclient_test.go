package repoclient_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/release"
	"github.com/upgrade-repo/upgrade-repo/release/pack"
	"github.com/upgrade-repo/upgrade-repo/repo"
	"github.com/upgrade-repo/upgrade-repo/sequencer/repoclient"
)

const releaseYAML = "harvester: v1.6.0\nkubernetes: v1.33.1+rke2r1\nminUpgradableVersion: v1.5.0\nnewField: kept\n"

func TestLoad(t *testing.T) {
	t.Parallel()
	r, err := release.ParseRelease([]byte(releaseYAML))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/release", func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(r) })
	mux.HandleFunc("GET /harvester-release.yaml", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(releaseYAML)) })
	mux.HandleFunc("GET /bad/v1/release", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{not json")) })
	mux.HandleFunc("GET /empty/v1/release", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{}")) })
	mux.HandleFunc("GET /huge/v1/release", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"x":"` + strings.Repeat("a", 5<<20) + `"}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	gone := httptest.NewServer(mux)
	gone.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "harvester-release.yaml")
	require.NoError(t, os.WriteFile(file, []byte(releaseYAML), 0o600))
	broken := filepath.Join(dir, "broken.yaml")
	require.NoError(t, os.WriteFile(broken, []byte("kubernetes: v1\n"), 0o600))

	tests := []struct {
		name    string
		src     string
		wantErr string
	}{
		{name: "file", src: file},
		{name: "repo base url", src: srv.URL},
		{name: "repo base url with slash", src: srv.URL + "/"},
		{name: "yaml url", src: srv.URL + "/harvester-release.yaml"},
		{name: "missing file", src: filepath.Join(dir, "nope.yaml"), wantErr: "no such file"},
		{name: "file without version", src: broken, wantErr: "the harvester version is missing"},
		{name: "not found", src: srv.URL + "/nothing", wantErr: "404"},
		{name: "bad json", src: srv.URL + "/bad", wantErr: "decode " + srv.URL + "/bad/v1/release"},
		{name: "empty json", src: srv.URL + "/empty", wantErr: "the harvester version is missing"},
		{name: "huge", src: srv.URL + "/huge", wantErr: "larger than"},
		{name: "unreachable", src: gone.URL, wantErr: "get " + gone.URL + "/v1/release: dial tcp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := repoclient.Load(t.Context(), srv.Client(), tt.src)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.Equal(t, 1, strings.Count(err.Error(), tt.src), "the error names %s once: %v", tt.src, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "v1.6.0", got.Harvester)
			require.Equal(t, "v1.33.1+rke2r1", got.Kubernetes)
			require.Equal(t, "v1.5.0", got.MinUpgradableVersion)
			require.Equal(t, "kept", got.Extra["newField"])
		})
	}
}

// TestErrorsHideCredentials checks that an error names the release URL without its password or
// query, which may carry a signature.
func TestErrorsHideCredentials(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	for _, src := range []string{
		strings.Replace(srv.URL, "http://", "http://user:s3cret@", 1) + "/harvester-release.yaml?X-Amz-Signature=abc",
		strings.Replace(srv.URL, "http://", "http://user:s3cret@", 1) + "/repo?X-Amz-Signature=abc",
	} {
		_, err := repoclient.Load(t.Context(), nil, src)
		require.Error(t, err)
		require.NotContains(t, err.Error(), "s3cret")
		require.NotContains(t, err.Error(), "Signature")
		require.Contains(t, err.Error(), "404")
	}
}

// FetchImages reads what a real repo serves of a release's tree: every image of its lists, once.
func TestFetchImages(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res, err := pack.BuildTree(t.Context(), pack.Demo("v1.6.0", 4, 64<<10, 0), dir)
	require.NoError(t, err)
	h, err := repo.New(os.DirFS(dir))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	var want []string
	for _, a := range res.Archives {
		want = append(want, a.Refs()...)
	}
	slices.Sort(want)

	got, err := repoclient.FetchImages(t.Context(), nil, srv.URL+"/")
	require.NoError(t, err)
	require.Equal(t, slices.Compact(want), got)
	require.NotEmpty(t, got)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /noref/v1/images", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`[{"group":"common"}]`)) })
	mux.HandleFunc("GET /bad/v1/images", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{`)) })
	bad := httptest.NewServer(mux)
	t.Cleanup(bad.Close)
	for path, wantErr := range map[string]string{"/noref": "an image without a reference", "/bad": "decode", "/none": "404"} {
		_, err := repoclient.FetchImages(t.Context(), nil, bad.URL+path)
		require.ErrorContains(t, err, wantErr, path)
	}
}
