package fetch_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
