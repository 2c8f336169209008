package iso

import (
	"errors"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

// Stat is what FileInfo.Sys returns for the files of an FS.
type Stat struct {
	// UID, GID and Nlink come from the Rock Ridge PX entry (zero, zero and one without it).
	UID, GID, Nlink uint32
	// Record is the byte offset of the file's directory record inside the image.
	Record int64
	// Extents are where the file's bytes lie inside the image (empty for directories,
	// symbolic links and empty files).
	Extents []Extent
}

// Open opens the named file, following symbolic links inside the image. Regular files implement
// io.ReaderAt and io.Seeker; directories implement fs.ReadDirFile.
func (f *FS) Open(name string) (fs.File, error) {
	n, err := f.resolve("open", name, true)
	if err != nil {
		return nil, err
	}
	info := fileInfo{n: n, name: baseName(name)}
	if n.mode.IsDir() {
		return &dir{info: info}, nil
	}
	return &file{fsys: f, info: info}, nil
}

// Stat describes the named file, following symbolic links.
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	n, err := f.resolve("stat", name, true)
	if err != nil {
		return nil, err
	}
	return fileInfo{n: n, name: baseName(name)}, nil
}

// Lstat describes the named file without following a final symbolic link.
func (f *FS) Lstat(name string) (fs.FileInfo, error) {
	n, err := f.resolve("lstat", name, false)
	if err != nil {
		return nil, err
	}
	return fileInfo{n: n, name: baseName(name)}, nil
}

// ReadLink returns the target of the named symbolic link, as stored in the image.
func (f *FS) ReadLink(name string) (string, error) {
	n, err := f.resolve("readlink", name, false)
	if err != nil {
		return "", err
	}
	if n.mode.Type() != fs.ModeSymlink {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	return n.target, nil
}

// ReadDir lists the named directory, sorted by name.
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	n, err := f.resolve("readdir", name, true)
	if err != nil {
		return nil, err
	}
	if !n.mode.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a directory")}
	}
	return entries(n.children), nil
}

// ReadFile returns the contents of the named file.
func (f *FS) ReadFile(name string) ([]byte, error) {
	n, err := f.resolve("readfile", name, true)
	if err != nil {
		return nil, err
	}
	if n.mode.IsDir() {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: errors.New("is a directory")}
	}
	buf := make([]byte, n.size)
	if _, err := f.readFile(n, buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: err}
	}
	return buf, nil
}

// Extents reports where the named regular file's bytes lie inside the image, in file order,
// following symbolic links. Adjacent runs (the parts of a multi-extent file written one after the
// other) are merged into one. An empty file has no extents.
func (f *FS) Extents(name string) ([]Extent, error) {
	n, err := f.resolve("extents", name, true)
	if err != nil {
		return nil, err
	}
	if !n.mode.IsRegular() {
		return nil, &fs.PathError{Op: "extents", Path: name, Err: ErrNotRegular}
	}
	return slices.Clone(n.extents), nil
}

// Span reports where a regular file's bytes lie when they are one contiguous run of the image
// (also true for a multi-extent file whose extents are adjacent); ok is false otherwise. An empty
// file is a contiguous run of length 0 at offset 0.
func (f *FS) Span(name string) (offset, length int64, ok bool) {
	n, err := f.resolve("span", name, true)
	if err != nil || !n.mode.IsRegular() {
		return 0, 0, false
	}
	if len(n.extents) == 0 {
		return 0, 0, true
	}
	// addExtent merges adjacent runs, so a contiguous file has exactly one extent.
	if len(n.extents) != 1 {
		return 0, 0, false
	}
	return n.extents[0].Offset, n.extents[0].Length, true
}

// resolve finds the node of name, following symbolic links on the way and, when follow is set,
// a final one.
func (f *FS) resolve(op, name string, follow bool) (*node, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	hops := 0
	n, err := f.walk(f.root, name, follow, &hops)
	if err != nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	return n, nil
}

func (f *FS) walk(start *node, p string, follow bool, hops *int) (*node, error) {
	cur := start
	rest := p
	for rest != "" {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		switch c {
		case "", ".":
			continue
		case "..":
			cur = cur.parent
			continue
		}
		if !cur.mode.IsDir() {
			return nil, fs.ErrNotExist
		}
		child := lookup(cur, c)
		if child == nil {
			return nil, fs.ErrNotExist
		}
		if child.mode.Type() == fs.ModeSymlink && (follow || strings.Trim(rest, "/") != "") {
			*hops++
			if *hops > f.maxLinks {
				return nil, ErrTooManyLinks
			}
			base := cur
			if strings.HasPrefix(child.target, "/") {
				base = f.root
			}
			var err error
			if child, err = f.walk(base, child.target, true, hops); err != nil {
				return nil, err
			}
		}
		cur = child
	}
	return cur, nil
}

func lookup(dir *node, name string) *node {
	i, ok := slices.BinarySearchFunc(dir.children, name, func(n *node, name string) int {
		return strings.Compare(n.name, name)
	})
	if !ok {
		return nil
	}
	return dir.children[i]
}

func baseName(name string) string {
	if name == "." {
		return "."
	}
	return path.Base(name)
}

// readFile reads n's bytes at off into p, across its extents.
func (f *FS) readFile(n *node, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if off >= n.size {
		return 0, io.EOF
	}
	want := len(p)
	if int64(want) > n.size-off {
		p = p[:n.size-off]
	}
	done := 0
	var start int64
	for _, e := range n.extents {
		if len(p) == 0 {
			break
		}
		if off >= start+e.Length {
			start += e.Length
			continue
		}
		in := off - start
		chunk := p[:min(int64(len(p)), e.Length-in)]
		m, err := f.r.ReadAt(chunk, e.Offset+in)
		done += m
		if m < len(chunk) {
			if err == nil || errors.Is(err, io.EOF) {
				err = formatErr(ErrTruncated, e.Offset+in+int64(m), "file data ends early")
			}
			return done, err
		}
		p, off = p[m:], off+int64(m)
		start += e.Length
	}
	if done < want {
		return done, io.EOF
	}
	return done, nil
}

// fileInfo describes a node under the name it was asked by.
type fileInfo struct {
	n    *node
	name string
}

var _ fs.FileInfo = fileInfo{}

func (i fileInfo) Name() string       { return i.name }
func (i fileInfo) Size() int64        { return i.n.size }
func (i fileInfo) Mode() fs.FileMode  { return i.n.mode }
func (i fileInfo) ModTime() time.Time { return i.n.mtime }
func (i fileInfo) IsDir() bool        { return i.n.mode.IsDir() }
func (i fileInfo) Sys() any {
	return &Stat{UID: i.n.uid, GID: i.n.gid, Nlink: i.n.nlink, Record: i.n.record, Extents: slices.Clone(i.n.extents)}
}
func (i fileInfo) String() string { return fs.FormatFileInfo(i) }

func entries(nodes []*node) []fs.DirEntry {
	out := make([]fs.DirEntry, len(nodes))
	for i, n := range nodes {
		out[i] = fs.FileInfoToDirEntry(fileInfo{n: n, name: n.name})
	}
	return out
}

// file is an open regular file (or a special file, which reads as empty).
type file struct {
	fsys   *FS
	info   fileInfo
	off    int64
	closed bool
}

var (
	_ io.ReaderAt = (*file)(nil)
	_ io.Seeker   = (*file)(nil)
)

func (fl *file) Stat() (fs.FileInfo, error) { return fl.info, nil }

func (fl *file) Read(p []byte) (int, error) {
	if fl.closed {
		return 0, fs.ErrClosed
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, err := fl.fsys.readFile(fl.info.n, p, fl.off)
	fl.off += int64(n)
	if errors.Is(err, io.EOF) && n > 0 {
		err = nil
	}
	return n, err
}

// ReadAt reads len(p) bytes at off; it is safe for concurrent use.
func (fl *file) ReadAt(p []byte, off int64) (int, error) {
	if fl.closed {
		return 0, fs.ErrClosed
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "readat", Path: fl.info.name, Err: fs.ErrInvalid}
	}
	return fl.fsys.readFile(fl.info.n, p, off)
}

func (fl *file) Seek(offset int64, whence int) (int64, error) {
	if fl.closed {
		return 0, fs.ErrClosed
	}
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += fl.off
	case io.SeekEnd:
		offset += fl.info.n.size
	default:
		return 0, &fs.PathError{Op: "seek", Path: fl.info.name, Err: fs.ErrInvalid}
	}
	if offset < 0 {
		return 0, &fs.PathError{Op: "seek", Path: fl.info.name, Err: fs.ErrInvalid}
	}
	fl.off = offset
	return offset, nil
}

func (fl *file) Close() error {
	if fl.closed {
		return fs.ErrClosed
	}
	fl.closed = true
	return nil
}

// dir is an open directory.
type dir struct {
	info   fileInfo
	pos    int
	closed bool
}

var _ fs.ReadDirFile = (*dir)(nil)

func (d *dir) Stat() (fs.FileInfo, error) { return d.info, nil }

func (d *dir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.name, Err: errors.New("is a directory")}
}

func (d *dir) ReadDir(count int) ([]fs.DirEntry, error) {
	if d.closed {
		return nil, fs.ErrClosed
	}
	rest := d.info.n.children[d.pos:]
	if count > 0 {
		if len(rest) == 0 {
			return nil, io.EOF
		}
		rest = rest[:min(count, len(rest))]
	}
	d.pos += len(rest)
	return entries(rest), nil
}

func (d *dir) Close() error {
	if d.closed {
		return fs.ErrClosed
	}
	d.closed = true
	return nil
}
