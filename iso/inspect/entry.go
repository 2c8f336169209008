package inspect

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/upgrade-repo/upgrade-repo/iso"
)

// Entry is the structured description of one file, as ls -o json and stat -o json print it.
type Entry struct {
	Path    string       `json:"path"`
	Type    string       `json:"type"`
	Mode    string       `json:"mode"`
	Perm    string       `json:"perm"`
	Size    int64        `json:"size"`
	Links   uint32       `json:"links"`
	UID     uint32       `json:"uid"`
	GID     uint32       `json:"gid"`
	ModTime time.Time    `json:"modTime"`
	Target  string       `json:"target,omitempty"`
	Extents []iso.Extent `json:"extents,omitempty"`
}

// Describe returns the Entry of the file at p of fsys, whose Lstat is info.
func Describe(fsys *iso.FS, p string, info fs.FileInfo) Entry {
	st, _ := info.Sys().(*iso.Stat)
	if st == nil {
		st = &iso.Stat{}
	}
	e := Entry{
		Path: Show(p), Type: TypeName(info.Mode()), Mode: ModeString(info.Mode()),
		Perm: fmt.Sprintf("%04o", PosixPerm(info.Mode())),
		Size: info.Size(), Links: st.Nlink, UID: st.UID, GID: st.GID, ModTime: info.ModTime(), Extents: st.Extents,
	}
	if info.Mode().Type() == fs.ModeSymlink {
		e.Target, _ = fsys.ReadLink(p)
	}
	return e
}

// List describes target: the file itself when it is not a directory (dir false), else its
// entries, and with recursive everything under it.
func List(fsys *iso.FS, target string, recursive bool) (list []Entry, dir bool, err error) {
	info, err := fsys.Stat(target)
	if err != nil {
		return nil, false, err
	}
	if !info.IsDir() {
		linfo, err := fsys.Lstat(target)
		if err != nil {
			return nil, false, err
		}
		return []Entry{Describe(fsys, target, linfo)}, false, nil
	}
	list = []Entry{}
	if recursive {
		err = fs.WalkDir(fsys, target, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == target {
				return nil
			}
			i, err := d.Info()
			if err != nil {
				return err
			}
			list = append(list, Describe(fsys, p, i))
			return nil
		})
		return list, true, err
	}
	ents, err := fsys.ReadDir(target)
	if err != nil {
		return nil, true, err
	}
	for _, d := range ents {
		i, err := d.Info()
		if err != nil {
			return nil, true, err
		}
		list = append(list, Describe(fsys, path.Join(target, d.Name()), i))
	}
	return list, true, nil
}

// LongLine writes e the way ls -l does, under name.
func LongLine(w io.Writer, e Entry, name string) {
	line := fmt.Sprintf("%s %3d %5d %5d %12d %s %s", e.Mode, e.Links, e.UID, e.GID, e.Size,
		e.ModTime.UTC().Format("2006-01-02 15:04:05"), name)
	if e.Type == "symlink" {
		line += " -> " + e.Target
	}
	fmt.Fprintln(w, line)
}

// PosixPerm returns m's permission bits with setuid, setgid and sticky as chmod writes them.
func PosixPerm(m fs.FileMode) uint32 {
	p := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		p |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		p |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		p |= 0o1000
	}
	return p
}

// TypeName names the type of m: dir, symlink, char-device, block-device, fifo, socket or file.
func TypeName(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeCharDevice != 0:
		return "char-device"
	case m&fs.ModeDevice != 0:
		return "block-device"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	default:
		return "file"
	}
}

// ModeString formats a mode the way ls -l does.
func ModeString(m fs.FileMode) string {
	b := []byte("----------")
	b[0] = map[string]byte{"dir": 'd', "symlink": 'l', "char-device": 'c', "block-device": 'b', "fifo": 'p', "socket": 's', "file": '-'}[TypeName(m)]
	const rwx = "rwxrwxrwx"
	for i := range 9 {
		if m&(1<<(8-i)) != 0 {
			b[i+1] = rwx[i]
		}
	}
	for _, s := range []struct {
		pos          int
		bit          fs.FileMode
		lower, upper byte
	}{{3, fs.ModeSetuid, 's', 'S'}, {6, fs.ModeSetgid, 's', 'S'}, {9, fs.ModeSticky, 't', 'T'}} {
		if m&s.bit != 0 {
			if b[s.pos] == '-' {
				b[s.pos] = s.upper
			} else {
				b[s.pos] = s.lower
			}
		}
	}
	return string(b)
}

// Show turns an fs.FS path into the absolute path users see.
func Show(p string) string {
	if p == "." {
		return "/"
	}
	return "/" + p
}

// CleanPath turns a user's path ("/bundle/", "bundle", "/") into an fs.FS path.
func CleanPath(p string) (string, error) {
	clean := strings.TrimPrefix(path.Clean("/"+p), "/")
	if clean == "" {
		clean = "."
	}
	if !fs.ValidPath(clean) {
		return "", fmt.Errorf("invalid path %q", p)
	}
	return clean, nil
}

// Reader stops a copy when its context ends. It holds a context because io.Reader has no place
// for one; it lives only as long as the copy it serves.
type Reader struct {
	Ctx context.Context
	R   io.Reader
}

// Read implements io.Reader.
func (c Reader) Read(p []byte) (int, error) {
	if err := c.Ctx.Err(); err != nil {
		return 0, err
	}
	return c.R.Read(p)
}

// WriteList writes list, what List returned of a directory (dir) or a file, as ls does: names
// relative to the directory, or paths with recursive or a file; with long, as ls -l (LongLine).
func WriteList(w io.Writer, list []Entry, dir, recursive, long bool) {
	for _, e := range list {
		name := path.Base(e.Path)
		if recursive || !dir {
			name = e.Path
		}
		if long {
			LongLine(w, e, name)
		} else {
			fmt.Fprintln(w, name)
		}
	}
}

// WriteStat writes e, the Entry of the file at p of fsys, as stat does: one "name: value" line
// each, an extent a line, and a regular file's contiguous span in the image when it has one.
func WriteStat(w io.Writer, fsys *iso.FS, p string, e Entry) {
	fmt.Fprintf(w, "path:     %s\ntype:     %s\nmode:     %s (%s)\nsize:     %d\nlinks:    %d\nowner:    %d:%d\nmodified: %s\n",
		e.Path, e.Type, e.Mode, e.Perm, e.Size, e.Links, e.UID, e.GID, e.ModTime.Format(time.RFC3339))
	if e.Target != "" {
		fmt.Fprintf(w, "target:   %s\n", e.Target)
	}
	for i, x := range e.Extents {
		fmt.Fprintf(w, "extent %d: offset %d length %d\n", i, x.Offset, x.Length)
	}
	if e.Type == "file" {
		if off, n, ok := fsys.Span(p); ok && n > 0 {
			fmt.Fprintf(w, "span:     offset %d length %d (contiguous)\n", off, n)
		}
	}
}
