package main

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/upgrade-repo/upgrade-repo/iso"
)

const isoUsage = `usage: upgrade-repo iso <command> [flags] ISO [...]

  ls [-R] [-l] [-o json] ISO [PATH]   list a directory (or one file)
  stat [-o json] ISO PATH             describe a file: type, mode, size, owner, time, extents
  cat ISO PATH                        write a file's bytes to stdout
  info [-o json] ISO                  volume id, size, trees and extensions, boot entries
  extract ISO DIR [PATH...]           extract the whole tree (or the PATHs) under DIR
  verify [-o json] [--checksum sha512:HEX] ISO
                                      read every file, check every extent lies inside the image
                                      and, with --checksum, the digest of the whole image
`

// runISO inspects an ISO image without mounting it.
func runISO(ctx context.Context, a *app, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(a.stdout, isoUsage)
		if len(args) == 0 {
			return fmt.Errorf("%w: iso needs a command", errUsage)
		}
		return nil
	}
	cmds := map[string]func(context.Context, *app, []string) error{
		"ls": isoLs, "stat": isoStat, "cat": isoCat, "info": isoInfo, "extract": isoExtract, "verify": isoVerify,
	}
	run, ok := cmds[args[0]]
	if !ok {
		fmt.Fprint(a.stderr, isoUsage)
		return fmt.Errorf("%w: unknown iso command %q", errUsage, args[0])
	}
	return run(ctx, a, args[1:])
}

// isoFlags parses flags that may come before, between or after the positional arguments.
func isoFlags(fset *flag.FlagSet, args []string, least, most int) ([]string, error) {
	var pos []string
	for {
		if err := fset.Parse(args); err != nil {
			return nil, fmt.Errorf("%w: iso %s: %w", errUsage, fset.Name(), err)
		}
		args = fset.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) < least || (most >= 0 && len(pos) > most) {
		return nil, fmt.Errorf("%w: iso %s: wrong number of arguments (see upgrade-repo iso help)", errUsage, fset.Name())
	}
	return pos, nil
}

func isoFlagSet(a *app, name string) (*flag.FlagSet, *string) {
	fset := flag.NewFlagSet(name, flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	out := fset.String("o", "text", "output format: text or json")
	return fset, out
}

func isoCheckFormat(out string) error {
	if out != "text" && out != "json" {
		return fmt.Errorf("%w: output format %q (want text or json)", errUsage, out)
	}
	return nil
}

// isoImage is an opened image file.
type isoImage struct {
	file *os.File
	fsys *iso.FS
	size int64
}

func isoOpen(name string) (*isoImage, error) {
	fsys, f, err := iso.OpenFile(name)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &isoImage{file: f, fsys: fsys, size: st.Size()}, nil
}

func (im *isoImage) Close() error { return im.file.Close() }

// isoOpenPath checks the user's path p, then opens the image file name.
func isoOpenPath(name, p string) (*isoImage, string, error) {
	clean, err := isoPath(p)
	if err != nil {
		return nil, "", err
	}
	im, err := isoOpen(name)
	if err != nil {
		return nil, "", err
	}
	return im, clean, nil
}

// isoPath turns a user's path ("/bundle/", "bundle", "/") into an fs.FS path.
func isoPath(p string) (string, error) {
	clean := strings.TrimPrefix(path.Clean("/"+p), "/")
	if clean == "" {
		clean = "."
	}
	if !fs.ValidPath(clean) {
		return "", fmt.Errorf("%w: invalid path %q", errUsage, p)
	}
	return clean, nil
}

// isoEntry is the structured description of one file, as ls -o json and stat -o json print it.
type isoEntry struct {
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

func isoDescribe(fsys *iso.FS, p string, info fs.FileInfo) isoEntry {
	st, _ := info.Sys().(*iso.Stat)
	if st == nil {
		st = &iso.Stat{}
	}
	e := isoEntry{
		Path: isoShow(p), Type: isoType(info.Mode()), Mode: isoModeString(info.Mode()),
		Perm: fmt.Sprintf("%04o", isoPosixPerm(info.Mode())),
		Size: info.Size(), Links: st.Nlink, UID: st.UID, GID: st.GID, ModTime: info.ModTime(), Extents: st.Extents,
	}
	if info.Mode().Type() == fs.ModeSymlink {
		e.Target, _ = fsys.ReadLink(p)
	}
	return e
}

func isoPosixPerm(m fs.FileMode) uint32 {
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

func isoType(m fs.FileMode) string {
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

// isoModeString formats a mode the way ls -l does.
func isoModeString(m fs.FileMode) string {
	b := []byte("----------")
	b[0] = map[string]byte{"dir": 'd', "symlink": 'l', "char-device": 'c', "block-device": 'b', "fifo": 'p', "socket": 's', "file": '-'}[isoType(m)]
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

func isoLongLine(w io.Writer, e isoEntry, name string) {
	line := fmt.Sprintf("%s %3d %5d %5d %12d %s %s", e.Mode, e.Links, e.UID, e.GID, e.Size,
		e.ModTime.UTC().Format("2006-01-02 15:04:05"), name)
	if e.Type == "symlink" {
		line += " -> " + e.Target
	}
	fmt.Fprintln(w, line)
}

func isoLs(_ context.Context, a *app, args []string) error {
	fset, out := isoFlagSet(a, "ls")
	recursive := fset.Bool("R", false, "list subdirectories recursively")
	long := fset.Bool("l", false, "long listing: mode, links, owner, size, time, name")
	pos, err := isoFlags(fset, args, 1, 2)
	if err != nil {
		return err
	}
	if err := isoCheckFormat(*out); err != nil {
		return err
	}
	target := "."
	if len(pos) == 2 {
		if target, err = isoPath(pos[1]); err != nil {
			return err
		}
	}
	im, err := isoOpen(pos[0])
	if err != nil {
		return err
	}
	defer im.Close()
	fsys := im.fsys

	var list []isoEntry
	info, err := fsys.Stat(target)
	if err != nil {
		return fmt.Errorf("ls %s: %w", pos[0], err)
	}
	if !info.IsDir() {
		linfo, err := fsys.Lstat(target)
		if err != nil {
			return fmt.Errorf("ls %s: %w", pos[0], err)
		}
		list = append(list, isoDescribe(fsys, target, linfo))
	} else if *recursive {
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
			list = append(list, isoDescribe(fsys, p, i))
			return nil
		})
		if err != nil {
			return fmt.Errorf("ls %s: %w", pos[0], err)
		}
	} else {
		ents, err := fsys.ReadDir(target)
		if err != nil {
			return fmt.Errorf("ls %s: %w", pos[0], err)
		}
		for _, d := range ents {
			i, err := d.Info()
			if err != nil {
				return fmt.Errorf("ls %s: %w", pos[0], err)
			}
			list = append(list, isoDescribe(fsys, path.Join(target, d.Name()), i))
		}
	}
	if *out == "json" {
		if list == nil {
			list = []isoEntry{}
		}
		return isoJSON(a.stdout, list)
	}
	for _, e := range list {
		name := path.Base(e.Path)
		if *recursive || !info.IsDir() {
			name = e.Path
		}
		if *long {
			isoLongLine(a.stdout, e, name)
		} else {
			fmt.Fprintln(a.stdout, name)
		}
	}
	return nil
}

func isoJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func isoStat(_ context.Context, a *app, args []string) error {
	fset, out := isoFlagSet(a, "stat")
	pos, err := isoFlags(fset, args, 2, 2)
	if err != nil {
		return err
	}
	if err := isoCheckFormat(*out); err != nil {
		return err
	}
	im, p, err := isoOpenPath(pos[0], pos[1])
	if err != nil {
		return err
	}
	defer im.Close()
	info, err := im.fsys.Lstat(p)
	if err != nil {
		return fmt.Errorf("stat %s: %w", pos[0], err)
	}
	e := isoDescribe(im.fsys, p, info)
	if *out == "json" {
		return isoJSON(a.stdout, e)
	}
	w := a.stdout
	fmt.Fprintf(w, "path:     %s\ntype:     %s\nmode:     %s (%s)\nsize:     %d\nlinks:    %d\nowner:    %d:%d\nmodified: %s\n",
		e.Path, e.Type, e.Mode, e.Perm, e.Size, e.Links, e.UID, e.GID, e.ModTime.Format(time.RFC3339))
	if e.Target != "" {
		fmt.Fprintf(w, "target:   %s\n", e.Target)
	}
	for i, x := range e.Extents {
		fmt.Fprintf(w, "extent %d: offset %d length %d\n", i, x.Offset, x.Length)
	}
	if e.Type == "file" {
		if off, n, ok := im.fsys.Span(p); ok && n > 0 {
			fmt.Fprintf(w, "span:     offset %d length %d (contiguous)\n", off, n)
		}
	}
	return nil
}

// isoCtxReader stops a copy when the context ends. It holds a context because io.Reader has no
// place for one; it lives only as long as the copy it serves.
type isoCtxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c isoCtxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func isoCat(ctx context.Context, a *app, args []string) error {
	fset := flag.NewFlagSet("cat", flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	pos, err := isoFlags(fset, args, 2, 2)
	if err != nil {
		return err
	}
	im, p, err := isoOpenPath(pos[0], pos[1])
	if err != nil {
		return err
	}
	defer im.Close()
	f, err := im.fsys.Open(p)
	if err != nil {
		return fmt.Errorf("cat %s: %w", pos[0], err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return fmt.Errorf("cat %s: is a directory", pos[1])
	}
	if _, err := io.Copy(a.stdout, isoCtxReader{ctx: ctx, r: f}); err != nil {
		return fmt.Errorf("cat %s: %w", pos[1], err)
	}
	return nil
}

func isoInfo(_ context.Context, a *app, args []string) error {
	fset, out := isoFlagSet(a, "info")
	pos, err := isoFlags(fset, args, 1, 1)
	if err != nil {
		return err
	}
	if err := isoCheckFormat(*out); err != nil {
		return err
	}
	im, err := isoOpen(pos[0])
	if err != nil {
		return err
	}
	defer im.Close()
	info := im.fsys.Info()
	if *out == "json" {
		return isoJSON(a.stdout, struct {
			iso.VolumeInfo
			Entries int `json:"entries"`
		}{info, im.fsys.Entries()})
	}
	var trees []string
	if info.Primary {
		trees = append(trees, "primary")
	}
	if info.Joliet {
		trees = append(trees, "joliet")
	}
	if info.RockRidge {
		trees = append(trees, "rockridge")
	}
	w := a.stdout
	fmt.Fprintf(w, "volume id:   %s\n", info.VolumeID)
	for _, kv := range [][2]string{{"volume set:", info.VolumeSetID}, {"publisher:", info.Publisher},
		{"preparer:", info.Preparer}, {"application:", info.Application}, {"system:", info.System}} {
		if kv[1] != "" {
			fmt.Fprintf(w, "%-12s %s\n", kv[0], kv[1])
		}
	}
	fmt.Fprintf(w, "size:        %d bytes (image %d bytes)\n", info.Size, info.ImageSize)
	if !info.Created.IsZero() {
		fmt.Fprintf(w, "created:     %s\n", info.Created.Format(time.RFC3339))
	}
	if !info.Modified.IsZero() {
		fmt.Fprintf(w, "modified:    %s\n", info.Modified.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "trees:       %s (reading %s)\n", strings.Join(trees, ", "), info.Tree)
	if info.RockRidgeID != "" {
		fmt.Fprintf(w, "rock ridge:  %s\n", info.RockRidgeID)
	}
	fmt.Fprintf(w, "entries:     %d\n", im.fsys.Entries())
	fmt.Fprintf(w, "hybrid:      mbr=%t gpt=%t\n", info.MBR, info.GPT)
	if info.BootCatalog != 0 {
		fmt.Fprintf(w, "boot catalog at byte %d\n", info.BootCatalog)
	}
	for i, b := range info.Boot {
		fmt.Fprintf(w, "boot entry %d: platform %s, bootable %t, %s, load segment %#x, %d sectors at byte %d\n",
			i, b.Platform, b.Bootable, b.Emulation, b.LoadSegment, b.SectorCount, b.Offset)
	}
	return nil
}

// isoVerifyReport is what verify finds.
type isoVerifyReport struct {
	Files    int    `json:"files"`
	Dirs     int    `json:"dirs"`
	Links    int    `json:"links"`
	Bytes    int64  `json:"bytes"`
	Extents  int    `json:"extents"`
	Checksum string `json:"checksum,omitempty"`
	OK       bool   `json:"ok"`
}

func isoVerify(ctx context.Context, a *app, args []string) error {
	fset, out := isoFlagSet(a, "verify")
	sum := fset.String("checksum", "", "expected digest of the whole image, sha512:HEX or sha256:HEX")
	pos, err := isoFlags(fset, args, 1, 1)
	if err != nil {
		return err
	}
	if err := isoCheckFormat(*out); err != nil {
		return err
	}
	var (
		newHash func() hash.Hash
		want    []byte
	)
	if *sum != "" {
		algo, hexd, ok := strings.Cut(*sum, ":")
		switch {
		case ok && algo == "sha512":
			newHash = sha512.New
		case ok && algo == "sha256":
			newHash = sha256.New
		default:
			return fmt.Errorf("%w: --checksum %q: want sha512:HEX or sha256:HEX", errUsage, *sum)
		}
		if want, err = hex.DecodeString(hexd); err != nil || len(want) != newHash().Size() {
			return fmt.Errorf("%w: --checksum %q: not a %s digest in hex", errUsage, *sum, algo)
		}
	}
	im, err := isoOpen(pos[0])
	if err != nil {
		return err
	}
	defer im.Close()
	fsys := im.fsys
	var rep isoVerifyReport
	buf := make([]byte, 1<<20)
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		switch {
		case d.IsDir():
			rep.Dirs++
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			rep.Links++
			return nil
		case !d.Type().IsRegular():
			return nil
		}
		rep.Files++
		exts, err := fsys.Extents(p)
		if err != nil {
			return err
		}
		var total int64
		for _, x := range exts {
			if x.Offset < 0 || x.Length < 0 || x.Offset+x.Length > im.size {
				return fmt.Errorf("%s: extent at byte %d of %d bytes lies outside the image of %d bytes", p, x.Offset, x.Length, im.size)
			}
			total += x.Length
		}
		rep.Extents += len(exts)
		f, err := fsys.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.CopyBuffer(io.Discard, isoCtxReader{ctx: ctx, r: f}, buf)
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		info, err := f.Stat()
		if err != nil {
			return err
		}
		if n != info.Size() || n != total {
			return fmt.Errorf("read %s: got %d bytes, size %d, extents %d", p, n, info.Size(), total)
		}
		rep.Bytes += n
		return nil
	})
	if err != nil {
		return fmt.Errorf("verify %s: %w", pos[0], err)
	}
	if newHash != nil {
		h := newHash()
		if _, err := io.CopyBuffer(h, isoCtxReader{ctx: ctx, r: io.NewSectionReader(im.file, 0, im.size)}, buf); err != nil {
			return fmt.Errorf("verify %s: checksum: %w", pos[0], err)
		}
		got := h.Sum(nil)
		rep.Checksum = strings.SplitN(*sum, ":", 2)[0] + ":" + hex.EncodeToString(got)
		if !slices.Equal(got, want) {
			if *out == "json" {
				_ = isoJSON(a.stdout, rep)
			}
			return fmt.Errorf("verify %s: checksum mismatch: image has %s, expected %s", pos[0], rep.Checksum, *sum)
		}
	}
	rep.OK = true
	if *out == "json" {
		return isoJSON(a.stdout, rep)
	}
	fmt.Fprintf(a.stdout, "ok: %d files (%d bytes in %d extents), %d directories, %d symlinks\n",
		rep.Files, rep.Bytes, rep.Extents, rep.Dirs, rep.Links)
	if rep.Checksum != "" {
		fmt.Fprintf(a.stdout, "checksum ok: %s\n", rep.Checksum)
	}
	return nil
}

func isoExtract(ctx context.Context, a *app, args []string) error {
	fset := flag.NewFlagSet("extract", flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	pos, err := isoFlags(fset, args, 2, -1)
	if err != nil {
		return err
	}
	paths := []string{"."}
	if len(pos) > 2 {
		paths = paths[:0]
		for _, p := range pos[2:] {
			c, err := isoPath(p)
			if err != nil {
				return err
			}
			paths = append(paths, c)
		}
	}
	im, err := isoOpen(pos[0])
	if err != nil {
		return err
	}
	defer im.Close()
	if err := os.MkdirAll(pos[1], 0o755); err != nil {
		return err
	}
	// os.Root refuses every path that would leave DIR, through ".." or through a symbolic link.
	root, err := os.OpenRoot(pos[1])
	if err != nil {
		return err
	}
	defer root.Close()
	x := &isoExtractor{a: a, fsys: im.fsys, root: root, buf: make([]byte, 1<<20)}
	for _, p := range paths {
		if err := x.extract(ctx, p); err != nil {
			return fmt.Errorf("extract %s: %w", p, err)
		}
	}
	// Directories get their modes and times last: a read-only directory must be filled first,
	// and writing into a directory changes its time.
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if err := root.Chmod(d.name, isoChmodBits(d.mode)); err != nil {
			return fmt.Errorf("extract %s: %w", d.name, err)
		}
		if err := root.Chtimes(d.name, d.mtime, d.mtime); err != nil {
			return fmt.Errorf("extract %s: %w", d.name, err)
		}
	}
	fmt.Fprintf(a.stdout, "extracted %d files (%d bytes), %d directories, %d symlinks into %s\n",
		x.files, x.bytes, len(x.dirs), x.links, pos[1])
	return nil
}

// isoExtractor writes files of an image under a root directory and counts what it wrote.
type isoExtractor struct {
	a            *app
	fsys         *iso.FS
	root         *os.Root
	buf          []byte
	files, links int
	bytes        int64
	dirs         []isoExtractedDir
}

// isoExtractedDir is a directory whose mode and times are set once everything under it is written.
type isoExtractedDir struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
}

func (x *isoExtractor) extract(ctx context.Context, top string) error {
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
			x.dirs = append(x.dirs, isoExtractedDir{name: p, mode: mode, mtime: info.ModTime()})
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
			x.a.log.Warn("skipping a special file", "path", p, "type", isoType(mode))
		}
		return nil
	})
}

func (x *isoExtractor) file(ctx context.Context, p string, info fs.FileInfo) error {
	src, err := x.fsys.Open(p)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := x.root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	n, err := io.CopyBuffer(dst, isoCtxReader{ctx: ctx, r: src}, x.buf)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	x.files++
	x.bytes += n
	if err := x.root.Chmod(p, isoChmodBits(info.Mode())); err != nil {
		return err
	}
	return x.root.Chtimes(p, info.ModTime(), info.ModTime())
}

// isoChmodBits keeps the permission and setuid, setgid and sticky bits of m.
func isoChmodBits(m fs.FileMode) fs.FileMode {
	return m & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// isoShow turns an fs.FS path into the absolute path users see.
func isoShow(p string) string {
	if p == "." {
		return "/"
	}
	return "/" + p
}
