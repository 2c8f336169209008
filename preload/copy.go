package preload

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// copyArchive places the compressed archive into the copy directory unless a file of the same
// size is there. It writes a hidden file and renames it, so a runtime never sees half an archive.
func (p *Preloader) copyArchive(ctx context.Context, s Step) error {
	dst := filepath.Join(p.copyDir, s.Name())
	src, rc, size, err := p.open(ctx, s.Archive.Archive)
	if err != nil {
		return &ArchiveError{Archive: s.Archive.Archive, Err: fmt.Errorf("copy to %s: %w", p.copyDir, err)}
	}
	defer rc.Close()
	if fi, err := os.Stat(dst); err == nil && size >= 0 && fi.Size() == size {
		return nil
	}
	fail := func(n int64, err error) error {
		return &ArchiveError{Archive: s.Archive.Archive, Source: src.Name(), Offset: n, Size: size,
			Err: fmt.Errorf("copy to %s: %w", p.copyDir, err)}
	}
	if err := os.MkdirAll(p.copyDir, 0o755); err != nil {
		return fail(0, err)
	}
	tmp, err := os.CreateTemp(p.copyDir, "."+s.Name()+".*")
	if err != nil {
		return fail(0, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing left to remove
	n, err := io.Copy(tmp, rc)
	if err == nil && size >= 0 && n != size {
		err = fmt.Errorf("read %d bytes, want %d", n, size)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return fail(n, err)
	}
	p.log.Info("archive copied", "archive", s.Name(), "dir", p.copyDir, "bytes", n)
	return nil
}
