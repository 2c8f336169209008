package fetch_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A chunk that cannot be stored (a full or read-only disk; here, the download's state cannot be
// saved) ends the fetch with the disk's error at once, instead of fetching the same chunks from
// the origin again and again.
func TestFetchEndsWhenTheDiskRefuses(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, 4<<20)
	o := newOrigin(t, data)
	n := startNode(t, "lone", nil, nodeConfig{})
	require.NoError(t, os.Mkdir(filepath.Join(n.cache, "release.iso.partial.json.tmp"), 0o755))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, _, err := n.fetch(ctx, sha, o.url())
	require.ErrorContains(t, err, "save download state")
	require.Less(t, time.Since(start), 10*time.Second)
	require.LessOrEqual(t, o.sent.Load(), int64(8*testChunk), "the origin was not asked again and again")
}

// A disk without room for the whole ISO is said at once, before its bytes are fetched: the
// partial download reserves the ISO's size first. The cache here is a tmpfs of 1 MiB.
func TestFetchSaysAtOnceWhenTheDiskHasNoRoom(t *testing.T) {
	t.Parallel()
	data, sha := isoData(t, 4<<20)
	o := newOrigin(t, data)
	n := startNode(t, "small-disk", nil, nodeConfig{})
	if err := unix.Mount("tmpfs", n.cache, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(n.cache, unix.MNT_DETACH) })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, _, err := n.fetch(ctx, sha, o.url())
	require.ErrorIs(t, err, unix.ENOSPC)
	require.ErrorContains(t, err, "reserve 4194304 bytes for partial ISO")
	require.Less(t, o.sent.Load(), int64(testChunk), "no chunk was fetched")
}
