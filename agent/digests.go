package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/preload"
)

// ImageDigestsPath is the agent's route, followed by an ISO's sha512 in hex, for what the
// archives of that verified ISO say the release's images are (a JSON array of
// preload.ImageDigest): 200 once read, 404 for an ISO the node does not hold or has not read
// yet. The sequencer records it on the Version.
const ImageDigestsPath = "/v1/images/digests/"

// digestsFile is the name, in listsDir, of what the ISO hex's archives say their images are.
func digestsFile(hex string) string { return hex + ".digests.json" }

var sha512Hex = regexp.MustCompile(`^[a-f0-9]{128}$`)

// imageDigests holds, by ISO sha512, what each verified ISO's archives say the release's images
// are. It is safe for concurrent use.
type imageDigests struct {
	mu    sync.Mutex
	byISO map[string][]preload.ImageDigest
	// read is closed, for each ISO, once its read ended (see readImages), whatever its outcome.
	read map[string]chan struct{}
}

func (d *imageDigests) set(hex string, images []preload.ImageDigest) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byISO == nil {
		d.byISO = map[string][]preload.ImageDigest{}
	}
	d.byISO[hex] = images
}

// readChan returns the channel closed once the read of the ISO hex ended. d.mu is held.
func (d *imageDigests) readChan(hex string) chan struct{} {
	if d.read == nil {
		d.read = map[string]chan struct{}{}
	}
	c, ok := d.read[hex]
	if !ok {
		c = make(chan struct{})
		d.read[hex] = c
	}
	return c
}

// ended marks the read of the ISO hex ended.
func (d *imageDigests) ended(hex string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.readChan(hex)
	select {
	case <-c:
	default:
		close(c)
	}
}

// wait returns what the archives of the ISO hex say its images are, once its read ended; none,
// with an error, when the read found none, and ctx's error when ctx ends first.
func (d *imageDigests) wait(ctx context.Context, hex string) ([]preload.ImageDigest, error) {
	d.mu.Lock()
	c := d.readChan(hex)
	d.mu.Unlock()
	select {
	case <-c:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	images, ok := d.get(hex)
	if !ok {
		return nil, errors.New("the node could not read the image digests of the ISO")
	}
	return images, nil
}

func (d *imageDigests) get(hex string) ([]preload.ImageDigest, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	images, ok := d.byISO[hex]
	return images, ok
}

func (d *imageDigests) drop(hex string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.byISO, hex)
	delete(d.read, hex)
}

// ServeHTTP answers GET ImageDigestsPath<sha512>.
func (d *imageDigests) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hex := r.PathValue("sha512")
	images, ok := d.get(hex)
	if !sha512Hex.MatchString(hex) || !ok {
		http.Error(w, "the node has not read the image digests of this ISO", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(images)
}

// readImages reads, from the verified ISO at path (sha512 hex), what the release's archives say
// its images are (preload.ReadDigests: every archive decompressed once, kept in the cache
// directory so that a restart does not read them again), serves it at ImageDigestsPath and pins
// the mirror's list of the release to it. It runs beside the preload and needs nothing of the
// image store: what the store holds under a tag never becomes a pin. A failure is logged; the
// images whose archives could be read are pinned. The preload waits for its end (see
// imageDigests.wait) to tell the release's images from others the store holds under their names.
func (a *Agent) readImages(ctx context.Context, path, hex string) {
	defer a.digests.ended(hex)
	fsys, f, err := iso.OpenFile(path)
	if err != nil {
		a.log.Warn("read the release's image digests: open the ISO", "err", err)
		return
	}
	defer f.Close()
	images, err := a.releaseDigests(ctx, fs.FS(fsys), hex)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		a.log.Warn("read the release's image digests", "sha512", hex, "err", err)
	}
	a.digests.set(hex, images)
	a.pinImages(fs.FS(fsys), releaseName(fsys, hex), images)
}

// releaseDigests returns what the archives of the ISO fsys (sha512 hex) say its images are: kept
// from an earlier read, else read now and kept when every archive could be read.
func (a *Agent) releaseDigests(ctx context.Context, fsys fs.FS, hex string) ([]preload.ImageDigest, error) {
	var kept string
	if a.cfg.CacheDir != "" {
		kept = filepath.Join(a.cfg.CacheDir, listsDir, digestsFile(hex))
		if p, err := os.ReadFile(kept); err == nil {
			var images []preload.ImageDigest
			if err := json.Unmarshal(p, &images); err == nil {
				return images, nil
			}
		}
	}
	images, err := preload.ReadDigests(ctx, fsys)
	if err != nil || kept == "" {
		return images, err
	}
	p, _ := json.Marshal(images)
	if werr := os.MkdirAll(filepath.Dir(kept), 0o755); werr == nil {
		werr = os.WriteFile(kept+".tmp", p, 0o644)
		if werr == nil {
			werr = os.Rename(kept+".tmp", kept)
		}
		if werr != nil {
			a.log.Warn("keep the release's image digests", "sha512", hex, "err", werr)
		}
	}
	return images, nil
}

// forgetDigests drops what the ISO hex's archives said, once the node drops the ISO.
func (a *Agent) forgetDigests(hex string) {
	a.digests.drop(hex)
	if a.cfg.CacheDir == "" {
		return
	}
	if err := os.Remove(filepath.Join(a.cfg.CacheDir, listsDir, digestsFile(hex))); err != nil && !os.IsNotExist(err) {
		a.log.Warn("remove the release's image digests", "sha512", hex, "err", err)
	}
	a.pruneListsDir()
}
