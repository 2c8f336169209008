package containerd

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containerd/containerd/v2/pkg/archive"
	"golang.org/x/sys/unix"
)

// Applying a layer with its large files written ahead.
//
// containerd's applier (archive.Apply) writes a file's content 32 KiB per write: on a layer of
// large files, a third more system time than the same bytes in 1 MiB writes, and a one-pass
// import is CPU-bound while it extracts. applyLayer keeps that applier for everything it
// decides (where an entry lands as it resolves the path, owner, mode, xattrs, times, whiteouts,
// entries that replace others) and writes only the content of large regular files itself:
// each is written ahead into a file of its own at the top of the layer's directory, and the
// applier is handed, in the entry's place, a hard link to that file carrying the entry's
// header. It links it where the file would have been and sets its metadata as it would have.
// The files written ahead are unlinked once it is done; a failed extraction's directory is
// removed whole by the stager.

// aheadMin is the size from which a regular file's content is written ahead.
const aheadMin = 1 << 20

// aheadBuffer is the size of the writes of a file written ahead.
const aheadBuffer = 1 << 20

// feedBuffer is the size of the writes into the applier's pipe.
const feedBuffer = 256 << 10

// aheadPrefix starts the names of the files written ahead, at the top of a layer's directory.
const aheadPrefix = ".upgrade-repo-ahead-"

// aclDefault is the PAX record of a directory's default ACL: files created in that directory
// inherit it, and a file written ahead, created at the top, would not.
const aclDefault = "SCHILY.xattr.system.posix_acl_default"

var aheadPool = sync.Pool{New: func() any { b := make([]byte, aheadBuffer); return &b }}

// layerFacts is what applying a layer found out about it.
type layerFacts struct {
	// whiteouts: the layer holds a whiteout or an opaque directory's marker, which the overlay
	// applier turns into a device or an xattr, and containerd's applier, for a layer without
	// parents (a bind mount), into removals of what lies below.
	whiteouts bool
}

// applyLayer applies the layer tar read from r to the empty directory dir as archive.Apply with
// overlay whiteouts does, writing large files' content ahead (see above). It reads r up to the
// tar's end.
func applyLayer(ctx context.Context, dir string, r io.Reader) (layerFacts, error) {
	var facts layerFacts
	_, err := applyAheadFacts(ctx, dir, r, aheadMin, &facts)
	return facts, err
}

// applyAhead is applyLayer writing ahead the files of at least minSize bytes; it returns how
// many it wrote ahead.
func applyAhead(ctx context.Context, dir string, r io.Reader, minSize int64) (int, error) {
	return applyAheadFacts(ctx, dir, r, minSize, &layerFacts{})
}

// applyAheadFacts is applyAhead recording in facts what it finds in the layer.
func applyAheadFacts(ctx context.Context, dir string, r io.Reader, minSize int64, facts *layerFacts) (int, error) {
	pr, pw := io.Pipe()
	applied := make(chan error, 1)
	go func() {
		// Buffered on both ends: each read of a pipe is a hand-over between two goroutines, and
		// the applier reads a header 512 bytes at a time.
		_, err := archive.Apply(ctx, dir, bufio.NewReaderSize(pr, feedBuffer), archive.WithConvertWhiteout(archive.OverlayConvertWhiteout))
		// What the applier did not read fails the feeder's writes instead of blocking them.
		_ = pr.CloseWithError(errApplierEnded)
		applied <- err
	}()
	ahead, ferr := feedLayer(ctx, dir, r, pw, minSize, facts)
	_ = pw.CloseWithError(ferr)
	aerr := <-applied
	for _, name := range ahead {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !os.IsNotExist(err) && aerr == nil {
			aerr = fmt.Errorf("remove a file written ahead: %w", err)
		}
	}
	switch {
	case ferr != nil && !errors.Is(ferr, errApplierEnded):
		return len(ahead), ferr
	case ferr != nil && aerr == nil:
		return len(ahead), errors.New("the applier ended before the layer did")
	}
	return len(ahead), aerr
}

// errApplierEnded is what the feeder's writes return once the applier returned.
var errApplierEnded = errors.New("the applier ended")

// feedLayer reads the tar r and writes it to w for the applier, each regular file of at least
// minSize bytes written ahead into dir and replaced by a hard link to it, and records in facts
// what it sees. It returns the names, in dir, of the files it wrote ahead, whatever else it
// returns.
func feedLayer(ctx context.Context, dir string, r io.Reader, w io.Writer, minSize int64, facts *layerFacts) (ahead []string, err error) {
	tr := tar.NewReader(r)
	// Buffered, as the applier's end is (see applyAhead): a pipe read or written per header and
	// per small file made a layer of many small files 1.7x as slow to apply.
	bw := bufio.NewWriterSize(w, feedBuffer)
	tw := tar.NewWriter(bw)
	prefix := aheadPrefix + randomID() + "-"
	useAhead := true
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if err := tw.Close(); err != nil {
				return ahead, err
			}
			return ahead, bw.Flush()
		}
		if err != nil {
			return ahead, err
		}
		if sparse(hdr) {
			// Its holes come out of the tar reader as zeros, as many as its header claims, and
			// are written before the blob's digest is known: a damaged header could fill the
			// disk. containerd's unpack checks the digest first.
			return ahead, fmt.Errorf("%s: a sparse file, left to containerd's unpack", hdr.Name)
		}
		if !applied(hdr.Typeflag) {
			// A type the applier refuses anyway, and the tar writer might not write again as
			// it was read.
			return ahead, fmt.Errorf("%s: unhandled tar header type %d", hdr.Name, hdr.Typeflag)
		}
		if strings.HasPrefix(path.Base(hdr.Name), ".wh.") {
			facts.whiteouts = true
		}
		if _, ok := hdr.PAXRecords[aclDefault]; ok {
			useAhead = false
		}
		if useAhead && writesAhead(hdr, minSize) {
			// The applier goes on with what came before while the file is written.
			if err := bw.Flush(); err != nil {
				return ahead, err
			}
			name := fmt.Sprintf("%s%d", prefix, len(ahead))
			ahead = append(ahead, name)
			if err := writeAhead(ctx, filepath.Join(dir, name), tr); err != nil {
				return ahead, fmt.Errorf("%s: %w", hdr.Name, err)
			}
			link := *hdr
			link.Typeflag, link.Linkname, link.Size = tar.TypeLink, "/"+name, 0
			hdr = &link
		}
		// PAX encodes every field the applier reads, access times and sub-second times included.
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return ahead, fmt.Errorf("%s: %w", hdr.Name, err)
		}
		if hdr.Size > 0 {
			if _, err := io.Copy(tw, tr); err != nil {
				return ahead, err
			}
		}
	}
}

// applied reports whether containerd's applier handles entries of type typ.
func applied(typ byte) bool {
	switch typ {
	//nolint:staticcheck // TypeRegA is deprecated, and still found in archives.
	case tar.TypeReg, tar.TypeRegA, tar.TypeDir, tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock,
		tar.TypeFifo, tar.TypeXGlobalHeader:
		return true
	}
	return false
}

// sparse reports whether hdr is a sparse file's, in GNU's format or in PAX.
func sparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// writesAhead reports whether hdr's content is written ahead: a regular file of at least
// minSize bytes, not a whiteout.
func writesAhead(hdr *tar.Header, minSize int64) bool {
	//nolint:staticcheck // TypeRegA is deprecated, and still found in archives.
	regular := hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeRegA
	return regular && hdr.Size >= minSize && !strings.HasPrefix(path.Base(hdr.Name), ".wh.")
}

// writeAhead writes what r holds into a new file at p.
func writeAhead(ctx context.Context, p string, r io.Reader) (err error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	bp := aheadPool.Get().(*[]byte)
	defer aheadPool.Put(bp)
	buf := *bp
	// Write-back is started every writebackChunk bytes, without waiting for it, as the blob
	// writer does: the disk writes the file while the rest is read, and the sync before the
	// snapshots are committed finds little left (the node bench: 0.1 s less of 1.7).
	var off, started int64
	for {
		n, rerr := fill(r, buf)
		if n > 0 {
			if _, err := f.Write(buf[:n]); err != nil {
				return err
			}
			off += int64(n)
			if off-started >= writebackChunk {
				_ = unix.SyncFileRange(int(f.Fd()), started, off-started, unix.SYNC_FILE_RANGE_WRITE)
				started = off
			}
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return rerr
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// fill reads r into buf until buf is full or r returns an error, which it returns as it is
// (io.EOF included). Not io.ReadFull, which turns a file's last short read into
// io.ErrUnexpectedEOF, the error the tar reader gives for an archive cut short.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
