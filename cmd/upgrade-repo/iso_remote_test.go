package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
)

// Every iso command that fails on a remote image names it without its secrets: neither the
// password of its URL nor the signature of a presigned query.
func TestISOCommandsRedactTheURL(t *testing.T) {
	t.Parallel()
	_, img := isoTestImage(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/release.iso" {
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, img)
	}))
	t.Cleanup(srv.Close)
	url := strings.Replace(srv.URL, "http://", "http://user:hunter2@", 1) + "/release.iso?X-Amz-Signature=secret"
	zero := "sha512:" + strings.Repeat("00", 64)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "ls of a missing path", args: []string{"ls", url, "/missing"}, want: "ls " + srv.URL + "/release.iso"},
		{name: "stat of a missing path", args: []string{"stat", url, "/missing"}, want: "stat " + srv.URL + "/release.iso"},
		{name: "cat of a missing path", args: []string{"cat", url, "/missing"}, want: "cat " + srv.URL + "/release.iso"},
		{name: "verify with a wrong checksum", args: []string{"verify", "--checksum", zero, url}, want: "checksum mismatch"},
		{name: "info of a missing image", args: []string{"info", strings.Replace(url, "release.iso", "gone.iso", 1)}, want: "404"},
		{name: "extract of a missing image", args: []string{"extract", strings.Replace(url, "release.iso", "gone.iso", 1), t.TempDir()}, want: "404"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, stderr, err := runISOTest(t, tc.args...)
			require.Error(t, err)
			require.ErrorContains(t, err, tc.want)
			for _, out := range []string{err.Error(), stderr} {
				require.NotContains(t, out, "secret")
				require.NotContains(t, out, "hunter2")
			}
		})
	}
}

// An origin that replaces the image while iso cat reads it, with a weak ETag that promises
// nothing, cannot make cat write bytes of two versions: it is refused before a byte is written.
func TestISOCatRefusesAnOriginWithoutValidator(t *testing.T) {
	t.Parallel()
	_, img := isoTestImage(t)
	v1, err := os.ReadFile(img)
	require.NoError(t, err)
	// The second version: the same tree, the file's bytes replaced in place.
	v2 := bytes.ReplaceAll(v1, bytes.Repeat([]byte("zstd"), 5000), bytes.Repeat([]byte("ZSTD"), 5000))
	require.NotEqual(t, v1, v2)
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, version := v1, 1
		if served.Add(1) > 1 {
			data, version = v2, 2
		}
		w.Header().Set("ETag", `W/"v`+strconv.Itoa(version)+`"`)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}))
	t.Cleanup(srv.Close)
	stdout, _, err := runISOTest(t, "cat", srv.URL+"/release.iso", "/bundle/harvester/images/a.tar.zst")
	require.ErrorIs(t, err, httprange.ErrNoValidator)
	require.Empty(t, stdout)
}

// A remote read ends at --timeout, however slowly its origin keeps sending.
func TestISOTimeout(t *testing.T) {
	t.Parallel()
	_, img := isoTestImage(t)
	data, err := os.ReadFile(img)
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		off, n, err := httprange.ParseRange(r.Header.Get("Range"), int64(len(data)))
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestedRangeNotSatisfiable)
			return
		}
		w.Header().Set("ETag", `"slow"`)
		w.Header().Set("Content-Range", httprange.Sent(off, n, int64(len(data))))
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		w.WriteHeader(http.StatusPartialContent)
		for i := range n {
			if _, err := w.Write(data[off+i : off+i+1]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(srv.Close)
	start := time.Now()
	_, _, err = runISOTest(t, "ls", "--timeout", "300ms", srv.URL+"/release.iso")
	require.ErrorIs(t, err, httprange.ErrDeadline)
	require.Less(t, time.Since(start), 10*time.Second)
}
