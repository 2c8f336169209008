package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"time"

	"github.com/upgrade-repo/upgrade-repo/iso"
)

// Extracted counts what Extract wrote.
type Extracted struct {
	Files, Dirs, Links int
	Bytes              int64
}

// Extract writes the trees at paths of fsys (fs.FS paths; "." for everything) under dir, created
// when missing, with their modes and times. Nothing can be written outside dir: os.Root refuses
// every path that would leave it, through ".." or a symbolic link. Special files are skipped,
// each logged. A file that exists already is an error: nothing is overwritten.
func Extract(ctx context.Context, log *slog.Logger, fsys *iso.FS, dir string, paths []string) (Extracted, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Extracted{}, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Extracted{}, err
	}
	defer root.Close()
	x := &extractor{log: log, fsys: fsys, root: root, buf: make([]byte, 1<<20)}
	for _, p := range paths {
		if err := x.extract(ctx, p); err != nil {
			return x.counts(), fmt.Errorf("extract %s: %w", p, err)
		}
	}
	// Directories get their modes and times last: a read-only directory must be filled first,
	// and writing into a directory changes its time.
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if err := root.Chmod(d.name, chmodBits(d.mode)); err != nil {
			return x.counts(), fmt.Errorf("extract %s: %w", d.name, err)
		}
		if err := root.Chtimes(d.name, d.mtime, d.mtime); err != nil {
			return x.counts(), fmt.Errorf("extract %s: %w", d.name, err)
		}
	}
	return x.counts(), nil
}

// extractor writes files of an image under a root directory and counts what it wrote.
type extractor struct {
	log          *slog.Logger
	fsys         *iso.FS
	root         *os.Root
	buf          []byte
	files, links int
	bytes        int64
	dirs         []extractedDir
}

// extractedDir is a directory whose mode and times are set once everything under it is written.
type extractedDir struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
}

func (x *extractor) counts() Extracted {
	return Extracted{Files: x.files, Dirs: len(x.dirs), Links: x.links, Bytes: x.bytes}
}

func (x *extractor) extract(ctx context.Context, top string) error {
	if dir := path.Dir(top); top != "." && dir != "." {
		if err := x.root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return fs.WalkDir(x.fsys, top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		info, err := x.fsys.Lstat(p)
		if err != nil {
			return err
		}
		mode := info.Mode()
		switch {
		case mode.IsDir():
			if p != "." {
				if err := x.root.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
					return err
				}
			}
			x.dirs = append(x.dirs, extractedDir{name: p, mode: mode, mtime: info.ModTime()})
		case mode&fs.ModeSymlink != 0:
			target, err := x.fsys.ReadLink(p)
			if err != nil {
				return err
			}
			if err := x.root.Symlink(target, p); err != nil {
				return err
			}
			x.links++
		case mode.IsRegular():
			if err := x.file(ctx, p, info); err != nil {
				return err
			}
		default:
			x.log.Warn("skipping a special file", "path", p, "type", TypeName(mode))
		}
		return nil
	})
}

func (x *extractor) file(ctx context.Context, p string, info fs.FileInfo) error {
	src, err := x.fsys.Open(p)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := x.root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	n, err := io.CopyBuffer(dst, Reader{Ctx: ctx, R: src}, x.buf)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	x.files++
	x.bytes += n
	if err := x.root.Chmod(p, chmodBits(info.Mode())); err != nil {
		return err
	}
	return x.root.Chtimes(p, info.ModTime(), info.ModTime())
}

// chmodBits keeps the permission and setuid, setgid and sticky bits of m.
func chmodBits(m fs.FileMode) fs.FileMode {
	return m & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// Write says, for people, what Extract wrote into dir.
func (n Extracted) Write(w io.Writer, dir string) {
	fmt.Fprintf(w, "extracted %d files (%d bytes), %d directories, %d symlinks into %s\n",
		n.Files, n.Bytes, n.Dirs, n.Links, dir)
}
