package repo_test

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/release/pack"
)

// TestFileOver4GiB serves a file larger than 4 GiB (several ISO extents) with sendfile, whole and
// by ranges past 4 GiB. It takes minutes and about 10 GB of disk: UPGRADE_REPO_LONG=1 runs it.
func TestFileOver4GiB(t *testing.T) {
	if os.Getenv("UPGRADE_REPO_LONG") == "" {
		t.Skip("set UPGRADE_REPO_LONG=1 to run")
	}
	const size = 4<<30 + 300<<20 + 7
	fx := serveISO(t, pack.Spec{NoBundle: true, Files: []pack.File{{Path: "rootfs.squashfs", Size: size}}})

	f, err := fx.fsys.Open("rootfs.squashfs")
	require.NoError(t, err)
	defer f.Close()
	want := sha256.New()
	_, err = io.Copy(want, f)
	require.NoError(t, err)

	resp, err := http.Get(fx.url + "/rootfs.squashfs")
	require.NoError(t, err)
	got := sha256.New()
	n, err := io.Copy(got, resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.EqualValues(t, size, n)
	require.Equal(t, want.Sum(nil), got.Sum(nil))
	require.GreaterOrEqual(t, fx.metric(t, "upgrade_repo_file_bytes_total", map[string]string{"mode": "zerocopy"}), float64(size-512))

	ra := f.(io.ReaderAt)
	for _, off := range []int64{4<<30 - 10, 4 << 30, size - 100} {
		resp, body := fetch(t, http.MethodGet, fx.url+"/rootfs.squashfs", map[string]string{"Range": fmt.Sprintf("bytes=%d-%d", off, off+99)})
		require.Equal(t, http.StatusPartialContent, resp.StatusCode)
		exp := make([]byte, 100)
		_, err := ra.ReadAt(exp, off)
		require.NoError(t, err)
		require.Equal(t, exp, body, "range at %d", off)
	}
}
