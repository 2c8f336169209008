package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/internal/idle"
	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/registry"
)

// Mirror is the release image registry an agent serves (see package registry): on the agent's
// own listener under /v2/, where peers ask for what their node lacks, and on a listener of its
// own, which the node's containerd uses as a mirror.
type Mirror struct {
	// Handler serves /v2/ (required).
	Handler http.Handler
	// Lists is the Handler's catalog; the agent sets the image lists of the releases it preloads
	// and drops those of releases no longer needed (required).
	Lists *registry.Lists
	// Listener is where the node's containerd reaches the registry; nil: the agent's own only.
	// Run closes it.
	Listener net.Listener
}

// listsDir is where, under the cache directory, the image lists the mirror serves are kept, so
// that they outlive both the ISO and a restart of the agent.
//
// Lists kept before the pins came from the ISO (in mirror-lists) pinned what the node's store
// held under each tag: they are not read.
const listsDir = "mirror-pins"

// serveMirror serves again the image lists kept by an earlier run, then the mirror on its own
// listener until ctx ends.
func (a *Agent) serveMirror(ctx context.Context) error {
	if a.mirror == nil {
		return nil
	}
	a.loadLists()
	if a.mirror.Listener == nil {
		return nil
	}
	srv := newServer(a.mirror.Handler)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.Grace)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
	}()
	a.log.Info("release image registry listening", "addr", a.mirror.Listener.Addr().String())
	if err := srv.Serve(idle.Listener(a.mirror.Listener, writeIdle)); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve the release image registry: %w", err)
	}
	return nil
}

// pinImages makes the mirror serve the images of release rel, whose verified ISO is fsys, each
// pinned to what the release's own archive says it is (images, read from that ISO by
// readImages): the mirror then serves its tag only as that image, from the node or from peers,
// never as what the node's store or a peer holds under the tag. A listed image no archive names
// stays listed without a pin (served from the node's store only, never a peer's).
func (a *Agent) pinImages(fsys fs.FS, rel string, images []preload.ImageDigest) {
	if a.mirror == nil {
		return
	}
	refs, err := releaseRefs(fsys)
	if err != nil {
		a.log.Warn("release image registry: read the release's image lists", "release", rel, "err", err)
		return
	}
	byRef := make(map[string]preload.ImageDigest, len(images))
	for _, d := range images {
		byRef[d.Ref] = d
	}
	pinned := 0
	for i, ref := range refs {
		if d, ok := byRef[ref]; ok && (d.Manifest != "" || d.Config != "") {
			refs[i] = registry.Entry(ref, registry.Pin{Manifest: d.Manifest, Config: d.Config})
			pinned++
		}
	}
	a.setList(rel, refs)
	a.log.Info("release image registry: images pinned", "release", rel, "pinned", pinned, "images", len(refs))
}

// releaseRefs returns the image references the lists of the release in fsys name.
func releaseRefs(fsys fs.FS) ([]string, error) {
	archives, err := preload.LoadArchives(fsys)
	if err != nil {
		return nil, err
	}
	var refs []string
	for _, ar := range archives {
		refs = append(refs, ar.Images...)
	}
	return refs, nil
}

// setList makes the mirror serve the image list entries of release rel, and keeps them in the
// cache directory.
func (a *Agent) setList(rel string, refs []string) {
	a.mirror.Lists.Set(rel, refs)
	if a.cfg.CacheDir == "" {
		return
	}
	dir := filepath.Join(a.cfg.CacheDir, listsDir)
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, rel+".txt"), []byte(strings.Join(refs, "\n")+"\n"), 0o644)
	}
	if err != nil {
		a.log.Warn("release image registry: keep the release's image list", "release", rel, "err", err)
	}
}

// forgetImages stops serving the images of the releases drop names.
func (a *Agent) forgetImages(drop func(release string) bool) {
	if a.mirror == nil || a.cfg.CacheDir == "" {
		return
	}
	files, _ := filepath.Glob(filepath.Join(a.cfg.CacheDir, listsDir, "*.txt"))
	for _, f := range files {
		rel := strings.TrimSuffix(filepath.Base(f), ".txt")
		if drop(rel) {
			a.mirror.Lists.Drop(rel)
			if err := os.Remove(f); err != nil {
				a.log.Warn("release image registry: remove an image list", "release", rel, "err", err)
			}
		}
	}
	a.pruneListsDir()
}

// pruneListsDir removes the directory of kept lists once it holds nothing, so that a node that
// dropped every release keeps nothing in its cache.
func (a *Agent) pruneListsDir() {
	// Remove fails on a directory that still holds a file: that is the check.
	_ = os.Remove(filepath.Join(a.cfg.CacheDir, listsDir))
}

// lines returns the non-empty lines of s: the entries of a kept image list (an entry may hold a
// space, before its config pin).
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// loadLists serves again the image lists kept by an earlier run.
func (a *Agent) loadLists() {
	if a.cfg.CacheDir == "" {
		return
	}
	files, _ := filepath.Glob(filepath.Join(a.cfg.CacheDir, listsDir, "*.txt"))
	for _, f := range files {
		p, err := os.ReadFile(f)
		if err != nil {
			a.log.Warn("release image registry: read a kept image list", "file", f, "err", err)
			continue
		}
		a.mirror.Lists.Set(strings.TrimSuffix(filepath.Base(f), ".txt"), lines(string(p)))
	}
}

// readISO reports whether the node read the image digests of the ISO of checksum itself.
func (a *Agent) readISO(isoChecksum string) bool {
	c, err := checksum.Parse(isoChecksum)
	if err != nil {
		return false
	}
	_, ok := a.digests.get(c.Hex())
	return ok
}

// versionsEvery is how often an agent reads the cluster's Versions for the images its registry
// serves.
const versionsEvery = 30 * time.Second

// clusterList is the key, in the registry's catalog, of the image list of Version name as the
// cluster records it (apart from the lists of the releases this node preloaded).
func clusterList(name string) string { return "version/" + name }

// followVersions makes the registry serve, until ctx ends and read again at every interval, the images the cluster records for
// the releases it runs or is upgrading to (see servedVersions), so that a node that never
// preloaded them (one that joined after the upgrade, or lost its cache) serves them too. Only the
// API server is believed for what a release holds, never a peer. A failed read keeps what is
// served.
func (a *Agent) followVersions(ctx context.Context, every time.Duration) {
	if a.mirror == nil || a.kube == nil {
		return
	}
	served := map[string]bool{}
	for {
		var versions v1beta1.VersionList
		var plans v1beta1.UpgradePlanList
		err := a.kube.List(ctx, &versions)
		if err == nil {
			err = a.kube.List(ctx, &plans)
		}
		if err != nil && ctx.Err() == nil {
			a.log.Warn("release image registry: read the cluster's versions", "err", err)
		}
		if err == nil {
			want := servedVersions(versions.Items, plans.Items, a.readISO)
			for name, refs := range want {
				a.mirror.Lists.Set(clusterList(name), refs)
				served[name] = true
			}
			for name := range served {
				if _, ok := want[name]; !ok {
					a.mirror.Lists.Drop(clusterList(name))
					delete(served, name)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// servedVersions returns, by Version name, the image list entries of the Versions the cluster
// runs (Installed) or is upgrading to (named by a plan that has not ended): each recorded image,
// pinned to the digests recorded for it, except on a node that read the Version's ISO itself
// (own reports whether it did, by the ISO's checksum): there the node's own pins stand alone,
// and the Version's images are listed without pins.
func servedVersions(versions []v1beta1.Version, plans []v1beta1.UpgradePlan, own func(isoChecksum string) bool) map[string][]string {
	target := map[string]bool{}
	for _, p := range plans {
		switch p.Status.Phase {
		case v1beta1.PhaseSucceeded, v1beta1.PhaseFailed:
		default:
			target[p.Spec.Version] = true
		}
	}
	out := map[string][]string{}
	for _, v := range versions {
		if len(v.Status.Images) == 0 {
			continue
		}
		if !target[v.Name] && !meta.IsStatusConditionTrue(v.Status.Conditions, v1beta1.VersionInstalled) {
			continue
		}
		pins := map[string]registry.Pin{}
		if own == nil || !own(v.Spec.ISOChecksum) {
			for _, d := range v.Status.ImageDigests {
				pins[d.Ref] = registry.Pin{Manifest: d.Manifest, Config: d.Config}
			}
		}
		entries := make([]string, 0, len(v.Status.Images))
		for _, ref := range v.Status.Images {
			entries = append(entries, registry.Entry(ref, pins[ref]))
		}
		out[v.Name] = entries
	}
	return out
}
