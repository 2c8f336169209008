package e2e

import (
	"context"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/release/pack"
)

// testRelease is the release ISO of the run, built once by release/pack on the host.
type testRelease struct {
	// iso is the ISO's path on the host, tree the directory it was made from: the expected
	// content of every file the agents serve.
	iso, tree string
	// checksum is the ISO's `sha512:HEX`; size its length.
	checksum string
	size     int64
	// res says what pack built: archives, images and files.
	res *pack.Result
}

var (
	releaseOnce sync.Once
	releaseVal  *testRelease
	releaseErr  error
)

// releaseSpec is small enough to copy around quickly and large enough to matter: several
// archives in three bundle groups with shared layers, and a rootfs that spans many extents.
func releaseSpec() pack.Spec {
	const mib = 1 << 20
	img := func(ref string, own ...pack.Size) pack.Image {
		return pack.Image{Ref: ref, Shared: []string{"base"}, Layers: own}
	}
	return pack.Spec{
		Version:      "v1.5.2",
		Seed:         20261121,
		SharedLayers: map[string]pack.Size{"base": 3 * mib},
		Archives: []pack.Archive{
			{Group: "common", Name: "harvester-images-v1.5.2", Images: []pack.Image{
				img("rancher/harvester:v1.5.2", 2*mib, 512<<10),
				img("rancher/harvester-webhook:v1.5.2", 1*mib),
				img("longhornio/longhorn-manager:v1.8.2", 2*mib),
			}},
			{Group: "rke2", Name: "rke2-images.linux-amd64-v1.32.7+rke2r1", Images: []pack.Image{
				img("rancher/rke2-runtime:v1.32.7-rke2r1", 1*mib),
				img("rancher/hardened-kubernetes:v1.32.7-rke2r1-build20250716", 2*mib),
			}},
			{Group: "agent", Name: "rancherd-bootstrap-images-v1.5.2", Images: []pack.Image{
				img("rancher/system-agent-installer-rke2:v1.32.7-rke2r1", 1*mib),
			}},
		},
		Files: []pack.File{{Path: "rootfs.squashfs", Size: 40 * mib}},
	}
}

// releaseISO returns the run's release ISO, building it on first use.
func releaseISO(t *testing.T) *testRelease {
	t.Helper()
	c := env(t)
	releaseOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		releaseVal, releaseErr = buildRelease(ctx, filepath.Join(c.artifacts, "release"))
	})
	require.NoError(t, releaseErr)
	return releaseVal
}

func buildRelease(ctx context.Context, dir string) (*testRelease, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("clean %s: %w", dir, err)
	}
	r := &testRelease{tree: filepath.Join(dir, "tree"), iso: filepath.Join(dir, "release.iso")}
	if err := os.MkdirAll(r.tree, 0o755); err != nil {
		return nil, fmt.Errorf("release tree: %w", err)
	}
	spec := releaseSpec()
	res, err := pack.BuildTree(ctx, spec, r.tree)
	if err != nil {
		return nil, fmt.Errorf("build release tree: %w", err)
	}
	if err := pack.MakeISO(ctx, r.tree, r.iso, "HARVESTER_V1_5_2"); err != nil {
		return nil, fmt.Errorf("make release iso: %w", err)
	}
	r.res = res
	f, err := os.Open(r.iso)
	if err != nil {
		return nil, fmt.Errorf("checksum release iso: %w", err)
	}
	defer f.Close()
	h := sha512.New()
	if r.size, err = io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("checksum release iso: %w", err)
	}
	r.checksum = "sha512:" + hex.EncodeToString(h.Sum(nil))
	return r, nil
}
