package registry_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/validate"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
	"github.com/upgrade-repo/upgrade-repo/registry"
)

// A node whose containerd holds another image under a release's tag (an impostor) cannot make a
// node that lacks the image serve it: a listed tag resolves only to the digest the release pins
// it to, peers are asked by that digest, and the node serves the release's image (from an honest
// peer) or nothing. By tag and by digest both work.
func TestTagsResolveOnlyThroughTheRelease(t *testing.T) {
	f := newFixture(t)
	const token = "ring"
	fake := preloadtest.NewImage(t, f.alpha.Ref, preloadtest.ImageOptions{OS: "linux", Arch: "amd64", OCI: true, Own: 2, Seed: 99})
	_, err := f.store(t, "impostor").Import(t.Context(), bytes.NewReader(preloadtest.OCIArchive(t, fake)))
	require.NoError(t, err)
	fakeDigest, err := fake.Img.Digest()
	require.NoError(t, err)
	want, err := f.alpha.Img.Digest()
	require.NoError(t, err)

	honest := f.serve(t, containerd.DefaultNamespace, registry.WithToken(token))
	// The impostor's node lists the release's tag and holds its own image under it.
	impostor := f.serve(t, "impostor", registry.WithToken(token))
	both := []peer.Member{
		{Name: "b", Addr: strings.TrimPrefix(impostor.URL, "http://")},
		{Name: "c", Addr: strings.TrimPrefix(honest.URL, "http://")},
	}
	onlyImpostor := both[:1]

	for _, tc := range []struct {
		name    string
		ns      string
		members []peer.Member
		pinned  bool
		served  bool // the release's image is served; else nothing is
	}{
		{name: "lacks it: the impostor asked first, then an honest peer", ns: "lacks-1", members: both, pinned: true, served: true},
		{name: "lacks it: only the impostor to ask", ns: "lacks-2", members: onlyImpostor, pinned: true},
		{name: "holds the impostor's image under the tag itself", ns: "impostor", members: both, pinned: true, served: true},
		{name: "a tag the release pins no digest for is never asked of peers", ns: "lacks-3", members: both},
	} {
		t.Run(tc.name, func(t *testing.T) {
			members := &peer.StaticMembers{Local: "a", List: append([]peer.Member{{Name: "a", Addr: "127.0.0.1:1"}}, tc.members...)}
			p, err := registry.NewPeers(members, registry.PeersConfig{Token: token, Dir: t.TempDir()})
			require.NoError(t, err)
			list := f.listed
			if tc.pinned {
				list = f.pinned(t)
			}
			victim := f.serveList(t, tc.ns, list, registry.WithPeers(p), registry.WithToken(token))
			for _, ref := range []string{"library/alpha:v1", "library/alpha@" + want.String()} {
				got, err := pull(t, victim, ref)
				if !tc.served {
					require.Error(t, err, ref)
					continue
				}
				require.NoError(t, err, ref)
				d, err := got.Digest()
				require.NoError(t, err)
				require.Equal(t, want, d, ref)
				require.NotEqual(t, fakeDigest, d, ref)
				require.NoError(t, validate.Image(got), ref)
			}
			_, err = pull(t, victim, "library/alpha@"+fakeDigest.String())
			require.Error(t, err, "the impostor's image by its digest")
		})
	}
}

// An image of a docker save archive has no manifest of the release's own (each node's import
// writes one): its tag is pinned to the digest of its config, hashed from the archive. A node
// whose containerd holds another image under the tag (one the preload skipped as present)
// serves the release's image, from an honest peer asked by tag, or nothing; a peer's manifest
// that names another config is refused. By tag and by the digest served, both.
func TestConfigPinnedTags(t *testing.T) {
	f := newFixture(t)
	const token = "ring"
	release, err := preload.ArchiveDigests(t.Context(), bytes.NewReader(preloadtest.DockerArchive(t, f.docker)))
	require.NoError(t, err)
	want, err := f.docker.Img.ConfigName()
	require.NoError(t, err)
	require.Equal(t, want.String(), release[f.docker.Ref].Config, "the archive's config digest")

	fake := preloadtest.NewImage(t, f.docker.Ref, preloadtest.ImageOptions{OS: "linux", Arch: "amd64", Own: 1, Seed: 98})
	for _, ns := range []string{"gamma-impostor", "gamma-holds-impostor"} {
		_, err := f.store(t, ns).Import(t.Context(), bytes.NewReader(preloadtest.DockerArchive(t, fake)))
		require.NoError(t, err)
	}
	fakeConfig, err := fake.Img.ConfigName()
	require.NoError(t, err)

	honest := f.serve(t, containerd.DefaultNamespace, registry.WithToken(token))
	impostor := f.serve(t, "gamma-impostor", registry.WithToken(token))
	both := []peer.Member{
		{Name: "b", Addr: strings.TrimPrefix(impostor.URL, "http://")},
		{Name: "c", Addr: strings.TrimPrefix(honest.URL, "http://")},
	}
	list := []string{registry.Entry(f.docker.Ref, registry.Pin{Config: release[f.docker.Ref].Config})}

	for _, tc := range []struct {
		name    string
		ns      string
		members []peer.Member
		served  bool // the release's image is served; else nothing is
	}{
		{name: "holds another image under the tag itself", ns: "gamma-holds-impostor", members: both, served: true},
		{name: "lacks it: the impostor asked first, then an honest peer", ns: "gamma-lacks-1", members: both, served: true},
		{name: "lacks it: only the impostor to ask", ns: "gamma-lacks-2", members: both[:1]},
		{name: "holds another image, only the impostor to ask", ns: "gamma-holds-impostor", members: both[:1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			members := &peer.StaticMembers{Local: "a", List: append([]peer.Member{{Name: "a", Addr: "127.0.0.1:1"}}, tc.members...)}
			p, err := registry.NewPeers(members, registry.PeersConfig{Token: token, Dir: t.TempDir()})
			require.NoError(t, err)
			victim := f.serveList(t, tc.ns, list, registry.WithPeers(p), registry.WithToken(token))
			got, err := pull(t, victim, "rancher/gamma:v3")
			if !tc.served {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			cfg, err := got.ConfigName()
			require.NoError(t, err)
			require.Equal(t, want, cfg)
			require.NotEqual(t, fakeConfig, cfg)
			require.NoError(t, validate.Image(got))
			d, err := got.Digest()
			require.NoError(t, err)
			byDigest, err := pull(t, victim, "rancher/gamma@"+d.String())
			require.NoError(t, err, "the manifest by the digest served for the tag")
			cfg, err = byDigest.ConfigName()
			require.NoError(t, err)
			require.Equal(t, want, cfg)
		})
	}
}
