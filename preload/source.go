package preload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
)

// ErrNotFound is returned by a Source that does not hold the archive asked for; preload then asks
// the next source.
var ErrNotFound = errors.New("archive not found")

// Source supplies the compressed bytes of the release's image archives. The sources of a preload
// are tried in order (the ISO on this node, then peers, then the repo Service) for each archive.
type Source interface {
	// Name identifies the source in logs and statuses, such as "iso" or "repo".
	Name() string
	// Open returns the archive at path (an fs.FS path from the release's root, such as
	// bundle/harvester/images/x.tar.zst) from byte offset onwards, and the archive's total size in
	// bytes, or -1 when unknown. It returns an error matching ErrNotFound when the source does not
	// hold the archive. The caller closes the reader. Open is safe for concurrent use; a read
	// error that is not io.EOF makes preload reopen the archive at the offset it reached.
	Open(ctx context.Context, path string, offset int64) (io.ReadCloser, int64, error)
}

// FSSource reads archives from a file system, typically the release ISO opened on this node.
type FSSource struct {
	name string
	fsys fs.FS
}

var _ Source = (*FSSource)(nil)

// NewFSSource returns a Source over fsys, named name in logs and statuses.
func NewFSSource(name string, fsys fs.FS) *FSSource { return &FSSource{name: name, fsys: fsys} }

// Name implements Source.
func (s *FSSource) Name() string { return s.name }

// Open implements Source. Files that implement io.Seeker are positioned by seeking, others by
// reading and discarding up to offset.
func (s *FSSource) Open(_ context.Context, path string, offset int64) (io.ReadCloser, int64, error) {
	f, err := s.fsys.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, 0, fmt.Errorf("%s: %w", path, ErrNotFound)
		}
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, 0, err
	}
	if fi.IsDir() {
		_ = f.Close()
		return nil, 0, fmt.Errorf("%s is a directory: %w", path, ErrNotFound)
	}
	if offset > 0 {
		if sk, ok := f.(io.Seeker); ok {
			_, err = sk.Seek(offset, io.SeekStart)
		} else {
			_, err = io.CopyN(io.Discard, f, offset)
		}
		if err != nil {
			_ = f.Close()
			return nil, 0, fmt.Errorf("%s: skip to offset %d: %w", path, offset, err)
		}
	}
	return f, fi.Size(), nil
}
