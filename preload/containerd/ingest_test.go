package containerd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/internal/pagecache"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
)

// imageBlobs returns the digests of the named images' blobs: their index or manifest, the
// manifests of an index, configs and layers.
func imageBlobs(t *testing.T, s *Store, refs []string) []digest.Digest {
	t.Helper()
	ctx := namespaces.WithNamespace(t.Context(), s.ns)
	cs := s.client.ContentStore()
	var out []digest.Digest
	collect := images.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		out = append(out, desc.Digest)
		return images.Children(ctx, cs, desc)
	})
	for _, ref := range refs {
		img, err := s.client.ImageService().Get(ctx, ref)
		require.NoError(t, err)
		require.NoError(t, images.Walk(ctx, collect, img.Target))
	}
	return out
}

func TestDirectIngestRealContainerd(t *testing.T) {
	d := containerdtest.Start(t)
	rel := newRelease(t)
	contentRoot := filepath.Join(d.Root, "io.containerd.content.v1.content")

	// Every blob of the imported images is in the namespace, reads back with its digest and is a
	// file under the content root; no temporary file is left. (Only the images' blobs: the index
	// an import writes is referenced by no image and goes with the import's lease.)
	checkImported := func(t *testing.T, s *Store, refs []string) {
		t.Helper()
		missing, err := s.Missing(t.Context(), refs)
		require.NoError(t, err)
		require.Empty(t, missing)
		ctx := namespaces.WithNamespace(t.Context(), s.ns)
		blobs := imageBlobs(t, s, refs)
		n := 0
		for _, b := range blobs {
			n++
			dg := b
			info, err := s.client.ContentStore().Info(ctx, dg)
			require.NoError(t, err)
			ra, err := s.client.ContentStore().ReaderAt(ctx, descOf(info))
			require.NoError(t, err)
			got, err := digest.FromReader(content.NewReader(ra))
			_ = ra.Close()
			require.NoError(t, err)
			require.Equal(t, dg, got)
			_, err = os.Stat(filepath.Join(contentRoot, "blobs", "sha256", dg.Encoded()))
			require.NoError(t, err)
		}
		require.Positive(t, n)
		left, err := os.ReadDir(filepath.Join(contentRoot, ingestDirName))
		if !os.IsNotExist(err) {
			require.NoError(t, err)
		}
		require.Empty(t, left, "temporary files left")
	}

	t.Run("a content directory containerd does not see falls back to streaming", func(t *testing.T) {
		// First: containerd must not hold these blobs yet.
		s := newStore(t, d.Socket)
		elsewhere, err := newDirectIngest(t.TempDir())
		require.NoError(t, err)
		s.direct = elsewhere
		names, err := s.Import(t.Context(), zstdReader(t, rel.docker.Data))
		require.NoError(t, err)
		require.ElementsMatch(t, rel.docker.Refs, names)
		require.False(t, s.DirectIngest(), "direct ingest kept although containerd did not see its blobs")
		missing, err := s.Missing(t.Context(), rel.docker.Refs)
		require.NoError(t, err)
		require.Empty(t, missing)
	})

	// The subtests run one after the other: they check the content root's temporary files.
	t.Run("blobs are written beside containerd and committed through it", func(t *testing.T) {
		s := newStore(t, d.Socket)
		require.True(t, s.DirectIngest())
		require.Equal(t, contentRoot, s.direct.root)
		for _, a := range [][]byte{rel.docker.Data, rel.oci.Data} {
			_, err := s.Import(t.Context(), zstdReader(t, a))
			require.NoError(t, err)
		}
		require.True(t, s.DirectIngest(), "direct ingest was given up")
		// The layers' pages were dropped from the page cache once on disk (the manifests and
		// configs, under 32 KiB, are read back by the import). Only the OCI archive's: the
		// subtest before streamed the docker archive's blobs through containerd, which wrote them.
		if pagecache.Droppable(contentRoot) {
			layers := 0
			for _, dg := range imageBlobs(t, s, rel.oci.Refs) {
				f, err := os.Open(filepath.Join(contentRoot, "blobs", "sha256", dg.Encoded()))
				require.NoError(t, err)
				st, err := f.Stat()
				require.NoError(t, err)
				if st.Size() >= 32<<10 {
					layers++
					res, err := pagecache.Resident(f, st.Size())
					require.NoError(t, err)
					require.NotContains(t, res, true, "pages of layer %s still cached", dg)
				}
				_ = f.Close()
			}
			require.Positive(t, layers)
		}
		checkImported(t, s, append(append([]string(nil), rel.docker.Refs...), rel.oci.Refs...))
	})

	t.Run("two imports of the same blobs at once both succeed", func(t *testing.T) {
		s := newStore(t, d.Socket)
		errs := make(chan error, 2)
		for _, r := range []io.Reader{zstdReader(t, rel.docker.Data), zstdReader(t, rel.docker.Data)} {
			go func() {
				_, err := s.Import(t.Context(), r)
				errs <- err
			}()
		}
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
		require.True(t, s.DirectIngest())
		checkImported(t, s, rel.docker.Refs)
	})

	t.Run("off when asked", func(t *testing.T) {
		s, err := New(t.Context(), d.Socket, WithNamespace("off"), WithDirectIngest(false))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		require.False(t, s.DirectIngest())
		names, err := s.Import(t.Context(), zstdReader(t, rel.oci.Data))
		require.NoError(t, err)
		require.ElementsMatch(t, rel.oci.Refs, names)
	})
}

func TestNewDirectIngestRejects(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	for _, tc := range []struct{ name, root string }{
		{"empty", ""},
		{"relative", "var/lib/containerd"},
		{"missing", filepath.Join(t.TempDir(), "missing")},
		{"a file", file},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := newDirectIngest(tc.root)
			require.Error(t, err)
		})
	}
}

func descOf(i content.Info) ocispec.Descriptor {
	return ocispec.Descriptor{Digest: i.Digest, Size: i.Size}
}

func TestFileWriterReadFrom(t *testing.T) {
	t.Parallel()
	data := make([]byte, 3*copyBuffer+12345)
	for i := range data {
		data[i] = byte(i * 7 / 5)
	}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		r       io.Reader
		want    []byte
		wantErr error
	}{
		{"whole", bytes.NewReader(data), data, nil},
		{"empty", bytes.NewReader(nil), []byte{}, nil},
		{"read error midway", io.MultiReader(bytes.NewReader(data[:copyBuffer+5]), iotest.ErrReader(boom)), nil, boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := newDirectIngest(t.TempDir())
			require.NoError(t, err)
			cw, err := (&ingestStore{d: d}).Writer(t.Context(), content.WithRef(archiveRefPrefix+"x"))
			require.NoError(t, err)
			w := cw.(*fileWriter)
			n, err := w.ReadFrom(tc.r)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				require.NoError(t, w.Close())
				left, err := os.ReadDir(d.tmp)
				require.NoError(t, err)
				require.Empty(t, left)
				return
			}
			require.NoError(t, err)
			written, err := os.ReadFile(w.f.Name())
			require.NoError(t, err)
			require.Equal(t, tc.want, written)
			require.Equal(t, int64(len(tc.want)), n)
			require.Equal(t, digest.FromBytes(tc.want), w.Digest())
			st, err := w.Status()
			require.NoError(t, err)
			require.Equal(t, n, st.Offset)
			require.NoError(t, w.Close())
		})
	}
}
