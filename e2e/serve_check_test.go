package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/release"
)

// httpClient bounds every request: with the Local traffic policy a node port silently drops
// connections while its node has no ready pod, and a dropped SYN would otherwise hang a poll.
var httpClient = &http.Client{Timeout: 30 * time.Second}

// httpGet fetches url with the given Range header (none when empty), retrying transport errors
// and 5xx answers for a while: a node port may take a moment to route to a new pod.
func httpGet(t *testing.T, url, rng string) (*http.Response, []byte) {
	t.Helper()
	var resp *http.Response
	var body []byte
	eventually(t, time.Minute, "GET "+url+" "+rng, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		r, err := httpClient.Do(req)
		if err != nil {
			return err
		}
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		if r.StatusCode >= 500 {
			return fmt.Errorf("status %s: %s", r.Status, bytes.TrimSpace(b[:min(len(b), 200)]))
		}
		resp, body = r, b
		return nil
	})
	return resp, body
}

// checkServes asserts the repo server at base serves rel exactly: every file byte for byte (also
// under /harvester-iso/), single and multiple ranges of the large rootfs, and metadata that
// matches the files the ISO was made from.
func checkServes(t *testing.T, base string, rel *testRelease) {
	t.Helper()
	for _, name := range rel.res.Files {
		want, err := os.ReadFile(filepath.Join(rel.tree, filepath.FromSlash(name)))
		require.NoError(t, err)
		resp, got := httpGet(t, base+"/"+name, "")
		require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s/%s", base, name)
		require.True(t, bytes.Equal(want, got), "GET %s/%s: %d bytes differ from the %d bytes of the release", base, name, len(got), len(want))
	}
	resp, got := httpGet(t, base+"/harvester-iso/harvester-release.yaml", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	want, err := os.ReadFile(filepath.Join(rel.tree, "harvester-release.yaml"))
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))

	rootfs, err := os.ReadFile(filepath.Join(rel.tree, "rootfs.squashfs"))
	require.NoError(t, err)
	n := int64(len(rootfs))
	ranges := []struct {
		header     string
		start, end int64 // inclusive
	}{
		{"bytes=0-0", 0, 0},
		{fmt.Sprintf("bytes=%d-%d", n/2-3000, n/2+(1<<20)), n/2 - 3000, n/2 + (1 << 20)},
		{"bytes=-100", n - 100, n - 1},
		{fmt.Sprintf("bytes=%d-", n-4097), n - 4097, n - 1},
	}
	for _, r := range ranges {
		resp, got := httpGet(t, base+"/rootfs.squashfs", r.header)
		require.Equal(t, http.StatusPartialContent, resp.StatusCode, r.header)
		require.Equal(t, fmt.Sprintf("bytes %d-%d/%d", r.start, r.end, n), resp.Header.Get("Content-Range"), r.header)
		require.True(t, bytes.Equal(rootfs[r.start:r.end+1], got), "range %s differs", r.header)
	}
	resp, got = httpGet(t, base+"/rootfs.squashfs", "bytes=10-19,40000-40099")
	require.Equal(t, http.StatusPartialContent, resp.StatusCode)
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	require.NoError(t, err)
	require.Equal(t, "multipart/byteranges", mt)
	mr := multipart.NewReader(bytes.NewReader(got), params["boundary"])
	for _, r := range [][2]int64{{10, 19}, {40000, 40099}} {
		part, err := mr.NextPart()
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("bytes %d-%d/%d", r[0], r[1], n), part.Header.Get("Content-Range"))
		b, err := io.ReadAll(part)
		require.NoError(t, err)
		require.True(t, bytes.Equal(rootfs[r[0]:r[1]+1], b), "part %v differs", r)
	}

	wantRel, err := release.LoadRelease(os.DirFS(rel.tree))
	require.NoError(t, err)
	wantJSON, err := json.Marshal(wantRel)
	require.NoError(t, err)
	resp, got = httpGet(t, base+"/v1/release", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, string(wantJSON), string(got), "/v1/release")

	var images []struct {
		Ref string `json:"ref"`
	}
	resp, got = httpGet(t, base+"/v1/images", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.Unmarshal(got, &images))
	var gotRefs []string
	for _, im := range images {
		gotRefs = append(gotRefs, im.Ref)
	}
	wantRefs := rel.refs()
	sort.Strings(gotRefs)
	sort.Strings(wantRefs)
	require.Equal(t, wantRefs, gotRefs, "/v1/images")
}
