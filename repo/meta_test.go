package repo

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/release/pack"
)

func TestMetadata(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := pack.Demo("v1.5.2", 4, 4096, 0)
	res, err := pack.BuildTree(t.Context(), spec, dir)
	require.NoError(t, err)
	// A newer release adds fields this version does not know; they are kept.
	rel, err := os.ReadFile(dir + "/harvester-release.yaml")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(dir+"/harvester-release.yaml", append(rel, []byte("newField:\n  nested: 3\n")...), 0o644))
	ts, _, h := newTestServer(t, os.DirFS(dir))
	require.Equal(t, "v1.5.2", h.Version())

	t.Run("release", func(t *testing.T) {
		t.Parallel()
		resp, body := get(t, ts.URL+"/v1/release", nil)
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		var got map[string]any
		require.NoError(t, json.Unmarshal(body, &got))
		for _, k := range []string{"harvester", "harvesterChart", "installer", "os", "kubernetes", "rancher",
			"monitoringChart", "loggingChart", "kubevirt", "minUpgradableVersion", "rancherDependencies"} {
			require.Contains(t, got, k)
		}
		require.Equal(t, "v1.5.2", got["harvester"])
		require.Equal(t, map[string]any{"nested": 3.0}, got["newField"])
		require.Contains(t, got["rancherDependencies"], "fleet")
	})
	t.Run("raw", func(t *testing.T) {
		t.Parallel()
		resp, body := get(t, ts.URL+"/harvester-release.yaml", nil)
		require.Equal(t, 200, resp.StatusCode)
		raw, err := os.ReadFile(dir + "/harvester-release.yaml")
		require.NoError(t, err)
		require.Equal(t, raw, body)
	})
	t.Run("bundle", func(t *testing.T) {
		t.Parallel()
		resp, body := get(t, ts.URL+"/v1/bundle", nil)
		require.Equal(t, 200, resp.StatusCode)
		var doc BundleDoc
		require.NoError(t, json.Unmarshal(body, &doc))
		require.Len(t, doc.Groups, 3)
		n, archives := 0, 0
		for _, ba := range res.Archives {
			// The group's archives in the metadata's order, which is the spec's.
			got := doc.Groups[ba.Group]
			i := slices.IndexFunc(got, func(a BundleArchive) bool { return a.Archive == "/"+ba.Archive })
			require.GreaterOrEqual(t, i, 0, "archive %s", ba.Archive)
			require.Equal(t, "/"+ba.List, got[i].List)
			require.Equal(t, ba.Size, got[i].Size)
			require.Equal(t, ba.Refs(), got[i].Images)
			require.Empty(t, got[i].Error)
			n += len(got[i].Images)
			archives++
		}
		require.Len(t, doc.Groups["common"], 4)
		require.Equal(t, 7, archives)
		require.Equal(t, 7, n)
	})
	t.Run("images", func(t *testing.T) {
		t.Parallel()
		resp, body := get(t, ts.URL+"/v1/images", nil)
		require.Equal(t, 200, resp.StatusCode)
		var imgs []ImageDoc
		require.NoError(t, json.Unmarshal(body, &imgs))
		var want []ImageDoc
		for _, ba := range res.Archives {
			for _, r := range ba.Refs() {
				want = append(want, ImageDoc{Ref: r, Group: ba.Group, Archive: "/" + ba.Archive})
			}
		}
		require.ElementsMatch(t, want, imgs)
	})
}

func TestMetadataMissingOrBroken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fsys fstest.MapFS
		path string
		code int
		msg  string
	}{
		{"no release", fstest.MapFS{"a.txt": {}}, "/v1/release", 404, "the release has no harvester-release.yaml"},
		{"no bundle", fstest.MapFS{"a.txt": {}}, "/v1/bundle", 404, "the release has no bundle/metadata.yaml"},
		{"no bundle images", fstest.MapFS{"a.txt": {}}, "/v1/images", 404, "the release has no bundle/metadata.yaml"},
		{"broken release", fstest.MapFS{"harvester-release.yaml": {Data: []byte("os: x\n")}}, "/v1/release", 422, "the harvester version is missing"},
		{"broken bundle", fstest.MapFS{"bundle/metadata.yaml": {Data: []byte("images: {common: [{list: ../../etc/passwd, archive: /a}]}")}}, "/v1/bundle", 422, "leaves the bundle"},
		{"release is a directory", fstest.MapFS{"harvester-release.yaml/x": {}}, "/v1/release", 422, "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts, _, _ := newTestServer(t, tt.fsys)
			resp, body := get(t, ts.URL+tt.path, nil)
			require.Equal(t, tt.code, resp.StatusCode)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var e struct {
				Error  string `json:"error"`
				Status int    `json:"status"`
			}
			require.NoError(t, json.Unmarshal(body, &e))
			require.Contains(t, e.Error, tt.msg)
			require.Equal(t, tt.code, e.Status)
		})
	}
}

func TestBundleArchiveMissing(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"bundle/metadata.yaml":                {Data: []byte("images:\n  common:\n  - list: /harvester/images-lists/a.txt\n    archive: /harvester/images/a.tar.zst\n")},
		"bundle/harvester/images-lists/a.txt": {Data: []byte("nginx\n")},
	}
	ts, _, _ := newTestServer(t, fsys)
	resp, body := get(t, ts.URL+"/v1/bundle", nil)
	require.Equal(t, 200, resp.StatusCode)
	var doc BundleDoc
	require.NoError(t, json.Unmarshal(body, &doc))
	require.Equal(t, "the archive is not in the image", doc.Groups["common"][0].Error)
	require.Equal(t, []string{"docker.io/library/nginx:latest"}, doc.Groups["common"][0].Images)
}
