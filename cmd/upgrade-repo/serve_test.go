package main

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/acquire"
	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/release/pack"
)

func packTestISO(t *testing.T) (string, checksum.Sum) {
	t.Helper()
	isotest.RequireXorriso(t)
	out := filepath.Join(t.TempDir(), "release.iso")
	_, err := pack.Build(t.Context(), pack.Demo("v1.5.2", 3, 4096, 32<<20), out)
	require.NoError(t, err)
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	s := sha512.Sum512(data)
	sum, err := checksum.Parse("sha512:" + hex.EncodeToString(s[:]))
	require.NoError(t, err)
	return out, sum
}

// TestServeFromURL downloads the ISO from an origin, is not ready before it is verified, serves
// it, and on shutdown lets an in-flight download finish.
func TestServeFromURL(t *testing.T) {
	t.Parallel()
	isoPath, sum := packTestISO(t)
	release := make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		http.ServeFile(w, r, isoPath)
	}))
	defer origin.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}
	src := acquire.Source{URL: origin.URL + "/release.iso", Checksum: sum, CacheDir: t.TempDir()}
	go func() { done <- serve(ctx, a, src, ln, 10*time.Second, func() { close(ready) }) }()

	resp, err := http.Get(base + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	resp, err = http.Get(base + "/livez")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	close(release)
	<-ready
	resp, err = http.Get(base + "/v1/release")
	require.NoError(t, err)
	var rel map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rel))
	resp.Body.Close()
	require.Equal(t, "v1.5.2", rel["harvester"])

	// An in-flight download survives the shutdown.
	resp, err = http.Get(base + "/rootfs.squashfs")
	require.NoError(t, err)
	first := make([]byte, 1)
	_, err = io.ReadFull(resp.Body, first)
	require.NoError(t, err)
	cancel()
	// 32 MiB cannot sit in loopback socket buffers: the server is still sending, and a shutdown
	// without a grace period would cut the body short.
	select {
	case err := <-done:
		t.Fatalf("serve returned before the in-flight download ended: %v", err)
	default:
	}
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Len(t, append(first, rest...), 32<<20)
	require.NoError(t, <-done)
	_, err = net.Dial("tcp", ln.Addr().String())
	require.Error(t, err, "the listener is closed after shutdown")
}

func TestServeWrongChecksum(t *testing.T) {
	t.Parallel()
	isoPath, _ := packTestISO(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, isoPath)
	}))
	defer origin.Close()
	wrong, err := checksum.Parse("sha512:" + hex.EncodeToString(bytes.Repeat([]byte{1}, 64)))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}
	cache := t.TempDir()
	err = serve(t.Context(), a, acquire.Source{URL: origin.URL, Checksum: wrong, CacheDir: cache}, ln, time.Second, nil)
	require.ErrorIs(t, err, peer.ErrVerification)
	require.ErrorContains(t, err, "want "+strings.Repeat("01", 64))
	entries, err := os.ReadDir(cache)
	require.NoError(t, err)
	require.Empty(t, entries, "the wrong download is removed")
}

func TestServeUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"nothing", nil, "an ISO path or an ISO URL is required"},
		{"both", []string{"--iso", "a.iso", "--iso-url", "http://x/a.iso"}, "not both"},
		{"url without checksum", []string{"--iso-url", "http://x/a.iso", "--cache-dir", "/tmp"}, "needs its checksum"},
		{"bad checksum", []string{"--iso-url", "http://x/a.iso", "--iso-checksum", "md5:00"}, "not supported"},
		{"argument", []string{"--iso", "a.iso", "extra"}, "takes no arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}
			err := runServe(t.Context(), a, tt.args)
			require.ErrorIs(t, err, errUsage)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestReleasePack(t *testing.T) {
	t.Parallel()
	isotest.RequireXorriso(t)
	dir := t.TempDir()
	var out bytes.Buffer
	a := &app{stdout: &out, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}
	spec := filepath.Join(dir, "spec.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(`
version: v1.6.0
sharedLayers: {base: 8KiB}
archives:
- group: common
  name: harvester-images-v1.6.0
  images: [{ref: "rancher/harvester:v1.6.0", shared: [base], layers: [4KiB]}]
files: [{path: rootfs.squashfs, size: 1MiB}]
`), 0o644))
	err := runRelease(t.Context(), a, []string{"pack", "--spec", spec, "--out", filepath.Join(dir, "r.iso"), "--tree", filepath.Join(dir, "tree"), "-o", "json"})
	require.NoError(t, err)
	var res pack.Result
	require.NoError(t, json.Unmarshal(out.Bytes(), &res))
	require.Equal(t, "v1.6.0", res.Version)
	require.Equal(t, "COS_LIVE", res.VolumeID)
	require.Equal(t, []string{"docker.io/rancher/harvester:v1.6.0"}, res.Archives[0].Refs())
	fi, err := os.Stat(filepath.Join(dir, "tree", "rootfs.squashfs"))
	require.NoError(t, err)
	require.EqualValues(t, 1<<20, fi.Size())
	fi, err = os.Stat(filepath.Join(dir, "r.iso"))
	require.NoError(t, err)
	require.Greater(t, fi.Size(), int64(1<<20))

	for _, args := range [][]string{nil, {"unpack"}, {"pack"}, {"pack", "--out", "x.iso", "-o", "yaml"}, {"pack", "--out", "x.iso", "--layer-size", "big"}} {
		err := runRelease(t.Context(), a, args)
		require.ErrorIs(t, err, errUsage, "%q", args)
	}
	err = runRelease(t.Context(), a, []string{"pack", "--tree", filepath.Join(dir, "t2"), "--spec", filepath.Join(dir, "missing.yaml")})
	require.ErrorContains(t, err, "missing.yaml")
}
