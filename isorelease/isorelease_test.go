package isorelease_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
	"github.com/upgrade-repo/upgrade-repo/isorelease"
	"github.com/upgrade-repo/upgrade-repo/release"
)

// buildISO builds a release ISO in the product's layout with xorriso.
func buildISO(t *testing.T) string {
	t.Helper()
	isotest.RequireXorriso(t)
	src := t.TempDir()
	enc, err := zstd.NewWriter(nil)
	require.NoError(t, err)
	// A zstd frame compressed whole says the size of its content: 1 MB of tar.
	rke2Archive := enc.EncodeAll([]byte(strings.Repeat("r", 1_000_000)), nil)
	files := map[string]string{
		"harvester-release.yaml": "harvester: v1.6.0\nminUpgradableVersion: v1.5.0\nkubernetes: v1.33.3+rke2r1\n",
		"bundle/metadata.yaml": "images:\n  common:\n  - list: harvester/images-lists/common.txt\n    archive: harvester/images/common.tar.zst\n" +
			"  rke2:\n  - list: harvester/images-lists/rke2.txt\n    archive: harvester/images/rke2.tar.zst\n",
		"bundle/harvester/images-lists/common.txt": "docker.io/library/nginx:1.27\nrancher/harvester:v1.6.0\n",
		"bundle/harvester/images-lists/rke2.txt":   "rancher/rke2-runtime:v1.33.3-rke2r1\ndocker.io/library/nginx:1.27\n",
		"bundle/harvester/images/common.tar.zst":   strings.Repeat("c", 300000),
		"bundle/harvester/images/rke2.tar.zst":     string(rke2Archive),
		// The blob index release pack writes, here for the common archive only.
		"bundle/blobs.json": `{"archives":[{"archive":"bundle/harvester/images/common.tar.zst","images":{` +
			`"docker.io/library/nginx:1.27":["sha256:m1","sha256:base"],"rancher/harvester:v1.6.0":["sha256:m2","sha256:base"]}}],` +
			`"sizes":{"sha256:m1":{"size":500},"sha256:m2":{"size":600},"sha256:base":{"size":1000,"unpacked":3000}}}`,
	}
	for p, body := range files {
		require.NoError(t, os.MkdirAll(filepath.Join(src, filepath.Dir(p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(src, p), []byte(body), 0o644))
	}
	return isotest.Build(t, src)
}

func TestOpen(t *testing.T) {
	t.Parallel()
	path := buildISO(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/plain.iso" { // no ranges
			b, _ := os.ReadFile(path)
			_, _ = w.Write(b)
			return
		}
		http.ServeFile(w, r, path)
	}))
	t.Cleanup(srv.Close)

	for _, src := range []string{path, srv.URL + "/harvester-v1.6.0.iso?X-Amz-Signature=s"} {
		require.True(t, isorelease.IsISO(src))
		c, err := isorelease.Open(t.Context(), srv.Client(), src)
		require.NoError(t, err, src)
		require.Equal(t, "v1.6.0", c.Release.Harvester)
		require.Equal(t, "v1.5.0", c.Release.MinUpgradableVersion)
		require.Len(t, c.Archives, 2)
		require.Equal(t, "common", c.Archives[0].Group)
		require.Equal(t, int64(300000), c.Archives[0].Size)
		require.Len(t, c.Archives[0].Images, 2)
		require.Zero(t, c.Archives[0].TarBytes, "an archive that is no zstd frame says nothing")
		require.Equal(t, int64(1_000_000), c.Archives[1].TarBytes, "read from the frame's header")
		require.Equal(t, []isorelease.Blob{{Digest: "sha256:m2", BlobSize: release.BlobSize{Size: 600}}, {Digest: "sha256:base", BlobSize: release.BlobSize{Size: 1000, Unpacked: 3000}}},
			c.Archives[0].Blobs["docker.io/rancher/harvester:v1.6.0"], "by normalised reference")
		require.Len(t, c.Archives[0].Blobs, 2)
		require.Nil(t, c.Archives[1].Blobs, "an archive the index does not know")
		require.Len(t, c.Images(), 3, "an image in two lists counts once")
		st, _ := os.Stat(path)
		require.Equal(t, st.Size(), c.Size)
		if c.Requests > 0 {
			require.LessOrEqual(t, c.Requests, int64(16))
			require.LessOrEqual(t, c.Bytes, int64(1<<20))
		}
	}
	_, err := isorelease.Open(t.Context(), srv.Client(), srv.URL+"/plain.iso")
	require.ErrorIs(t, err, httprange.ErrNoRanges)
	require.False(t, isorelease.IsISO("https://example.com/harvester-release.yaml"))
	require.False(t, isorelease.IsISO("https://repo:8080"))
}

// CheckSource tells a URL from a file and says what is wrong with anything else, and what an ISO
// is read from.
func TestCheckSource(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "release.iso")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	tests := []struct {
		name   string
		src    string
		remote bool
		want   string // what the error says; "" for none
	}{
		{name: "http URL", src: "http://origin/release.iso", remote: true},
		{name: "https URL", src: "https://origin/release.iso?sig=1", remote: true},
		{name: "file", src: file},
		{name: "directory", src: dir, want: dir + " is a directory, not an ISO image file: want its path or its http or https URL"},
		{name: "ftp URL", src: "ftp://user:secret@origin/release.iso", remote: true,
			want: "scheme ftp:// is not supported (want http://HOST/PATH or https://HOST/PATH): an ISO is read from a file or an http or https URL"},
		{name: "URL without host", src: "https:///release.iso", remote: true, want: "no host"},
		{name: "missing file", src: filepath.Join(dir, "nope.iso"), want: "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			remote, err := isorelease.CheckSource(tc.src)
			require.Equal(t, tc.remote, remote)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "secret")
			_, err = isorelease.Open(t.Context(), http.DefaultClient, tc.src)
			require.ErrorContains(t, err, tc.want, "Open says the same")
		})
	}
}
