package agent

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/preload"
)

// Cleaning the images of earlier releases.
//
// At every preload the agent records the release's image lists in its cache directory
// (images-lists-archive/<release>/image_list_all.txt, see preload.ListArchive), so that it still
// knows which images a release brought once its ISO is gone. When the ISO of a plan that
// Succeeded is dropped, the release's pins are withdrawn from the other releases' images first
// (unpin), then every image of an earlier release's list that the new release does not list is
// removed from containerd, unless a container uses it or it is still pinned (the running
// release's images, an operator's pins); those are kept and named in the RepoNode's
// status.cleanup and in a log line. With the dry run nothing is removed and status.cleanup lists
// what would go.

// listArchiveDir is the folder of the cache directory the releases' image lists are kept in.
const listArchiveDir = "images-lists-archive"

// maxCleanupNames is how many removed and kept images the RepoNode names.
const maxCleanupNames = 100

// setupClean prepares the image list archive (with a cache directory and an image store) and,
// when CleanImages is set and the store can remove images, the cleaner, whose metrics go to reg.
func (a *Agent) setupClean(reg prometheus.Registerer) error {
	if a.cfg.CacheDir == "" || a.images == nil {
		return nil
	}
	a.lists = preload.NewListArchive(filepath.Join(a.cfg.CacheDir, listArchiveDir))
	if !a.cfg.CleanImages {
		return nil
	}
	c, err := preload.NewCleaner(a.images, a.lists, preload.CleanerConfig{DryRun: a.cfg.CleanDryRun, Log: a.log, Registerer: reg})
	if errors.Is(err, preload.ErrNoRemover) {
		a.log.Info("the image store cannot remove images: earlier releases' images stay")
		return nil
	}
	a.cleaner = c
	return err
}

// archiveLists records the image lists of the release rel in fsys; a failure is logged, and
// only means that the release's images will not be cleaned after a later upgrade.
func (a *Agent) archiveLists(rel string, fsys fs.FS) {
	if a.lists == nil || rel == "" {
		return
	}
	archives, err := preload.LoadArchives(fsys)
	if err == nil {
		var refs []string
		for _, ar := range archives {
			refs = append(refs, ar.Images...)
		}
		err = a.lists.Save(rel, refs)
	}
	if err != nil {
		a.log.Warn("record the release's image lists", "release", rel, "err", err)
	}
}

// installed reports whether a plan that installed the ISO with the sha512 hex Succeeded.
func (a *Agent) installed(hex string) bool {
	if a.plans == nil {
		return false
	}
	in, _ := a.plans.current()
	return listed(in.Installed, hex)
}

// clean removes the images of the releases before rel, which the node runs now, and puts the
// outcome on the board.
func (a *Agent) clean(ctx context.Context, rel string) {
	if a.cleaner == nil || rel == "" {
		return
	}
	c, err := a.cleaner.Clean(ctx, rel)
	if err != nil {
		a.log.Warn("clean images of earlier releases", "release", rel, "err", err)
	} else {
		a.log.Info("images of earlier releases cleaned", "release", rel, "previous", c.Previous, "dryRun", c.DryRun,
			"removed", len(c.Removed), "kept", len(c.Kept), "bytes", c.Bytes)
	}
	a.board.update(func(s *Status) { s.Cleanup = &c })
}

// repoNodeCleanup maps a cleanup to the RepoNode's status.cleanup, naming at most
// maxCleanupNames removed and kept images.
func repoNodeCleanup(c *preload.Cleanup) *v1beta1.RepoNodeCleanup {
	if c == nil {
		return nil
	}
	out := &v1beta1.RepoNodeCleanup{
		Release: c.Release, Previous: append([]string(nil), c.Previous...), DryRun: c.DryRun,
		Candidates: int64(c.Candidates), RemovedTotal: int64(len(c.Removed)), BytesFreed: c.Bytes,
		Message: c.Error, Time: metav1.NewTime(c.Time),
	}
	out.Removed = append(out.Removed, c.Removed[:min(len(c.Removed), maxCleanupNames)]...)
	for _, k := range c.Kept[:min(len(c.Kept), maxCleanupNames)] {
		out.Kept = append(out.Kept, v1beta1.RepoNodeKeptImage{Image: k.Image, Reason: k.Reason, Containers: append([]string(nil), k.Users...)})
	}
	return out
}
