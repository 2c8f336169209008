package containerd

import (
	"testing"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/platforms"
	"github.com/opencontainers/image-spec/identity"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
)

// TestUnpackRealContainerd imports with and without unpacking and checks what a container start
// needs: the snapshot of the image's chain ID, from which a container's root is prepared without
// any further unpacking.
func TestUnpackRealContainerd(t *testing.T) {
	d := containerdtest.Start(t)
	rel := newRelease(t)
	for _, tc := range []struct {
		name   string
		opts   []Option
		unpack bool
	}{
		{"with unpack", []Option{WithUnpack(DefaultSnapshotter)}, true},
		{"without unpack", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := New(t.Context(), d.Socket, append(tc.opts, WithNamespace("unpack-"+map[bool]string{true: "on", false: "off"}[tc.unpack]))...)
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			names, err := s.Import(t.Context(), zstdReader(t, rel.docker.Data))
			require.NoError(t, err)
			require.ElementsMatch(t, rel.docker.Refs, names)

			ctx := namespaces.WithNamespace(t.Context(), s.ns)
			cs := s.client.ContentStore()
			sn := s.client.SnapshotService(DefaultSnapshotter)
			runnable := 0
			for _, ref := range rel.docker.Refs {
				img, err := s.client.ImageService().Get(ctx, ref)
				require.NoError(t, err)
				if _, err := images.Manifest(ctx, cs, img.Target, platforms.Default()); err != nil {
					continue // not for this host: never unpacked
				}
				runnable++
				cfg, err := images.Config(ctx, cs, img.Target, platforms.Default())
				require.NoError(t, err)
				diffIDs, err := images.RootFS(ctx, cs, cfg)
				require.NoError(t, err)
				chain := identity.ChainID(diffIDs).String()
				_, err = sn.Stat(ctx, chain)
				id := "c-" + img.Target.Digest.Encoded()[:12]
				_, cerr := s.client.NewContainer(ctx, id, client.WithSnapshotter(DefaultSnapshotter),
					client.WithNewSnapshot(id, client.NewImage(s.client, img)), client.WithNewSpec())
				if !tc.unpack {
					require.Error(t, err, "%s unpacked without asking", ref)
					require.Error(t, cerr, "%s: a container's root prepared from a snapshot never unpacked", ref)
					continue
				}
				require.NoError(t, err, "%s: no snapshot %s", ref, chain)
				require.NoError(t, cerr, "%s: container", ref)
				mounts, err := sn.Mounts(ctx, id)
				require.NoError(t, err)
				require.NotEmpty(t, mounts)
			}
			require.Positive(t, runnable, "no image of the test release is for this host's platform")
		})
	}
}
