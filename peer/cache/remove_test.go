package cache_test

import (
	"crypto/sha512"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/cache"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
)

func TestStoreRemove(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		deleteFile bool
	}{
		{name: "withdraw and delete the cached file", deleteFile: true},
		{name: "withdraw and keep the file", deleteFile: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := make([]byte, 3<<20+17)
			for i := range data {
				data[i] = byte(i % 251)
			}
			sum := sha512.Sum512(data)
			sha := hex.EncodeToString(sum[:])
			path := filepath.Join(t.TempDir(), sha+".iso")
			require.NoError(t, os.WriteFile(path, data, 0o644))
			dir := inventory.NewDirectory("self")
			store := cache.NewStore(dir)
			_, err := store.AddComplete(path, sha, 1<<20)
			require.NoError(t, err)
			require.Len(t, dir.Snapshot()["self"].ISOs, 1)

			require.NoError(t, store.Remove(sha, tc.deleteFile))
			_, held := store.ISO(sha)
			require.False(t, held)
			require.Empty(t, dir.Snapshot()["self"].ISOs)
			_, err = os.Stat(path)
			if tc.deleteFile {
				require.ErrorIs(t, err, os.ErrNotExist)
			} else {
				require.NoError(t, err)
			}
			require.ErrorIs(t, store.Remove(sha, tc.deleteFile), peer.ErrNotFound)
		})
	}
}
