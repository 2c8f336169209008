package preload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Remover is an optional capability of a Store, found by type assertion: it removes images that
// nothing needs any more.
type Remover interface {
	// RemoveUnused removes each image of refs that the store holds, that no container uses
	// (running or not, named by the image's name or by its digest) and that is not pinned; with
	// dryRun it removes nothing and reports what it would do. References the store lacks are
	// skipped. Removing an image also removes the digest-named aliases of the same content
	// that no kept image shares. The Removal's Bytes counts the content that no remaining
	// image references (what is freed, or would be). On an error, the Removal says what was
	// done before it. It is safe for concurrent use with the Store's other methods.
	RemoveUnused(ctx context.Context, refs []string, dryRun bool) (Removal, error)
}

// Kept is an image a Remover left in place, and why.
type Kept struct {
	// Image is the image's reference.
	Image string `json:"image"`
	// Reason is KeptInUse or KeptPinned.
	Reason string `json:"reason"`
	// Users names the containers that use it, for KeptInUse.
	Users []string `json:"users,omitempty"`
}

// The reasons an image is kept.
const (
	// KeptInUse is an image a container uses.
	KeptInUse = "InUse"
	// KeptPinned is an image still pinned: the running release claims it, or an operator
	// pinned it.
	KeptPinned = "Pinned"
)

// Removal is what a Remover did (or, in a dry run, would do).
type Removal struct {
	// Removed are the references removed, sorted.
	Removed []string `json:"removed,omitempty"`
	// Kept are the candidates left in place, sorted by reference.
	Kept []Kept `json:"kept,omitempty"`
	// Bytes is the size of the content no remaining image references: the compressed size of
	// the blobs (manifests, configs, layers) the removed images alone held, as containerd's
	// content store reports it. Unpacked snapshots are not counted.
	Bytes int64 `json:"bytes"`
}

// Cleanup is the result of one Cleaner.Clean.
type Cleanup struct {
	// Release is the release the node runs now.
	Release string `json:"release"`
	// Previous are the releases whose images were candidates.
	Previous []string `json:"previous,omitempty"`
	// DryRun is true when nothing was removed on purpose.
	DryRun bool `json:"dryRun,omitempty"`
	// Candidates is how many images of the previous releases the running release does not list.
	Candidates int `json:"candidates"`
	Removal
	// Time is when the cleanup ended.
	Time time.Time `json:"time"`
	// Error says why the cleanup stopped short; empty when it did not.
	Error string `json:"error,omitempty"`
}

// Cleaner removes from a Store the images of the releases a node ran before, once another runs:
// every image a previous release's list in the ListArchive names that the running release's list
// does not, unless a container uses it or it is pinned. Create it with NewCleaner.
type Cleaner struct {
	store   Remover
	archive *ListArchive
	dryRun  bool
	log     *slog.Logger
	images  prometheus.Counter
	bytes   prometheus.Counter
}

// CleanerConfig is what a Cleaner is told besides its store and archive.
type CleanerConfig struct {
	// DryRun makes Clean report what it would remove and remove nothing.
	DryRun bool
	// Log receives the cleaner's log lines; nil discards them.
	Log *slog.Logger
	// Registerer, when set, receives the cleaner's metrics.
	Registerer prometheus.Registerer
}

// ErrNoRemover is returned by NewCleaner for a store that cannot remove images.
var ErrNoRemover = errors.New("the image store cannot remove images")

// NewCleaner returns a Cleaner of store's images by the lists in archive.
func NewCleaner(store Store, archive *ListArchive, cfg CleanerConfig) (*Cleaner, error) {
	r, ok := store.(Remover)
	if !ok {
		return nil, fmt.Errorf("image cleaner: %w", ErrNoRemover)
	}
	if archive == nil {
		return nil, errors.New("image cleaner: an image list archive is required")
	}
	c := &Cleaner{
		store: r, archive: archive, dryRun: cfg.DryRun, log: cfg.Log,
		images: counter("upgrade_repo_preload_images_cleaned_total",
			"Images of previous releases removed from the image store after an upgrade."),
		bytes: counter("upgrade_repo_preload_images_cleaned_bytes_total",
			"Content bytes freed in the image store by removing previous releases' images (compressed blob sizes)."),
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if err := register(cfg.Registerer, c.images, c.bytes); err != nil {
		return nil, fmt.Errorf("image cleaner: register metrics: %w", err)
	}
	return c, nil
}

// Clean removes the images of every release in the archive other than running that running's
// list does not name. It refuses to remove anything when running has no list (what it needs
// cannot be told). After a cleanup that kept nothing, the previous releases' lists are dropped;
// a list with a kept image stays, for the next cleanup. The Cleanup is returned also with an
// error, saying what was done.
func (c *Cleaner) Clean(ctx context.Context, running string) (Cleanup, error) {
	out := Cleanup{Release: running, DryRun: c.dryRun}
	done := func(err error) (Cleanup, error) {
		out.Time = time.Now()
		if err != nil {
			out.Error = err.Error()
		}
		return out, err
	}
	keep, err := c.archive.Load(running)
	if err != nil {
		return done(fmt.Errorf("clean images: the running release's list: %w", err))
	}
	rels, err := c.archive.Releases()
	if err != nil {
		return done(fmt.Errorf("clean images: %w", err))
	}
	var cands []string
	for _, r := range rels {
		if r == running {
			continue
		}
		refs, err := c.archive.Load(r)
		if err != nil {
			return done(fmt.Errorf("clean images: %w", err))
		}
		out.Previous = append(out.Previous, r)
		cands = append(cands, refs...)
	}
	slices.Sort(cands)
	cands = without(slices.Compact(cands), keep)
	out.Candidates = len(cands)
	if len(cands) > 0 {
		out.Removal, err = c.store.RemoveUnused(ctx, cands, c.dryRun)
		if !c.dryRun {
			c.images.Add(float64(len(out.Removed)))
			c.bytes.Add(float64(out.Bytes))
		}
		if err != nil {
			return done(fmt.Errorf("clean images of releases %v: %w", out.Previous, err))
		}
	}
	for _, k := range out.Kept {
		c.log.Info("image of a previous release kept", "image", k.Image, "reason", k.Reason, "users", k.Users)
	}
	if !c.dryRun && len(out.Kept) == 0 {
		for _, r := range out.Previous {
			if err := c.archive.Drop(r); err != nil {
				return done(fmt.Errorf("clean images: %w", err))
			}
		}
	}
	return done(nil)
}
