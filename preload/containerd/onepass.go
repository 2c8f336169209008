package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/containerd/containerd/v2/pkg/labels"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	digest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	"golang.org/x/sys/unix"
)

// One-pass unpack.
//
// Unpacking through containerd reads every layer back from the content store after the archive
// was written, decompresses it and writes its files: a second pass over every byte, after the
// first. When this process writes blobs itself (direct ingest) and sees the overlayfs
// snapshotter's directory at the path containerd reports (or, with containerd 1.6, which does not
// report it, beside the content directory), it extracts each layer while its blob is being
// written, on another core: a plain tar from the writer's own buffers, a compressed layer (gzip,
// zstd) following the blob's file in the page cache so that layers decompress side by side; into
// a staging directory beside the snapshots, with containerd's overlay applier (apply.go: large
// files' content written ahead by this package). Once the
// archive is read and its images are known, each layer's snapshot is prepared on its parent as
// containerd's unpacker prepares it, the staged directory is renamed into the snapshot's upper
// directory (the directory containerd itself would extract into), and the snapshot is committed
// under its chain ID.
//
// What keeps it as safe as containerd's own unpack:
//   - a staged layer is used only if the digest of its decompressed bytes is the diff ID its
//     image's config names at that place; anything else is unpacked by containerd as before;
//   - what compressed layers expand to before their blobs are verified is bounded (see
//     expansion in extract.go): a layer that passes the bound is left to containerd, which
//     verifies its blob first; once the archive is read, the extractions of blobs that no
//     manifest of its images names as a layer are stopped and removed, before anything is
//     unpacked;
//   - a layer holding whiteouts is used only above another: at the bottom of an image,
//     containerd's applier turns whiteouts into nothing (the snapshot is a bind mount), where
//     the overlay applier one pass uses creates devices and xattrs;
//   - the extracted files are synced (one syncfs of the snapshotter's filesystem) before the
//     first snapshot is committed;
//   - snapshots are committed under the import's lease, before any image exists: a failed import
//     deletes the lease synchronously, so the garbage collector has removed them when it
//     returns, and staging directories never outlive the import, every extraction waited for
//     (those of a killed process go at the next start);
//   - a layer this process cannot extract (a whiteout it may not create, an opaque directory
//     without CAP_SYS_ADMIN, a compression it does not know) is left to containerd.

// stageDirName is the directory, inside the snapshotter's root, of layers extracted while their
// blobs were written. containerd's overlay snapshotter only reads snapshots/ and metadata.db
// there. A guessed root that is not the snapshotter's is found out at the first layer, whose
// snapshot is elsewhere: containerd then unpacks.
const stageDirName = "upgrade-repo.unpack"

// maxExtractions is how many layers are extracted at once; a plain tar whose extraction must wait
// holds its archive's reader back, a compressed layer's waits on its own.
const maxExtractions = 2

// onePass is the snapshotter's directory as this process extracts layers into it.
type onePass struct {
	snapshotter string
	root        string // the snapshotter's root: snapshots/ is below it
	tmp         string // root/stageDirName
	slots       chan struct{}
	// floor and ratio bound each import's unverified expansion (see expansion).
	floor, ratio int64
}

// findOnePass returns one-pass unpack into the snapshotter, or nil, logging why, when this process
// cannot do it: no direct ingest, another snapshotter than overlayfs, its directory out of reach,
// or no right to create what layers hold (ownership, device nodes for whiteouts).
func (s *Store) findOnePass(ctx context.Context) *onePass {
	if s.snapshotter != DefaultSnapshotter || s.direct == nil || !s.onePassOn {
		return nil
	}
	exports, err := s.pluginExports(ctx, snapshotPluginType, s.snapshotter)
	if err != nil || exports == nil {
		s.log.Info("one-pass unpack off: cannot ask containerd for its snapshotter's directory", "snapshotter", s.snapshotter, "err", err)
		return nil
	}
	root := exports["root"]
	if root == "" {
		// containerd 1.6 does not say: its plugins' directories are siblings by default.
		root = filepath.Join(filepath.Dir(s.direct.root), snapshotPluginType+"."+s.snapshotter)
	}
	p, err := newOnePass(s.snapshotter, root)
	if err != nil {
		s.log.Info("one-pass unpack off", "snapshotter", s.snapshotter, "dir", root, "err", err)
		return nil
	}
	s.log.Debug("one-pass unpack on", "dir", root)
	return p
}

// snapshotPluginType is the plugin type of containerd's snapshotters.
const snapshotPluginType = "io.containerd.snapshotter.v1"

func newOnePass(snapshotter, root string) (*onePass, error) {
	if root == "" || !filepath.IsAbs(root) {
		return nil, fmt.Errorf("snapshotter root %q: not an absolute path", root)
	}
	snaps, err := os.Stat(filepath.Join(root, "snapshots"))
	if err != nil {
		return nil, err
	}

	p := &onePass{snapshotter: snapshotter, root: root, tmp: filepath.Join(root, stageDirName), slots: make(chan struct{}, maxExtractions),
		floor: expansionFloor, ratio: expansionRatio}
	if err := os.MkdirAll(p.tmp, 0o700); err != nil {
		return nil, err
	}
	p.removeStale()
	tmp, err := os.Stat(p.tmp)
	if err != nil {
		return nil, err
	}
	if a, b := snaps.Sys().(*syscall.Stat_t), tmp.Sys().(*syscall.Stat_t); a == nil || b == nil || a.Dev != b.Dev {
		return nil, errors.New("staging directory and snapshots on different filesystems")
	}
	// A whiteout is a character device 0/0 owned as in the layer.
	probe := filepath.Join(p.tmp, "probe")
	defer os.Remove(probe)
	if err := unix.Mknod(probe, unix.S_IFCHR, 0); err != nil {
		return nil, fmt.Errorf("create a whiteout: %w", err)
	}
	if err := os.Lchown(probe, 1, 1); err != nil {
		return nil, fmt.Errorf("change a file's owner: %w", err)
	}
	return p, nil
}

// removeStale removes what imports of processes that died staged: an import holds a lock on its
// directory while it runs (another process may be importing into the same daemon).
func (p *onePass) removeStale() {
	ents, err := os.ReadDir(p.tmp)
	if err != nil {
		return
	}
	for _, e := range ents {
		dir := filepath.Join(p.tmp, e.Name())
		if !e.IsDir() {
			_ = os.Remove(dir)
			continue
		}
		f, err := os.Open(dir)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			_ = os.RemoveAll(dir)
		}
		_ = f.Close()
	}
}

// stager holds the layers one import extracted while writing their blobs.
type stager struct {
	p    *onePass
	dir  string   // this import's directory below p.tmp
	lock *os.File // dir, locked while the import runs
	n    atomic.Int64
	// running counts the extractions under way; stop ends flush, which closes flushed.
	running       atomic.Int64
	stop, flushed chan struct{}

	// budget bounds the expansion of the import's compressed layers before they are verified.
	budget *expansion

	mu     sync.Mutex
	layers map[digest.Digest]*extraction
	all    []*extraction // every extraction begun, for remove to wait for
	closed bool
}

// newStager starts an import's staging; remove removes what it did not hand to a snapshot.
func (p *onePass) newStager() (*stager, error) {
	dir, err := os.MkdirTemp(p.tmp, "import-")
	if err != nil {
		return nil, fmt.Errorf("one-pass unpack: %w", err)
	}
	f, err := os.Open(dir)
	if err == nil {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err != nil {
		if f != nil {
			_ = f.Close()
		}
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("one-pass unpack: lock %s: %w", dir, err)
	}
	st := &stager{p: p, dir: dir, lock: f, layers: map[digest.Digest]*extraction{}, stop: make(chan struct{}), flushed: make(chan struct{}),
		budget: newExpansion(p.floor, p.ratio)}
	go st.flush()
	return st, nil
}

// flushEvery is how often the files extractions write are written back while they run: every
// 250 ms, each syncfs wrote back a burst that stalled the import while the disk took it (the
// node bench's one pass: 1.85-2.29 s; every 100 ms 1.68-1.88 s, every 25 or 50 ms no better).
const flushEvery = 100 * time.Millisecond

// flush writes back, while extractions run, what they wrote, so that the sync before the
// snapshots are committed finds little left and the disk works while the archive is read.
func (st *stager) flush() {
	defer close(st.flushed)
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-st.stop:
			return
		case <-t.C:
			if st.running.Load() > 0 {
				_ = unix.Syncfs(int(st.lock.Fd()))
			}
		}
	}
}

// wait waits until every extraction that was handed a committed blob ended.
func (st *stager) wait() {
	st.mu.Lock()
	ls := make([]*extraction, 0, len(st.layers))
	for _, e := range st.layers {
		ls = append(ls, e)
	}
	st.mu.Unlock()
	for _, e := range ls {
		<-e.done
	}
}

// keep stops the extractions of committed blobs that are not in named (the layers of the
// archive's images) and removes what they wrote, before it returns.
func (st *stager) keep(named map[digest.Digest]bool) {
	st.mu.Lock()
	var drop []*extraction
	for d, e := range st.layers {
		if !named[d] {
			drop = append(drop, e)
			delete(st.layers, d)
		}
	}
	st.mu.Unlock()
	for _, e := range drop {
		e.stop()
	}
	for _, e := range drop {
		<-e.done
		_ = os.RemoveAll(e.dir)
	}
}

// remove waits for every extraction, committed or not, and removes all that was staged and not
// taken.
func (st *stager) remove() {
	close(st.stop)
	<-st.flushed
	st.mu.Lock()
	st.closed = true
	ls := st.all
	st.layers, st.all = nil, nil
	st.mu.Unlock()
	for _, e := range ls {
		<-e.done
	}
	_ = os.RemoveAll(st.dir)
	_ = st.lock.Close()
}

// begin returns the extraction of a blob whose first written bytes are head, written into the
// file at path, or nil when they do not start a layer (a compressed stream or a tar).
//
// A plain tar is extracted from the writer's own buffers as they are written: as fast as they
// are, so the writer waits until the extraction has a slot (begin returns then) and, piece by
// piece, for the extraction. A compressed layer decompresses slower than it is written: its
// extraction follows the file instead, from the page cache, so that the writer goes on to the
// next blob at once and the layers of an archive decompress side by side, a slot each.
func (st *stager) begin(ctx context.Context, head []byte, path string) *extraction {
	if !looksLikeLayer(head) {
		return nil
	}
	compressed := compression.DetectCompression(head) != compression.Uncompressed
	var follow *follower
	if compressed {
		f, err := os.Open(path)
		if err != nil {
			return nil
		}
		follow = newFollower(f)
	}
	dir := filepath.Join(st.dir, fmt.Sprint(st.n.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		if follow != nil {
			_ = follow.f.Close()
		}
		return nil
	}
	// The snapshot's directory has the mode containerd gives it, whatever the umask.
	_ = os.Chmod(dir, 0o755)
	e := &extraction{dir: dir, ch: make(chan piece, extractQueue), done: make(chan struct{}), follow: follow}
	if compressed {
		e.budget = st.budget
	}
	st.mu.Lock()
	st.all = append(st.all, e)
	st.mu.Unlock()
	started := make(chan bool, 1)
	st.running.Add(1)
	go st.extract(ctx, e, started)
	if !compressed && !<-started {
		return nil // ctx ended before a slot was free: nothing will be fed
	}
	return e
}

// extract runs e in one of the extraction slots, which it alone takes and gives back: it waits
// for a free slot, says on started whether it got one (false when ctx ended first: e ends
// with ctx's error, never run), runs e and gives the slot back.
func (st *stager) extract(ctx context.Context, e *extraction, started chan<- bool) {
	defer st.running.Add(-1)
	select {
	case st.p.slots <- struct{}{}:
	case <-ctx.Done():
		e.err = ctx.Err()
		if e.follow != nil {
			_ = e.follow.f.Close()
		}
		close(e.done)
		started <- false
		return
	}
	defer func() { <-st.p.slots }()
	started <- true
	e.run(ctx)
}

// finish records e as the extraction of the blob dgst, once the blob is committed.
func (st *stager) finish(dgst digest.Digest, e *extraction) {
	e.close()
	st.mu.Lock()
	defer st.mu.Unlock()
	e.blob = dgst
	if st.closed {
		go func() { <-e.done; _ = os.RemoveAll(e.dir) }()
		return
	}
	if old, ok := st.layers[dgst]; ok {
		// The same blob twice in one archive: one staged copy is enough.
		go func() { <-old.done; _ = os.RemoveAll(old.dir) }()
	}
	st.layers[dgst] = e
}

// take waits for the extraction of blob dgst and hands its directory over, with what it found in
// the layer, or returns false when there is none or it failed.
func (st *stager) take(dgst digest.Digest) (dir string, diffID digest.Digest, facts layerFacts, ok bool) {
	st.mu.Lock()
	e := st.layers[dgst]
	delete(st.layers, dgst)
	st.mu.Unlock()
	if e == nil {
		return "", "", layerFacts{}, false
	}
	<-e.done
	if e.err != nil {
		_ = os.RemoveAll(e.dir)
		return "", "", layerFacts{}, false
	}
	if e.diffID == "" {
		// An uncompressed layer: its diff ID is its digest, hashed as it was written.
		return e.dir, e.blob, e.facts, true
	}
	return e.dir, e.diffID, e.facts, true
}

// onePassResult counts the layers of an import by who unpacked them.
type onePassResult struct {
	staged, containerd, present int
}

// commitStaged unpacks img's layers for this host from the stager, in order, and stops at the
// first it cannot: containerd unpacks the rest. It returns whether the whole image is unpacked.
func (s *Store) commitStaged(ctx context.Context, st *stager, img images.Image, res *onePassResult) bool {
	done, err := s.commitStagedLayers(ctx, st, img, res)
	if err != nil {
		s.log.Warn("one-pass unpack failed, containerd unpacks the image", "image", img.Name, "err", err)
	}
	return done
}

func (s *Store) commitStagedLayers(ctx context.Context, st *stager, img images.Image, res *onePassResult) (bool, error) {
	cs := s.client.ContentStore()
	m, err := images.Manifest(ctx, cs, img.Target, platforms.Default())
	if errdefs.IsNotFound(err) {
		return true, nil // not for this host: not unpacked
	}
	if err != nil {
		return false, nil //nolint:nilerr // containerd's unpack says what is wrong
	}
	diffIDs, err := images.RootFS(ctx, cs, m.Config)
	if err != nil || len(diffIDs) != len(m.Layers) {
		return false, nil //nolint:nilerr // as above
	}
	chain := identity.ChainIDs(append([]digest.Digest(nil), diffIDs...))
	sn := s.client.SnapshotService(s.snapshotter)
	for i, l := range m.Layers {
		cid := chain[i].String()
		if _, err := sn.Stat(ctx, cid); err == nil {
			res.present++
			continue
		}
		dir, diffID, facts, ok := st.take(l.Digest)
		if !ok || diffID != diffIDs[i] || i == 0 && facts.whiteouts {
			if ok {
				_ = os.RemoveAll(dir)
			}
			return false, nil
		}
		parent := ""
		if i > 0 {
			parent = chain[i-1].String()
		}
		if err := s.commitLayer(ctx, sn, dir, parent, cid, diffID); err != nil {
			_ = os.RemoveAll(dir)
			return false, err
		}
		res.staged++
		if _, err := cs.Update(ctx, content.Info{Digest: l.Digest, Labels: map[string]string{labels.LabelUncompressed: diffID.String()}},
			"labels."+labels.LabelUncompressed); err != nil {
			return false, fmt.Errorf("label %s: %w", l.Digest, err)
		}
	}
	if len(chain) > 0 {
		key := "containerd.io/gc.ref.snapshot." + s.snapshotter
		if _, err := cs.Update(ctx, content.Info{Digest: m.Config.Digest, Labels: map[string]string{key: chain[len(chain)-1].String()}},
			"labels."+key); err != nil {
			return false, fmt.Errorf("label %s: %w", m.Config.Digest, err)
		}
	}
	return true, nil
}

// commitLayer makes the staged directory dir the snapshot cid on parent, labelled as
// containerd's unpacker labels it.
func (s *Store) commitLayer(ctx context.Context, sn snapshots.Snapshotter, dir, parent, cid string, diffID digest.Digest) error {
	lbl := map[string]string{snapshots.LabelSnapshotRef: cid, snapshots.LabelSnapshotDiffID: diffID.String()}
	if parent != "" {
		lbl["containerd.io/snapshot/parent-chain-id"] = parent
	}
	opt := snapshots.WithLabels(lbl)
	key := fmt.Sprintf(snapshots.UnpackKeyFormat, randomID(), cid)
	mounts, err := sn.Prepare(ctx, key, parent, opt)
	if errdefs.IsAlreadyExists(err) {
		return nil // prepared by a concurrent unpack of the same chain
	}
	if err != nil {
		return fmt.Errorf("prepare snapshot %s: %w", cid, classify(err))
	}
	committed := false
	defer func() {
		if !committed {
			_ = sn.Remove(context.WithoutCancel(ctx), key)
		}
	}()
	upper, err := upperDir(mounts, s.onepass.root)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", cid, err)
	}
	// The snapshot's upper directory is empty: rename(2) replaces an empty directory (os.Rename
	// refuses to).
	if err := unix.Rename(dir, upper); err != nil {
		return fmt.Errorf("snapshot %s: rename %s to %s: %w", cid, dir, upper, err)
	}
	if err := sn.Commit(ctx, cid, key, opt); err != nil {
		if errdefs.IsAlreadyExists(err) {
			return nil
		}
		return fmt.Errorf("commit snapshot %s: %w", cid, classify(err))
	}
	committed = true
	return nil
}

// upperDir is the directory a layer is extracted into for an active snapshot's mounts: the
// upper directory of an overlay, the source of a bind mount; below root.
func upperDir(mounts []mount.Mount, root string) (string, error) {
	if len(mounts) != 1 {
		return "", fmt.Errorf("%d mounts, want 1", len(mounts))
	}
	var dir string
	switch m := mounts[0]; m.Type {
	case "overlay":
		for _, o := range m.Options {
			if v, ok := strings.CutPrefix(o, "upperdir="); ok {
				dir = v
			}
		}
	case "bind":
		dir = m.Source
	}
	if dir == "" || !strings.HasPrefix(filepath.Clean(dir), filepath.Join(root, "snapshots")+"/") {
		return "", fmt.Errorf("mounts %v: no directory of the snapshotter to extract into", mounts)
	}
	return dir, nil
}

// sync writes the extracted files back to disk before any snapshot refers to them.
func (p *onePass) sync() error {
	f, err := os.Open(p.tmp)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("sync %s: %w", p.root, err)
	}
	return nil
}
