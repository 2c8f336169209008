package containerd

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/images/archive"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/labels"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
)

// legacyArchive is an archive as docker save wrote it before Docker 25: a directory per layer
// ("<id>/layer.tar"), a layer written twice stored once and linked from the second directory, a
// config named "<id>.json", manifest.json with one image tagged twice and one without a tag.
func legacyArchive(t *testing.T) []byte {
	t.Helper()
	base := layerTar(t, layerEntry{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "etc/os-release", typ: tar.TypeReg, mode: 0o644, body: "ID=test\n"})
	app := layerTar(t, layerEntry{name: "app", typ: tar.TypeReg, mode: 0o755, body: "#!/bin/sh\n"})
	cfg := func(diffs ...[]byte) []byte {
		var ids []string
		for _, d := range diffs {
			ids = append(ids, digest.FromBytes(d).String())
		}
		b, err := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
			"rootfs": map[string]any{"type": "layers", "diff_ids": ids}})
		require.NoError(t, err)
		return b
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	file := func(name string, data []byte) {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}))
		_, err := tw.Write(data)
		require.NoError(t, err)
	}
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "aaa/", Typeflag: tar.TypeDir, Mode: 0o755}))
	file("aaa/layer.tar", base)
	file("aaa/VERSION", []byte("1.0"))
	file("bbb/layer.tar", app)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "ccc/layer.tar", Typeflag: tar.TypeSymlink, Linkname: "../aaa/layer.tar"}))
	file("one.json", cfg(base, app))
	file("two.json", cfg(base))
	manifest, err := json.Marshal([]map[string]any{
		{"Config": "one.json", "RepoTags": []string{"legacy/one:v1", "registry.example.com:5000/legacy/one:latest"}, "Layers": []string{"aaa/layer.tar", "bbb/layer.tar"}},
		{"Config": "two.json", "RepoTags": nil, "Layers": []string{"ccc/layer.tar"}},
	})
	require.NoError(t, err)
	file("manifest.json", manifest)
	file("repositories", []byte(`{"legacy/one":{"v1":"aaa"}}`))
	require.NoError(t, tw.Close())
	return b.Bytes()
}

// TestImportIndexMatchesContainerd imports the same archives with containerd's importer and with
// importIndex, in namespaces of their own on a real daemon, through the direct ingest and through
// containerd's content service: the index each returns is the same to the digest (so is every
// manifest it names, being content-addressed), and archives containerd refuses are refused.
func TestImportIndexMatchesContainerd(t *testing.T) {
	d := containerdtest.Start(t)
	rel := newRelease(t)
	unzstd := func(a preloadtest.Archive) []byte {
		b, err := io.ReadAll(zstdReader(t, a.Data))
		require.NoError(t, err)
		return b
	}
	// A registry's gzip layer that the node already unpacked: its blob carries the layer's
	// uncompressed digest, and an archive holding that layer uncompressed refers to the gzip blob.
	plain := layerTar(t, layerEntry{name: "known", typ: tar.TypeReg, mode: 0o644, body: "pulled before"})
	gz, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(plain)), nil })
	require.NoError(t, err)
	gzDigest, err := gz.Digest()
	require.NoError(t, err)
	gzBytes := readLayer(t, gz)
	known := preloadtest.NewImage(t, "docker.io/library/known:v1", preloadtest.ImageOptions{OS: "linux", Arch: "amd64",
		Shared: []v1.Layer{staticLayer(t, plain)}})

	s := newStore(t, d.Socket)
	require.True(t, s.DirectIngest())
	cs := s.client.ContentStore()
	importers := map[string]func(ctx context.Context, r io.Reader) (ocispec.Descriptor, error){
		"containerd": func(ctx context.Context, r io.Reader) (ocispec.Descriptor, error) {
			return archive.ImportIndex(ctx, cs, r)
		},
		"direct": func(ctx context.Context, r io.Reader) (ocispec.Descriptor, error) {
			return importIndex(ctx, &ingestStore{Store: cs, d: s.direct}, r)
		},
		"service": func(ctx context.Context, r io.Reader) (ocispec.Descriptor, error) { return importIndex(ctx, cs, r) },
	}
	tests := []struct {
		name    string
		archive []byte
		before  func(ctx context.Context) // prepares the namespace
		check   func(t *testing.T, ctx context.Context, cs content.Store, index ocispec.Descriptor)
		wantErr bool
	}{
		{name: "docker save", archive: unzstd(rel.docker), check: imagesNamed(3)},
		{name: "docker save with an OCI layout", archive: unzstd(rel.oci), check: func(t *testing.T, _ context.Context, _ content.Store, index ocispec.Descriptor) {
			require.Equal(t, ocispec.MediaTypeImageIndex, index.MediaType)
		}},
		{name: "gzip and plain layers", archive: preloadtest.DockerArchive(t, trickyImage(t, "docker.io/library/tricky:v1", false)), check: imagesNamed(1)},
		{name: "legacy layout, a linked layer, an untagged image", archive: legacyArchive(t), check: imagesNamed(3)},
		{name: "a layer the node holds compressed", archive: preloadtest.DockerArchive(t, known),
			before: func(ctx context.Context) {
				require.NoError(t, content.WriteBlob(ctx, cs, "known-gzip", bytes.NewReader(gzBytes),
					ocispec.Descriptor{Digest: digest.Digest(gzDigest.String()), Size: int64(len(gzBytes))},
					content.WithLabels(map[string]string{labels.LabelUncompressed: digest.FromBytes(plain).String()})))
			},
			check: func(t *testing.T, ctx context.Context, cs content.Store, index ocispec.Descriptor) {
				mf := manifestOf(t, ctx, cs, index)
				require.Equal(t, gzDigest.String(), mf.Layers[0].Digest.String())
				require.Equal(t, images.MediaTypeDockerSchema2LayerGzip, mf.Layers[0].MediaType)
			}},
		{name: "no manifest", archive: tarOf(t, map[string]string{"blob": "x"}), wantErr: true},
		{name: "missing config", archive: tarOf(t, map[string]string{"manifest.json": `[{"Config":"c.json","Layers":[]}]`}), wantErr: true},
		{name: "missing layer", archive: tarOf(t, map[string]string{"manifest.json": `[{"Config":"c.json","Layers":["l.tar"]}]`, "c.json": "{}"}), wantErr: true},
		{name: "OCI layout without index", archive: tarOf(t, map[string]string{"oci-layout": `{"imageLayoutVersion":"1.0.0"}`}), wantErr: true},
		{name: "cut short", archive: func() []byte { a := unzstd(rel.docker); return a[:len(a)/2] }(), wantErr: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]ocispec.Descriptor{}
			for name, imp := range importers {
				ctx := namespaces.WithNamespace(t.Context(), fmt.Sprintf("import-%d-%s", i, name))
				// As Import holds one: without a lease, containerd's collector may take blobs no
				// image refers to yet.
				l, err := s.client.LeasesService().Create(ctx, leases.WithRandomID())
				require.NoError(t, err)
				ctx = leases.WithLease(ctx, l.ID)
				if tt.before != nil {
					tt.before(ctx)
				}
				index, err := imp(ctx, bytes.NewReader(tt.archive))
				if tt.wantErr {
					require.Error(t, err, name)
					continue
				}
				require.NoError(t, err, name)
				if tt.check != nil {
					tt.check(t, ctx, cs, index)
				}
				got[name] = index
			}
			if !tt.wantErr {
				require.Equal(t, got["containerd"], got["direct"])
				require.Equal(t, got["containerd"], got["service"])
			}
		})
	}
}

// imagesNamed checks that an index names n images.
func imagesNamed(n int) func(t *testing.T, ctx context.Context, cs content.Store, index ocispec.Descriptor) {
	return func(t *testing.T, ctx context.Context, cs content.Store, index ocispec.Descriptor) {
		require.Len(t, indexOf(t, ctx, cs, index).Manifests, n)
	}
}

func indexOf(t *testing.T, ctx context.Context, cs content.Store, desc ocispec.Descriptor) ocispec.Index {
	t.Helper()
	var idx ocispec.Index
	data, err := content.ReadBlob(ctx, cs, desc)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &idx))
	return idx
}

// manifestOf returns the manifest of the first image an index names.
func manifestOf(t *testing.T, ctx context.Context, cs content.Store, index ocispec.Descriptor) ocispec.Manifest {
	t.Helper()
	idx := indexOf(t, ctx, cs, index)
	require.NotEmpty(t, idx.Manifests)
	var mf ocispec.Manifest
	data, err := content.ReadBlob(ctx, cs, idx.Manifests[0])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &mf))
	return mf
}

// tarOf returns a tar of regular files.
func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, body := range files {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}))
		_, err := tw.Write([]byte(body))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return b.Bytes()
}

// readLayer returns a layer's compressed bytes.
func readLayer(t *testing.T, l v1.Layer) []byte {
	t.Helper()
	rc, err := l.Compressed()
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b
}

// staticLayer is an uncompressed layer of the tar data, as docker save stores layers.
func staticLayer(t *testing.T, data []byte) v1.Layer {
	t.Helper()
	return static.NewLayer(data, types.DockerUncompressedLayer)
}
