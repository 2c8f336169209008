package isorelease_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
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

// indexedISO builds a release ISO of three archives of 1 MiB, each named by the blob index (or
// none, without index), as `release pack` lays them out.
func indexedISO(t *testing.T, index bool) string {
	t.Helper()
	isotest.RequireXorriso(t)
	src := t.TempDir()
	files := map[string]string{
		"harvester-release.yaml": "harvester: v1.6.0\nminUpgradableVersion: v1.5.0\nkubernetes: v1.34.1\n",
		"bundle/metadata.yaml":   "images:\n",
	}
	var entries []string
	for _, g := range []string{"common", "rke2", "extra"} {
		files["bundle/metadata.yaml"] += fmt.Sprintf("  %s:\n  - list: harvester/images-lists/%s.txt\n    archive: harvester/images/%s.tar.zst\n", g, g, g)
		files["bundle/harvester/images-lists/"+g+".txt"] = fmt.Sprintf("docker.io/library/%s-a:v1\ndocker.io/library/%s-b:v1\n", g, g)
		files["bundle/harvester/images/"+g+".tar.zst"] = strings.Repeat(g[:1], 1<<20)
		entries = append(entries, fmt.Sprintf(`{"archive":"bundle/harvester/images/%s.tar.zst","images":{`+
			`"docker.io/library/%s-a:v1":["sha256:%sa","sha256:base"],"docker.io/library/%s-b:v1":["sha256:%sb","sha256:base"]}}`, g, g, g, g, g))
	}
	if index {
		sizes := `"sha256:base":{"size":1000,"unpacked":3000}`
		for _, g := range []string{"common", "rke2", "extra"} {
			sizes += fmt.Sprintf(`,"sha256:%sa":{"size":10},"sha256:%sb":{"size":20}`, g, g)
		}
		files[release.BlobsFile] = `{"archives":[` + strings.Join(entries, ",") + `],"sizes":{` + sizes + `}}`
	}
	for p, body := range files {
		require.NoError(t, os.MkdirAll(filepath.Join(src, filepath.Dir(p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(src, p), []byte(body), 0o644))
	}
	return isotest.Build(t, src)
}

// OpenBlobs reads the release's metadata and its blob index, not the archives' headers nor the
// image lists the index makes needless; without an index it reads what Open reads. The bytes are
// counted as the origin served them.
func TestOpenBlobsReads(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		index bool
	}{
		{name: "with a blob index", index: true},
		{name: "without a blob index", index: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := indexedISO(t, tt.index)
			// read opens the ISO with open from a server of its own, closed (its handlers
			// returned) before the bytes it served are counted.
			read := func(open func(context.Context, *http.Client, string, ...httprange.ReaderOption) (*isorelease.Contents, error)) (*isorelease.Contents, int64, int64) {
				var served, requests atomic.Int64
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					requests.Add(1)
					http.ServeFile(countingWriter{w, &served}, r, path)
				}))
				c, err := open(t.Context(), srv.Client(), srv.URL+"/release.iso")
				srv.Close()
				require.NoError(t, err)
				require.Equal(t, served.Load(), c.Bytes, "the reader counts what the origin served")
				return c, served.Load(), requests.Load()
			}
			full, fullBytes, fullReqs := read(isorelease.Open)
			lean, leanBytes, leanReqs := read(isorelease.OpenBlobs)
			t.Logf("Open: %d bytes in %d requests; OpenBlobs: %d bytes in %d requests", fullBytes, fullReqs, leanBytes, leanReqs)
			require.Equal(t, full.Release, lean.Release)
			require.Len(t, lean.Archives, 3)
			for i, a := range lean.Archives {
				require.ElementsMatch(t, full.Archives[i].Images, a.Images, a.Archive.Archive)
				require.Equal(t, full.Archives[i].Blobs, a.Blobs)
				require.Equal(t, full.Archives[i].Size, a.Size)
				require.Zero(t, a.TarBytes, "no archive header read")
			}
			if !tt.index {
				require.Nil(t, lean.Archives[0].Blobs)
				require.Equal(t, full.Archives, lean.Archives, "without an index, what Open reads")
				return
			}
			require.Len(t, lean.Archives[0].Blobs, 2)
			// Open reads a window of 256 KiB at each of the three archives' headers for their
			// first 18 bytes; OpenBlobs none of them, and its misses fetch 64 KiB, not 256.
			require.LessOrEqual(t, leanBytes, fullBytes/4)
		})
	}
}

// countingWriter counts the body bytes written through it.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n.Add(int64(n))
	return n, err
}
