package containerd

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/upgrade-repo/upgrade-repo/internal/pagecache"
)

// Direct ingest.
//
// Writing a blob through containerd's content service sends every byte over gRPC, one round trip
// per megabyte, and the daemon hashes it again (Debian's 1.6 at about 300 MB/s) before it writes
// it: the daemon, not the disk, sets the pace. When this process sees the daemon's content
// directory (it runs on the same host, as root, with the directory at the path the daemon
// reports), it writes each blob of an archive itself: into a temporary file beside the content
// store, hashing it on the way, synced, then hard-linked to blobs/sha256/<hex>, the path of a
// committed blob. It then commits the blob through the content service with its digest and size:
// containerd finds the blob already in its backend (its content sharing policy, shared by
// default) and records it in the namespace under the import's lease without reading it.
//
// What makes it safe:
//   - a blob appears under its digest only complete and synced, and only under the digest of
//     what was written (the link is made after the hash and the fsync);
//   - containerd references it in the namespace only at the commit, under the import's lease, so
//     images are still created only after the whole archive was read; a crash before the commit
//     leaves an unreferenced blob that containerd's garbage collector removes;
//   - when containerd does not find the blob at the commit (another mount namespace, a path that
//     differs, its garbage collector removed it first), the blob is sent through the content
//     service from the temporary file as before, and containerd hashes it;
//   - when its garbage collector removes the blob after containerd found it and before the commit
//     recorded it, the link is made again after the commit, from the temporary file.

// ingestDirName is the directory, inside the daemon's content root, of the temporary files of
// direct ingest. containerd itself only reads blobs/ and ingest/ there.
const ingestDirName = "upgrade-repo.ingest"

// staleIngestAge is how old a temporary file must be for an import to remove it as left by a
// process that died: older than any lease of an import.
const staleIngestAge = 2 * DefaultLeaseExpiry

// writebackChunk is how much of a blob is written before its write-back is started, so that the
// disk works while the archive is still being decoded and the fsync at the commit is short.
const writebackChunk = 8 << 20

// directIngest is the daemon's content directory as this process writes into it.
type directIngest struct {
	root string // the content store's root: blobs/ and ingest/ are below it
	tmp  string // root/ingestDirName

	mu       sync.Mutex
	disabled bool
}

// newDirectIngest prepares direct ingest into the content root the daemon reported, or returns
// an error saying why it is not possible from this process.
func newDirectIngest(root string) (*directIngest, error) {
	if root == "" || !filepath.IsAbs(root) {
		return nil, fmt.Errorf("content root %q: not an absolute path", root)
	}
	if fi, err := os.Stat(root); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("content root %s: not a directory", root)
	}
	d := &directIngest{root: root, tmp: filepath.Join(root, ingestDirName)}
	if err := os.MkdirAll(d.tmp, 0o700); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(root, "blobs", "sha256"), 0o755); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *directIngest) enabled() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.disabled
}

func (d *directIngest) disable() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.disabled = true
}

// removeStale removes the temporary files of imports that died long ago.
func (d *directIngest) removeStale() {
	ents, err := os.ReadDir(d.tmp)
	if err != nil {
		return
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleIngestAge {
			_ = os.Remove(filepath.Join(d.tmp, e.Name()))
		}
	}
}

// ingestStore is the daemon's content store with the writers of an archive's blobs replaced by
// direct ones. Everything else (reads, walks, the manifests an import writes) goes to the daemon.
type ingestStore struct {
	content.Store
	d      *directIngest
	st     *stager     // extracts layers while they are written (one-pass unpack), or nil
	onFail func(error) // called once when direct ingest turns out not to work
}

// archiveRefPrefix starts the references under which containerd's archive importer writes the
// files of the tar.
const archiveRefPrefix = "tar-"

// Writer implements content.Ingester.
func (c *ingestStore) Writer(ctx context.Context, opts ...content.WriterOpt) (content.Writer, error) {
	var wo content.WriterOpts
	for _, o := range opts {
		if err := o(&wo); err != nil {
			return nil, err
		}
	}
	if !strings.HasPrefix(wo.Ref, archiveRefPrefix) || wo.Desc.Digest != "" || !c.d.enabled() {
		return c.Store.Writer(ctx, opts...)
	}
	f, err := os.CreateTemp(c.d.tmp, "blob-")
	if err != nil {
		return nil, fmt.Errorf("direct ingest: %w", err)
	}
	now := time.Now()
	return &fileWriter{ctx: ctx, c: c, ref: wo.Ref, f: f, h: sha256.New(), started: now, updated: now}, nil
}

// fileWriter is a content.Writer into a temporary file of direct ingest.
type fileWriter struct {
	ctx context.Context
	c   *ingestStore
	ref string
	f   *os.File
	h   hash.Hash
	off int64
	// synced is where write-back was last started.
	synced           int64
	started, updated time.Time
	done             bool
	// ext extracts the blob while it is written, when it is a layer and one-pass unpack is on.
	ext *extraction
}

var _ content.Writer = (*fileWriter)(nil)

// Write implements io.Writer.
func (w *fileWriter) Write(p []byte) (int, error) { return w.write(p, nil) }

// write writes p; with release, p is the writer's own, handed to the blob's extraction (if any)
// as it is and given back through release once read, else copied for the extraction.
func (w *fileWriter) write(p []byte, release func()) (int, error) {
	n, err := w.f.Write(p)
	w.h.Write(p[:n])
	handed := false
	if w.c.st != nil {
		if w.off == 0 && w.ext == nil {
			w.ext = w.c.st.begin(w.ctx, p[:n], w.f.Name())
		}
		if w.ext != nil {
			w.ext.wrote(p[:n], release, w.off+int64(n))
			handed = release != nil
		}
	}
	if release != nil && !handed {
		release()
	}
	w.off += int64(n)
	w.updated = time.Now()
	if err != nil {
		return n, fmt.Errorf("direct ingest: %w", err)
	}
	if w.off-w.synced >= writebackChunk {
		w.writeback()
	}
	return n, nil
}

// writeback starts writing back what was written since the last call, without waiting for it:
// waiting for each chunk, as a bound on dirty pages, kept the disk's queue short and made the
// import a fifth slower. Errors are left to the fsync at the commit. It then drops from the page
// cache what earlier calls wrote back (dropBehind).
func (w *fileWriter) writeback() {
	_ = unix.SyncFileRange(int(w.f.Fd()), w.synced, w.off-w.synced, unix.SYNC_FILE_RANGE_WRITE)
	w.dropBehind(max(0, w.synced-dropTrail), w.synced)
	w.synced = w.off
}

// dropTrail is how far behind the last write-back started dropBehind tries again the pages that
// were still being written back at its previous calls.
const dropTrail = 4 * writebackChunk

// dropBehind drops the blob's pages in [from, to) from the page cache (see package pagecache), as
// far as a layer's extraction that follows the file has read them. Nothing else reads a blob's
// bytes again during the import (the extraction of a plain tar is handed the writer's buffers).
// Pages still dirty or being written back stay.
func (w *fileWriter) dropBehind(from, to int64) {
	if w.ext != nil && w.ext.follow != nil {
		to = min(to, w.ext.follow.read())
	}
	if to > from {
		pagecache.Drop(w.f, from, to-from)
	}
}

// ReadFrom implements io.ReaderFrom: it reads r in one goroutine and hashes and writes in this
// one, two buffers of copyBuffer bytes apart (more while a layer's extraction holds some), so
// that decompressing the archive overlaps with writing it.
func (w *fileWriter) ReadFrom(r io.Reader) (int64, error) {
	// With an extraction, pieces stay with it while it reads them: more buffers keep the
	// reader going.
	nbuf := 2
	if w.c.st != nil {
		nbuf += extractQueue
	}
	// The reader must be done with r before ReadFrom returns: the caller closes what r reads.
	ra := startReadAhead(r, nbuf, copyBuffer, nil)
	defer ra.close()
	var total int64
	for pc := range ra.pieces {
		n, err := w.write(pc.b, pc.release)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, ra.err
}

// copyBuffer is the size of each of ReadFrom's buffers.
const copyBuffer = 512 << 10

// Digest implements content.Writer.
func (w *fileWriter) Digest() digest.Digest { return digest.NewDigest(digest.SHA256, w.h) }

// Status implements content.Writer.
func (w *fileWriter) Status() (content.Status, error) {
	return content.Status{Ref: w.ref, Offset: w.off, StartedAt: w.started, UpdatedAt: w.updated}, nil
}

// Truncate implements content.Writer; only a reset to the start is supported.
func (w *fileWriter) Truncate(size int64) error {
	if size != 0 {
		return fmt.Errorf("direct ingest: truncate to %d: %w", size, errdefs.ErrNotImplemented)
	}
	if err := w.f.Truncate(0); err != nil {
		return err
	}
	if _, err := w.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	w.h.Reset()
	w.off, w.synced = 0, 0
	if w.ext != nil {
		w.ext.abort()
		w.ext = nil
	}
	return nil
}

// Close implements content.Writer: it removes the temporary file (a committed blob keeps its link).
func (w *fileWriter) Close() error {
	if w.ext != nil {
		w.ext.abort()
		w.ext = nil
	}
	_ = w.f.Close()
	return os.Remove(w.f.Name())
}

// Commit implements content.Writer: it syncs the file, links it under its digest and commits the
// blob through the daemon, which then holds it in the namespace under the context's lease.
func (w *fileWriter) Commit(ctx context.Context, size int64, expected digest.Digest, opts ...content.Opt) error {
	if w.done {
		return fmt.Errorf("direct ingest %s: already committed: %w", w.ref, errdefs.ErrFailedPrecondition)
	}
	if size > 0 && size != w.off {
		return fmt.Errorf("direct ingest %s: %d bytes written, commit of %d: %w", w.ref, w.off, size, errdefs.ErrFailedPrecondition)
	}
	dgst := w.Digest()
	if expected != "" && expected != dgst {
		return fmt.Errorf("direct ingest %s: digest %s, expected %s: %w", w.ref, dgst, expected, errdefs.ErrFailedPrecondition)
	}
	// The blob must be on disk before anything can reference it.
	if err := w.f.Chmod(0o444); err != nil {
		return fmt.Errorf("direct ingest: %w", err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("direct ingest: sync: %w", err)
	}
	w.dropBehind(0, w.off)
	dir := filepath.Join(w.c.d.root, "blobs", dgst.Algorithm().String())
	target := filepath.Join(dir, dgst.Encoded())
	switch err := os.Link(w.f.Name(), target); {
	case err == nil:
		if err := syncDir(dir); err != nil {
			return fmt.Errorf("direct ingest: %w", err)
		}
	case errors.Is(err, os.ErrExist):
		// The blob is there already (another archive holds the same layer); containerd checks
		// its size, and a file it does not know is streamed below like any other.
	default:
		return fmt.Errorf("direct ingest: link %s: %w", dgst, err)
	}
	if err := w.register(ctx, dgst, opts...); err != nil {
		return err
	}
	// containerd's garbage collector removes backend blobs that no namespace references: between
	// the link and the commit it may have removed this one. Now that the namespace references it,
	// the collector leaves it alone, so a missing link is made again from the temporary file; no
	// image references the blob before the import ends.
	if _, err := os.Stat(target); errors.Is(err, os.ErrNotExist) {
		if err := os.Link(w.f.Name(), target); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("direct ingest: link %s again: %w", dgst, err)
		}
		if err := syncDir(dir); err != nil {
			return fmt.Errorf("direct ingest: %w", err)
		}
	}
	w.done = true
	if w.ext != nil {
		w.c.st.finish(dgst, w.ext)
		w.ext = nil
	}
	return nil
}

// register commits the blob through the daemon: without sending it when containerd finds it in
// its backend, by streaming the temporary file otherwise.
func (w *fileWriter) register(ctx context.Context, dgst digest.Digest, opts ...content.Opt) error {
	desc := ocispec.Descriptor{Digest: dgst, Size: w.off}
	cw, err := content.OpenWriter(ctx, w.c.Store, content.WithRef("upgrade-repo-"+randomID()), content.WithDescriptor(desc))
	if errdefs.IsAlreadyExists(err) {
		return nil // in the namespace already, and now under the lease too
	}
	if err != nil {
		return fmt.Errorf("open writer for %s: %w", dgst, err)
	}
	defer cw.Close()
	st, err := cw.Status()
	if err != nil {
		return fmt.Errorf("status of %s: %w", dgst, err)
	}
	if st.Offset != w.off || w.off == 0 {
		// containerd does not see the blob: if it is still where this process put it, it never
		// will (another mount namespace or root), and the rest of the blobs are streamed.
		if _, serr := os.Stat(filepath.Join(w.c.d.root, "blobs", dgst.Algorithm().String(), dgst.Encoded())); serr == nil && w.off > 0 && w.c.d.enabled() {
			w.c.d.disable()
			w.c.onFail(fmt.Errorf("containerd does not see %s in %s", dgst, w.c.d.root))
		}
		if _, err := w.f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		return content.Copy(ctx, cw, w.f, w.off, dgst, opts...)
	}
	if err := cw.Commit(ctx, w.off, dgst, opts...); err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("commit %s: %w", dgst, err)
	}
	return nil
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
