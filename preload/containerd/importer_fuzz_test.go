package containerd

import (
	"bytes"
	"testing"

	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
)

// FuzzImportIndex feeds damaged archives to the importer, on a content store of files: whatever
// the bytes, it returns an index or an error, never a panic, and an index it returns names blobs
// the store holds. The seeds are whole archives of both layouts and their cuts. Each run creates a
// store's files: `make fuzz-import` keeps them on /dev/shm, where a file system that allocates
// inodes slowly after many removals does not set the pace.
func FuzzImportIndex(f *testing.F) {
	img, err := random.Image(512, 2)
	require.NoError(f, err)
	seeds := [][]byte{
		preloadtest.DockerArchive(f, preloadtest.Image{Ref: "docker.io/library/fuzz:v1", Img: img}),
		preloadtest.OCIArchive(f, preloadtest.Image{Ref: "docker.io/library/fuzz:v2", Img: img}),
	}
	for _, s := range seeds {
		f.Add(s)
		f.Add(s[:len(s)/2])
		f.Add(s[:len(s)-1024])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		store, err := local.NewStore(t.TempDir())
		require.NoError(t, err)
		index, err := importIndex(t.Context(), store, bytes.NewReader(data))
		if err != nil {
			return
		}
		_, err = store.Info(t.Context(), index.Digest)
		require.NoError(t, err, "the index returned is not in the store")
	})
}
