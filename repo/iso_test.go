package repo_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
	"github.com/upgrade-repo/upgrade-repo/release/pack"
	"github.com/upgrade-repo/upgrade-repo/repo"
)

// fixture is a real release ISO built by pack and xorriso, opened with the iso reader and served
// on a loopback listener.
type fixture struct {
	url    string
	fsys   *iso.FS
	reg    *prometheus.Registry
	result *pack.Result
}

func serveISO(t *testing.T, spec pack.Spec) *fixture {
	t.Helper()
	isotest.RequireXorriso(t)
	out := filepath.Join(t.TempDir(), "release.iso")
	res, err := pack.Build(t.Context(), spec, out)
	require.NoError(t, err)
	f, err := os.Open(out)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	require.NoError(t, err)
	fsys, err := iso.Open(f, fi.Size())
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	m, err := repo.NewMetrics(reg)
	require.NoError(t, err)
	h, err := repo.New(fsys, repo.WithBackingFile(out), repo.WithIdentity("sha512:test"), repo.WithMetrics(m),
		repo.WithVolumeID(fsys.Info().VolumeID), repo.WithModTime(fsys.Info().Modified))
	require.NoError(t, err)
	s := repo.NewServer(m, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil)
	s.SetHandler(h)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return &fixture{url: ts.URL, fsys: fsys, reg: reg, result: res}
}

// metric returns the value of the named metric with the given label values.
func (f *fixture) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	t.Fatalf("metric %s %v not found", name, labels)
	return 0
}

func fetch(t *testing.T, method, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

func TestRealISO(t *testing.T) {
	t.Parallel()
	const rootfs = 100<<20 + 4321
	fx := serveISO(t, pack.Demo("v1.5.2", 6, 256<<10, rootfs))

	t.Run("every file as the iso reader reads it", func(t *testing.T) {
		n := 0
		err := fs.WalkDir(fx.fsys, ".", func(name string, d fs.DirEntry, err error) error {
			require.NoError(t, err)
			if d.IsDir() || name == "rootfs.squashfs" {
				return nil
			}
			want, err := fs.ReadFile(fx.fsys, name)
			require.NoError(t, err)
			for _, prefix := range []string{"", "/harvester-iso"} {
				resp, body := fetch(t, http.MethodGet, fx.url+prefix+"/"+name, nil)
				require.Equal(t, 200, resp.StatusCode, name)
				require.Equal(t, sha256.Sum256(want), sha256.Sum256(body), name)
			}
			n++
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, len(fx.result.Files)-1, n)
	})

	t.Run("zero copy of 100 MiB", func(t *testing.T) {
		before := fx.metric(t, "upgrade_repo_file_bytes_total", map[string]string{"mode": "zerocopy"})
		copiedBefore := fx.metric(t, "upgrade_repo_file_bytes_total", map[string]string{"mode": "copied"})
		resp, err := http.Get(fx.url + "/rootfs.squashfs")
		require.NoError(t, err)
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.EqualValues(t, rootfs, n)
		f, err := fx.fsys.Open("rootfs.squashfs")
		require.NoError(t, err)
		want := sha256.New()
		_, err = io.Copy(want, f)
		require.NoError(t, err)
		f.Close()
		require.Equal(t, want.Sum(nil), h.Sum(nil))
		sent := fx.metric(t, "upgrade_repo_file_bytes_total", map[string]string{"mode": "zerocopy"}) - before
		copied := fx.metric(t, "upgrade_repo_file_bytes_total", map[string]string{"mode": "copied"}) - copiedBefore
		require.GreaterOrEqual(t, sent, float64(rootfs-512), "bytes sent with sendfile")
		require.LessOrEqual(t, copied, 512.0, "bytes copied through user space")
	})

	t.Run("parallel ranges", func(t *testing.T) {
		archive := fx.result.Archives[0].Archive
		data, err := fs.ReadFile(fx.fsys, archive)
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		for g := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				for range 8 {
					start := rng.IntN(len(data))
					end := min(len(data)-1, start+rng.IntN(len(data)))
					req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, fx.url+"/"+archive, nil)
					req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", start, end))
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						errs <- err
						return
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != 206 || sha256.Sum256(body) != sha256.Sum256(data[start:end+1]) {
						errs <- fmt.Errorf("range %d-%d: status %d, %d bytes, err %w", start, end, resp.StatusCode, len(body), err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	})

	t.Run("conditional, ranges and methods", func(t *testing.T) {
		u := fx.url + "/rootfs.squashfs"
		resp, _ := fetch(t, http.MethodHead, u, nil)
		etag := resp.Header.Get("ETag")
		require.Regexp(t, `^"[0-9a-f]{32}"$`, etag)
		require.Equal(t, fmt.Sprint(rootfs), resp.Header.Get("Content-Length"))
		require.Equal(t, fx.fsys.Info().Modified.UTC().Format(http.TimeFormat), resp.Header.Get("Last-Modified"))
		for _, tc := range []struct {
			method string
			hdr    map[string]string
			code   int
		}{
			{http.MethodGet, map[string]string{"If-None-Match": etag}, 304},
			{http.MethodGet, map[string]string{"If-Modified-Since": resp.Header.Get("Last-Modified")}, 304},
			{http.MethodGet, map[string]string{"Range": "bytes=200000000-"}, 416},
			{http.MethodGet, map[string]string{"Range": "bytes=1-2,5-6"}, 206},
			{http.MethodGet, map[string]string{"Range": "bytes=1-2", "If-Range": `"old"`}, 200},
			{http.MethodPut, nil, 405},
		} {
			resp, _ := fetch(t, tc.method, u, tc.hdr)
			require.Equal(t, tc.code, resp.StatusCode, "%s %v", tc.method, tc.hdr)
		}
	})

	t.Run("metadata", func(t *testing.T) {
		_, body := fetch(t, http.MethodGet, fx.url+"/v1/bundle", nil)
		var doc repo.BundleDoc
		require.NoError(t, json.Unmarshal(body, &doc))
		for _, a := range fx.result.Archives {
			i := slices.IndexFunc(doc.Groups[a.Group], func(d repo.BundleArchive) bool { return d.Archive == "/"+a.Archive })
			require.GreaterOrEqual(t, i, 0, a.Archive)
			got := doc.Groups[a.Group][i]
			require.Equal(t, a.Refs(), got.Images)
			require.Equal(t, a.Size, got.Size)
		}
		resp, body := fetch(t, http.MethodGet, fx.url+"/bundle/", map[string]string{"Accept": "application/json"})
		require.Equal(t, 200, resp.StatusCode)
		var l repo.Listing
		require.NoError(t, json.Unmarshal(body, &l))
		var names []string
		for _, e := range l.Entries {
			names = append(names, e.Name)
		}
		// The bundle's group directories and files, the release's blob index (release.BlobsFile)
		// among them.
		require.Equal(t, []string{"blobs.json", "harvester", "metadata.yaml", "rancherd"}, names)
		require.Equal(t, 1.0, fx.metric(t, "upgrade_repo_release_info", map[string]string{"volume_id": "COS_LIVE", "version": "v1.5.2"}))
	})
}

func TestRealISOWithoutMetadata(t *testing.T) {
	t.Parallel()
	fx := serveISO(t, pack.Spec{NoRelease: true, NoBundle: true, Files: []pack.File{{Path: "boot/vmlinuz", Size: 70000}}})
	for _, p := range []string{"/v1/release", "/v1/bundle", "/v1/images", "/harvester-release.yaml"} {
		resp, body := fetch(t, http.MethodGet, fx.url+p, nil)
		require.Equal(t, 404, resp.StatusCode, p)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), p)
		var e map[string]any
		require.NoError(t, json.Unmarshal(body, &e), p)
		require.NotEmpty(t, e["error"], p)
	}
	resp, body := fetch(t, http.MethodGet, fx.url+"/boot/vmlinuz", nil)
	require.Equal(t, 200, resp.StatusCode)
	require.Len(t, body, 70000)
}
