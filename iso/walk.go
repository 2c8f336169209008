package iso

import (
	"bytes"
	"encoding/binary"
	"io/fs"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// record is one parsed directory record.
type record struct {
	off      int64 // byte offset of the record in the image
	extent   int64 // byte offset of the data (extended attribute record skipped)
	length   int64
	date     time.Time
	flags    byte
	name     []byte
	su       []byte // system use area
	suOff    int64  // byte offset of the system use area
	unitSize byte
	gap      byte
}

const (
	flagHidden    = 0x01
	flagDir       = 0x02
	flagAssoc     = 0x04
	flagMultiPart = 0x80
)

// parseRecord parses the directory record b, found at byte off of the image.
func parseRecord(b []byte, off int64) (record, error) {
	if len(b) < minRecord-1 || int(b[0]) > len(b) || b[0] < minRecord-1 {
		return record{}, corruptf(off, "directory record of %d bytes is too short", len(b))
	}
	n := int(b[0])
	nameLen := int(b[32])
	if 33+nameLen > n {
		return record{}, corruptf(off, "directory record name of %d bytes overruns its record of %d bytes", nameLen, n)
	}
	su := 33 + nameLen
	if nameLen%2 == 0 {
		su++
	}
	if su > n {
		su = n
	}
	r := record{
		off:      off,
		extent:   (int64(binary.LittleEndian.Uint32(b[2:6])) + int64(b[1])) * sectorSize,
		length:   int64(binary.LittleEndian.Uint32(b[10:14])),
		date:     recDate(b[18:25]),
		flags:    b[25],
		unitSize: b[26],
		gap:      b[27],
		name:     b[33 : 33+nameLen],
		su:       b[su:n],
		suOff:    off + int64(su),
	}
	return r, nil
}

// rrInfo is what the Rock Ridge entries of one record say.
type rrInfo struct {
	name       []byte
	hasName    bool
	nameDone   bool
	mode       uint32
	hasPX      bool
	nlink      uint32
	uid, gid   uint32
	mtime      time.Time
	target     []string
	partial    []byte
	hasSL      bool
	slDone     bool
	childLink  int64
	hasCL      bool
	relocated  bool
	hasSP      bool
	extensions []string
	any        bool
}

const (
	maxCE       = 32
	maxNameLen  = 1024
	maxLinkLen  = 4096
	posixDir    = 0o040000
	posixReg    = 0o100000
	posixLink   = 0o120000
	posixChar   = 0o020000
	posixBlock  = 0o060000
	posixFifo   = 0o010000
	posixSocket = 0o140000
	posixFmt    = 0o170000
)

// walker builds the tree of nodes.
type walker struct {
	f        *FS
	cfg      config
	rr       bool
	joliet   bool
	skip     int
	visited  map[int64]bool
	entries  int
	dirBytes int64
	ceBytes  int64
}

// detectRockRidge looks at the "." record of the primary root for the SUSP SP entry and a Rock
// Ridge ER entry (or Rock Ridge entries when the ER entry is missing).
func (w *walker) detectRockRidge(root record) (bool, error) {
	if root.length < minRecord {
		return false, corruptf(root.off, "root directory of %d bytes", root.length)
	}
	buf := make([]byte, sectorSize)
	if err := w.f.readAt(buf, root.extent, "root directory"); err != nil {
		return false, err
	}
	dot, err := parseRecord(buf, root.extent)
	if err != nil {
		return false, err
	}
	su := dot.su
	if len(su) < 7 || su[0] != 'S' || su[1] != 'P' || su[2] < 7 || su[4] != 0xBE || su[5] != 0xEF {
		return false, nil
	}
	w.skip = int(su[6])
	var info rrInfo
	if err := w.parseSUSP(&info, su, dot.suOff, 0); err != nil {
		return false, err
	}
	for _, id := range info.extensions {
		if id == "RRIP_1991A" || id == "IEEE_P1282" || id == "IEEE_1282" {
			w.f.info.RockRidgeID = id
			return true, nil
		}
	}
	return info.any, nil
}

// parseSUSP parses the system use entries in su (found at byte off), following continuation
// areas.
func (w *walker) parseSUSP(info *rrInfo, su []byte, off int64, skip int) error {
	if skip > len(su) {
		return nil
	}
	su, off = su[skip:], off+int64(skip)
	for hops := 0; ; hops++ {
		var ceOff, ceLen int64
		for len(su) >= 4 {
			if su[0] == 0 {
				break // padding
			}
			l := int(su[2])
			if l < 4 || l > len(su) {
				return corruptf(off, "system use entry %q of %d bytes overruns its area of %d bytes", su[0:2], l, len(su))
			}
			e := su[:l]
			sig := string(e[0:2])
			switch sig {
			case "CE":
				if l < 28 {
					return corruptf(off, "CE entry of %d bytes is too short", l)
				}
				ceOff = int64(binary.LittleEndian.Uint32(e[4:8]))*sectorSize + int64(binary.LittleEndian.Uint32(e[12:16]))
				ceLen = int64(binary.LittleEndian.Uint32(e[20:24]))
				if ceLen == 0 {
					ceOff = 0
				}
			case "ST":
				su = nil
				continue
			case "SP":
				info.hasSP = true
			case "ER":
				if l >= 8 {
					idLen := int(e[4])
					if 8+idLen <= l {
						info.extensions = append(info.extensions, string(e[8:8+idLen]))
					}
				}
			default:
				if err := info.entry(sig, e, off); err != nil {
					return err
				}
			}
			su, off = su[l:], off+int64(l)
		}
		if ceOff == 0 {
			return nil
		}
		if hops >= maxCE {
			return corruptf(off, "more than %d chained continuation areas", maxCE)
		}
		if ceLen > sectorSize {
			return corruptf(ceOff, "continuation area of %d bytes is larger than a block", ceLen)
		}
		if ceOff+ceLen > w.f.size {
			return corruptf(off, "continuation area at byte %d of %d bytes lies outside the image of %d bytes", ceOff, ceLen, w.f.size)
		}
		w.ceBytes += ceLen
		if w.ceBytes > w.f.size+sectorSize*maxCE {
			return corruptf(ceOff, "continuation areas add up to more than the image")
		}
		buf := make([]byte, ceLen)
		if err := w.f.readAt(buf, ceOff, "continuation area"); err != nil {
			return err
		}
		su, off = buf, ceOff
	}
}

// entry records one Rock Ridge entry.
func (info *rrInfo) entry(sig string, e []byte, off int64) error {
	l := len(e)
	switch sig {
	case "RR":
		info.any = true
	case "PX":
		if l < 36 {
			return corruptf(off, "PX entry of %d bytes is too short", l)
		}
		info.any, info.hasPX = true, true
		info.mode = binary.LittleEndian.Uint32(e[4:8])
		info.nlink = binary.LittleEndian.Uint32(e[12:16])
		info.uid = binary.LittleEndian.Uint32(e[20:24])
		info.gid = binary.LittleEndian.Uint32(e[28:32])
	case "NM":
		if l < 5 {
			return corruptf(off, "NM entry of %d bytes is too short", l)
		}
		info.any = true
		flags := e[4]
		if flags&0x06 != 0 || info.nameDone {
			return nil // "." or "..": not a name of its own
		}
		info.hasName = true
		if len(info.name)+l-5 > maxNameLen {
			return corruptf(off, "rock ridge name longer than %d bytes", maxNameLen)
		}
		info.name = append(info.name, e[5:]...)
		if flags&0x01 == 0 {
			info.nameDone = true
		}
	case "SL":
		if l < 5 {
			return corruptf(off, "SL entry of %d bytes is too short", l)
		}
		info.any, info.hasSL = true, true
		if info.slDone {
			return nil
		}
		if e[4]&0x01 == 0 {
			info.slDone = true
		}
		c := e[5:]
		for len(c) > 0 {
			if len(c) < 2 || 2+int(c[1]) > len(c) {
				return corruptf(off, "SL component overruns its entry")
			}
			cf, content := c[0], c[2:2+int(c[1])]
			c = c[2+int(c[1]):]
			switch {
			case cf&0x02 != 0:
				info.partial = append(info.partial, '.')
			case cf&0x04 != 0:
				info.partial = append(info.partial, ".."...)
			case cf&0x08 != 0:
				// The root: an empty first component gives the leading slash.
			default:
				info.partial = append(info.partial, content...)
			}
			if cf&0x01 == 0 {
				info.target = append(info.target, string(info.partial))
				info.partial = info.partial[:0]
			}
			if n := len(info.target) + len(info.partial); n > maxLinkLen {
				return corruptf(off, "symbolic link target longer than %d bytes", maxLinkLen)
			}
		}
	case "TF":
		if l < 5 {
			return corruptf(off, "TF entry of %d bytes is too short", l)
		}
		info.any = true
		flags := e[4]
		size := 7
		if flags&0x80 != 0 {
			size = 17
		}
		p := e[5:]
		for bit := 0; bit < 7; bit++ {
			if flags&(1<<bit) == 0 {
				continue
			}
			if len(p) < size {
				return corruptf(off, "TF entry of %d bytes is too short for its flags %#x", l, flags)
			}
			if bit == 1 {
				if size == 7 {
					info.mtime = recDate(p[:7])
				} else {
					info.mtime = decDate(p[:17])
				}
			}
			p = p[size:]
		}
	case "CL":
		if l < 12 {
			return corruptf(off, "CL entry of %d bytes is too short", l)
		}
		info.any, info.hasCL = true, true
		info.childLink = int64(binary.LittleEndian.Uint32(e[4:8])) * sectorSize
	case "RE":
		info.any, info.relocated = true, true
	case "PL", "PN", "SF", "ZF", "AL", "AA", "AS":
		info.any = true
	}
	return nil
}

func (info *rrInfo) linkTarget() string {
	parts := info.target
	if len(info.partial) > 0 {
		parts = append(parts, string(info.partial))
	}
	if len(parts) == 1 && parts[0] == "" {
		return "/"
	}
	return strings.Join(parts, "/")
}

func (w *walker) walkRoot(rootRec record) (*node, error) {
	root := &node{name: ".", mode: fs.ModeDir | 0o555, mtime: rootRec.date, record: rootRec.off, nlink: 1}
	root.parent = root
	if err := w.readDir(root, rootRec.extent, rootRec.length, rootRec.off, 0, true); err != nil {
		return nil, err
	}
	return root, nil
}

// readDir reads the directory whose records lie at [off, off+length) into dir.
func (w *walker) readDir(dir *node, off, length, recOff int64, depth int, isRoot bool) error {
	if depth > w.cfg.maxDepth {
		return formatErr(ErrLimit, recOff, "directory tree deeper than %d levels", w.cfg.maxDepth)
	}
	if length < minRecord || length > maxDirSize {
		return corruptf(recOff, "directory of %d bytes", length)
	}
	if off+length > w.f.size {
		return corruptf(recOff, "directory at byte %d of %d bytes lies outside the image of %d bytes", off, length, w.f.size)
	}
	if w.visited[off] {
		return corruptf(recOff, "directory loop: the directory at byte %d is reached twice", off)
	}
	w.visited[off] = true
	w.dirBytes += length
	if w.dirBytes > w.f.size {
		return corruptf(recOff, "directories add up to more than the image")
	}
	buf := make([]byte, length)
	if err := w.f.readAt(buf, off, "directory"); err != nil {
		return err
	}
	var (
		pending   *node
		pendName  []byte
		pos       int
		subdirs   []*node
		subdirRec []record
	)
	for pos < len(buf) {
		recLen := int(buf[pos])
		if recLen == 0 {
			// The rest of this sector is padding.
			pos = (pos/sectorSize + 1) * sectorSize
			continue
		}
		recAt := off + int64(pos)
		if recLen < minRecord-1 {
			return corruptf(recAt, "directory record of %d bytes is too short", recLen)
		}
		if pos+recLen > len(buf) {
			return corruptf(recAt, "directory record of %d bytes overruns its directory", recLen)
		}
		rec, err := parseRecord(buf[pos:pos+recLen], recAt)
		if err != nil {
			return err
		}
		pos += recLen
		if len(rec.name) == 1 && (rec.name[0] == 0 || rec.name[0] == 1) {
			if rec.name[0] == 0 && w.rr {
				// The "." record carries the directory's own Rock Ridge attributes.
				var info rrInfo
				if err := w.parseSUSP(&info, rec.su, rec.suOff, w.skip); err != nil {
					return err
				}
				if isRoot {
					dir.mtime = rec.date
				}
				applyAttrs(dir, &info, true)
			}
			continue
		}
		if rec.flags&flagAssoc != 0 {
			continue
		}
		if rec.unitSize != 0 || rec.gap != 0 {
			return formatErr(ErrUnsupported, recAt, "interleaved file (unit size %d, gap %d)", rec.unitSize, rec.gap)
		}
		var info rrInfo
		if w.rr {
			if err := w.parseSUSP(&info, rec.su, rec.suOff, w.skip); err != nil {
				return err
			}
			if info.relocated {
				continue // listed where its CL entry points from
			}
		}
		if pending != nil {
			if !bytes.Equal(pendName, rec.name) {
				return corruptf(recAt, "multi-extent file %q continues with a record named %q", pendName, rec.name)
			}
			if rec.flags&flagDir != 0 {
				return corruptf(recAt, "multi-extent file %q continues with a directory record", pendName)
			}
			if err := w.addExtent(pending, rec); err != nil {
				return err
			}
			if rec.flags&flagMultiPart == 0 {
				pending = nil
			}
			continue
		}
		name, err := w.name(rec, &info)
		if err != nil {
			return err
		}
		w.entries++
		if w.entries > w.cfg.maxEntries {
			return formatErr(ErrLimit, recAt, "more than %d entries", w.cfg.maxEntries)
		}
		n := &node{name: name, parent: dir, mtime: rec.date, record: recAt, nlink: 1}
		switch {
		case info.hasCL:
			n.mode = fs.ModeDir | 0o555
			reloc, err := w.relocated(info.childLink, recAt)
			if err != nil {
				return err
			}
			applyAttrs(n, &info, false)
			n.mode = n.mode&^fs.ModeType | fs.ModeDir
			subdirs = append(subdirs, n)
			subdirRec = append(subdirRec, reloc)
		case rec.flags&flagDir != 0:
			n.mode = fs.ModeDir | 0o555
			applyAttrs(n, &info, false)
			subdirs = append(subdirs, n)
			subdirRec = append(subdirRec, rec)
		default:
			// Without Rock Ridge, files read as r-x for all, as xorriso and Linux show them.
			n.mode = 0o555
			applyAttrs(n, &info, false)
			if n.mode.Type() == fs.ModeDir {
				return corruptf(recAt, "file record %q has a directory mode", name)
			}
			if n.mode.Type() == fs.ModeSymlink {
				if !info.hasSL {
					return corruptf(recAt, "symbolic link %q has no SL entry", name)
				}
				n.target = info.linkTarget()
				n.size = int64(len(n.target))
			} else if err := w.addExtent(n, rec); err != nil {
				return err
			}
			if rec.flags&flagMultiPart != 0 {
				pending, pendName = n, rec.name
			}
		}
		dir.children = append(dir.children, n)
	}
	if pending != nil {
		return corruptf(off+length, "multi-extent file %q has no final record", pendName)
	}
	slices.SortFunc(dir.children, func(a, b *node) int { return strings.Compare(a.name, b.name) })
	for i := 1; i < len(dir.children); i++ {
		if dir.children[i].name == dir.children[i-1].name {
			return corruptf(dir.children[i].record, "duplicate name %q in a directory", dir.children[i].name)
		}
	}
	for i, sub := range subdirs {
		r := subdirRec[i]
		if err := w.readDir(sub, r.extent, r.length, sub.record, depth+1, false); err != nil {
			return err
		}
	}
	return nil
}

// relocated reads the "." record of a relocated directory (the target of a CL entry).
func (w *walker) relocated(at, recOff int64) (record, error) {
	if at+sectorSize > w.f.size {
		return record{}, corruptf(recOff, "CL entry points at byte %d, outside the image of %d bytes", at, w.f.size)
	}
	buf := make([]byte, sectorSize)
	if err := w.f.readAt(buf, at, "relocated directory"); err != nil {
		return record{}, err
	}
	dot, err := parseRecord(buf, at)
	if err != nil {
		return record{}, err
	}
	if len(dot.name) != 1 || dot.name[0] != 0 || dot.extent != at {
		return record{}, corruptf(recOff, "CL entry points at byte %d, which does not start a directory", at)
	}
	return dot, nil
}

func (w *walker) addExtent(n *node, rec record) error {
	if rec.length == 0 {
		return nil
	}
	if rec.extent+rec.length > w.f.size {
		return corruptf(rec.off, "extent at byte %d of %d bytes lies outside the image of %d bytes", rec.extent, rec.length, w.f.size)
	}
	if len(n.extents) > 0 {
		if last := &n.extents[len(n.extents)-1]; last.Offset+last.Length == rec.extent {
			// Keep adjacent runs as one: fewer extents, same bytes.
			last.Length += rec.length
			n.size += rec.length
			return nil
		}
	}
	n.extents = append(n.extents, Extent{Offset: rec.extent, Length: rec.length})
	n.size += rec.length
	return nil
}

// name picks the node's name: Rock Ridge NM, else the Joliet or primary identifier.
func (w *walker) name(rec record, info *rrInfo) (string, error) {
	var name string
	switch {
	case info.hasName:
		name = string(info.name)
	case w.joliet:
		if len(rec.name)%2 != 0 {
			return "", corruptf(rec.off, "joliet name of odd length %d", len(rec.name))
		}
		name = stripVersion(decodeUCS2(rec.name), false)
	default:
		name = stripVersion(string(rec.name), rec.flags&flagDir == 0)
	}
	if !utf8.ValidString(name) {
		name = latin1(name)
	}
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return "", corruptf(rec.off, "invalid file name %q", name)
	}
	return name, nil
}

// latin1 reads a name that is not UTF-8 as ISO 8859-1, so that every byte keeps a distinct
// character and the name stays a valid fs.FS path element.
func latin1(s string) string {
	r := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		r[i] = rune(s[i])
	}
	return string(r)
}

// stripVersion drops the ";1" version of an identifier and, for files, the trailing dot of a name
// without extension.
func stripVersion(s string, file bool) string {
	if i := strings.LastIndexByte(s, ';'); i >= 0 {
		s = s[:i]
	}
	if file && len(s) > 1 && strings.HasSuffix(s, ".") {
		s = s[:len(s)-1]
	}
	return s
}

// applyAttrs applies the PX and TF attributes of info to n.
func applyAttrs(n *node, info *rrInfo, dot bool) {
	if info.hasPX {
		perm := fs.FileMode(info.mode & 0o777)
		if info.mode&0o4000 != 0 {
			perm |= fs.ModeSetuid
		}
		if info.mode&0o2000 != 0 {
			perm |= fs.ModeSetgid
		}
		if info.mode&0o1000 != 0 {
			perm |= fs.ModeSticky
		}
		var typ fs.FileMode
		switch info.mode & posixFmt {
		case posixDir:
			typ = fs.ModeDir
		case posixLink:
			typ = fs.ModeSymlink
		case posixChar:
			typ = fs.ModeDevice | fs.ModeCharDevice
		case posixBlock:
			typ = fs.ModeDevice
		case posixFifo:
			typ = fs.ModeNamedPipe
		case posixSocket:
			typ = fs.ModeSocket
		}
		if dot {
			typ = fs.ModeDir
		} else if n.mode.IsDir() && typ != fs.ModeDir {
			typ = fs.ModeDir
		}
		n.mode = typ | perm
		n.uid, n.gid, n.nlink = info.uid, info.gid, info.nlink
	} else if info.hasSL && !dot && !n.mode.IsDir() {
		n.mode = fs.ModeSymlink | 0o777
	}
	if !info.mtime.IsZero() {
		n.mtime = info.mtime
	}
}
