package containerd

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
)

func TestBlobsRealContainerd(t *testing.T) {
	d := containerdtest.Start(t)
	s := newStore(t, d.Socket)
	ctx := s.nsctx(t.Context())

	data := make([]byte, 300<<10)
	for i := range data {
		data[i] = byte(i*7 + i>>9)
	}
	sum := sha256.Sum256(data)
	dgst := "sha256:" + hex.EncodeToString(sum[:])
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.Digest(dgst), Size: int64(len(data))}
	// A blob without a reference would be collected; a root label keeps it as an image would.
	require.NoError(t, content.WriteBlob(ctx, s.client.ContentStore(), "blob-test", bytes.NewReader(data), desc,
		content.WithLabels(map[string]string{"containerd.io/gc.root": "test"})))

	list, err := s.Blobs(t.Context())
	require.NoError(t, err)
	require.Equal(t, []string{dgst}, list)

	tests := []struct {
		name   string
		digest string
		offset int64
		want   []byte
		err    error
	}{
		{name: "whole blob", digest: dgst, want: data},
		{name: "seek into the blob", digest: dgst, offset: 200_000, want: data[200_000:]},
		{name: "absent blob", digest: "sha256:" + hex.EncodeToString(make([]byte, 32)), err: ErrBlobNotFound},
		{name: "not a sha256 digest", digest: "sha512:00", err: ErrBlobNotFound},
		{name: "upper-case digest", digest: "sha256:" + hex.EncodeToString(sum[:])[:63] + "A", err: ErrBlobNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rc, size, err := s.Open(t.Context(), tc.digest)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				require.ErrorContains(t, err, tc.digest)
				return
			}
			require.NoError(t, err)
			defer func() { require.NoError(t, rc.Close()) }()
			require.Equal(t, int64(len(data)), size)
			_, err = rc.Seek(tc.offset, io.SeekStart)
			require.NoError(t, err)
			got, err := io.ReadAll(rc)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// ImageBlobs lists the blobs of the named images (indexes, manifests, configs, layers) and nothing
// else the store holds: not a blob outside any image, not the blobs of an image not named.
func TestImageBlobsRealContainerd(t *testing.T) {
	d := containerdtest.Start(t)
	s := newStore(t, d.Socket)
	rel := newRelease(t)
	_, err := s.Import(t.Context(), zstdReader(t, rel.docker.Data))
	require.NoError(t, err)
	all, err := s.Blobs(t.Context())
	require.NoError(t, err)
	require.NotEmpty(t, all)

	got, err := s.ImageBlobs(t.Context(), append([]string{"docker.io/library/absent:v0"}, rel.docker.Refs...))
	require.NoError(t, err)
	// The archive's own index is not part of any image; everything else is.
	require.Subset(t, all, got)
	require.GreaterOrEqual(t, len(got), len(all)-1)

	private := d.WriteBlob(t, s.ns, []byte("a layer of a private image"))
	got2, err := s.ImageBlobs(t.Context(), rel.docker.Refs)
	require.NoError(t, err)
	require.Equal(t, got, got2)
	require.NotContains(t, got2, private)

	one, err := s.ImageBlobs(t.Context(), rel.docker.Refs[:1])
	require.NoError(t, err)
	require.Less(t, len(one), len(got), "another image's own layers are not listed")
	none, err := s.ImageBlobs(t.Context(), nil)
	require.NoError(t, err)
	require.Empty(t, none)
}
