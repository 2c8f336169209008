package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"os/exec"
	"path"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiv1beta1 "github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// previousRelease names the release the nodes ran before the upgrade, in each agent's image list
// archive (images-lists-archive/ under its cache directory).
const previousRelease = "e2e-previous"

// previousImages are the previous release's images the upgrade test puts on every node: unused,
// an image of its own that nothing runs, and used, a second name of the project image that every
// agent container runs.
type previousImages struct {
	unused, used string
}

// installPreviousRelease puts the previous release's images on every node and records their
// list as the previous release's in each agent's archive, as if the agents had preloaded it.
func installPreviousRelease(t *testing.T, c *cluster) previousImages {
	t.Helper()
	p := previousImages{
		unused: "docker.io/upgrade-repo-e2e/previous-unused:v0",
		used:   "docker.io/upgrade-repo-e2e/previous-used:v0",
	}
	archive := oneImageArchive(t, p.unused, 256<<10)
	dir := path.Join(agentCacheDir, "images-lists-archive", previousRelease)
	for _, n := range c.nodes {
		eventually(t, time.Minute, "the previous release's images on "+n.Name, func(ctx context.Context) error {
			imp := exec.CommandContext(ctx, "docker", "exec", "-i", n.Name, "ctr", "-n", "k8s.io", "images", "import", "-")
			imp.Stdin = bytes.NewReader(archive)
			if out, err := imp.CombinedOutput(); err != nil {
				return fmt.Errorf("import %s into %s: %w: %s", p.unused, n.Name, err, out)
			}
			if _, err := nodeCmd(ctx, n.Name, "ctr", "-n", "k8s.io", "images", "tag", "--force", normalizeRef(c.image), p.used); err != nil {
				return err
			}
			_, err := nodeCmd(ctx, n.Name, "sh", "-c", fmt.Sprintf("mkdir -p %s && printf '%%s\\n' %s %s > %s/image_list_all.txt",
				dir, p.unused, p.used, dir))
			return err
		})
	}
	t.Logf("previous release %s on every node: %s (unused), %s (the agents' image)", previousRelease, p.unused, p.used)
	return p
}

// requirePreviousCleaned checks that, after the upgrade to version Succeeded, every agent removed
// the previous release's unused image, kept the one its containers run and said so in its
// RepoNode, and that the nodes' containerd agrees.
func requirePreviousCleaned(t *testing.T, c *cluster, p previousImages, version string) {
	for _, n := range c.nodes {
		var cl *apiv1beta1.RepoNodeCleanup
		eventually(t, 5*time.Minute, "RepoNode "+n.Name+" reports the cleanup of "+previousRelease, func(ctx context.Context) error {
			var rn apiv1beta1.RepoNode
			if err := c.cl.Get(ctx, client.ObjectKey{Name: n.Name}, &rn); err != nil {
				return err
			}
			if cl = rn.Status.Cleanup; cl == nil || cl.Release != version {
				return fmt.Errorf("RepoNode %s: cleanup %+v", n.Name, cl)
			}
			return nil
		})
		require.Empty(t, cl.Message, "%s: cleanup stopped short", n.Name)
		require.False(t, cl.DryRun, n.Name)
		require.Contains(t, cl.Previous, previousRelease, n.Name)
		require.Contains(t, cl.Removed, p.unused, "%s: removed %v", n.Name, cl.Removed)
		require.NotContains(t, cl.Removed, p.used, n.Name)
		i := slices.IndexFunc(cl.Kept, func(k apiv1beta1.RepoNodeKeptImage) bool { return k.Image == p.used })
		require.GreaterOrEqual(t, i, 0, "%s: %s named as kept: %+v", n.Name, p.used, cl.Kept)
		require.Equal(t, "InUse", cl.Kept[i].Reason, n.Name)
		require.NotEmpty(t, cl.Kept[i].Containers, n.Name)
		require.Positive(t, cl.BytesFreed, "%s: bytes freed", n.Name)

		var listed string
		eventually(t, time.Minute, "list the images of "+n.Name, func(ctx context.Context) error {
			var err error
			listed, err = nodeCmd(ctx, n.Name, "ctr", "-n", "k8s.io", "images", "ls", "-q")
			return err
		})
		have := strings.Fields(listed)
		require.NotContains(t, have, p.unused, "%s: the previous release's unused image is gone", n.Name)
		require.Contains(t, have, p.used, "%s: the previous release's image in use stays", n.Name)
		requireImages(t, n.Name, releaseISO(t).refs())
		t.Logf("%s: %s removed (%d bytes freed), %s kept (used by %v)", n.Name, p.unused, cl.BytesFreed, p.used, cl.Kept[i].Containers)
	}
}

// oneImageArchive returns a docker-save archive of one image tagged ref, for this host's
// platform (the kind nodes'), whose one layer holds size random bytes.
func oneImageArchive(t *testing.T, ref string, size int) []byte {
	t.Helper()
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	data := make([]byte, size)
	_, _ = rand.Read(data)
	require.NoError(t, lw.WriteHeader(&tar.Header{Name: "data", Mode: 0o644, Size: int64(size), Typeflag: tar.TypeReg}))
	_, err := lw.Write(data)
	require.NoError(t, err)
	require.NoError(t, lw.Close())
	diffID := sha256.Sum256(layer.Bytes())
	config := fmt.Sprintf(`{"architecture":%q,"os":"linux","rootfs":{"type":"layers","diff_ids":["sha256:%x"]},"config":{}}`, runtime.GOARCH, diffID)
	configID := sha256.Sum256([]byte(config))
	manifest := fmt.Sprintf(`[{"Config":"%x.json","RepoTags":[%q],"Layers":["%x/layer.tar"]}]`, configID, ref, diffID)
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{fmt.Sprintf("%x.json", configID), []byte(config)},
		{fmt.Sprintf("%x/layer.tar", diffID), layer.Bytes()},
		{"manifest.json", []byte(manifest)},
	} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}))
		_, err := tw.Write(f.data)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return out.Bytes()
}
