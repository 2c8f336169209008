package preload_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
)

// The digests a release's archives give their listed images come from the archives' bytes:
// configs hashed in both of docker save's layouts, and an OCI layout's manifests as its index
// names them. An image an archive holds but its list does not name is left out, as is a listed
// image the archive lacks.
func TestReadDigests(t *testing.T) {
	t.Parallel()
	opts := preloadtest.ImageOptions{OS: "linux", Arch: "amd64", Own: 1}
	classic := preloadtest.NewImage(t, "docker.io/rancher/classic:v1", opts)
	opts.OCI, opts.Seed = true, 2
	layout := preloadtest.NewImage(t, "registry.example.com/x/layout:v2", opts)
	opts.Seed = 3
	unlisted := preloadtest.NewImage(t, "docker.io/library/unlisted:1", opts)

	dir := t.TempDir()
	preloadtest.WriteRelease(t, dir,
		preloadtest.Archive{Group: "common", Name: "classic.tar.zst", Refs: []string{classic.Ref, "docker.io/rancher/absent:v1"},
			Data: preloadtest.Zstd(t, preloadtest.DockerArchive(t, classic))},
		preloadtest.Archive{Group: "rke2", Name: "layout.tar.zst", Refs: []string{layout.Ref},
			Data: preloadtest.Zstd(t, preloadtest.OCIArchive(t, layout, unlisted))},
	)
	got, err := preload.ReadDigests(t.Context(), os.DirFS(dir))
	require.NoError(t, err)

	classicConfig, err := classic.Img.ConfigName()
	require.NoError(t, err)
	layoutConfig, err := layout.Img.ConfigName()
	require.NoError(t, err)
	layoutManifest, err := layout.Img.Digest()
	require.NoError(t, err)
	require.Equal(t, []preload.ImageDigest{
		{Ref: classic.Ref, Config: classicConfig.String()},
		{Ref: layout.Ref, Config: layoutConfig.String(), Manifest: layoutManifest.String()},
	}, got)

	t.Run("an unreadable archive is named, the others still read", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		preloadtest.WriteRelease(t, dir,
			preloadtest.Archive{Group: "common", Name: "classic.tar.zst", Refs: []string{classic.Ref},
				Data: preloadtest.Zstd(t, preloadtest.DockerArchive(t, classic))},
			preloadtest.Archive{Group: "rke2", Name: "broken.tar.zst", Refs: []string{layout.Ref}, Data: []byte("not zstd")},
		)
		got, err := preload.ReadDigests(t.Context(), os.DirFS(dir))
		require.ErrorContains(t, err, "broken.tar.zst")
		require.Equal(t, []preload.ImageDigest{{Ref: classic.Ref, Config: classicConfig.String()}}, got)
	})
}
