package iso

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
	"unicode/utf16"
)

const (
	sectorSize = 2048
	// maxDescriptors bounds the volume descriptor set read from sector 16 on.
	maxDescriptors = 64
	// maxDirSize bounds the size of one directory extent.
	maxDirSize = 256 << 20
	// minRecord is the size of a directory record with a one-byte name.
	minRecord = 34
	// maxImageSize bounds the size of an image: twice the largest volume (2^32 sectors, 8 TiB),
	// room for a hybrid image's partitions after it. Offsets and lengths summed below it cannot
	// overflow an int64.
	maxImageSize = 1 << 44
)

// Tree names one of the directory trees an image may carry.
type Tree int

// The trees, in the order of preference when more than one is present.
const (
	// TreeAuto picks Rock Ridge, then Joliet, then the primary tree.
	TreeAuto Tree = iota
	// TreeRockRidge is the primary tree read with its Rock Ridge extensions.
	TreeRockRidge
	// TreeJoliet is the Joliet supplementary tree (UCS-2 names).
	TreeJoliet
	// TreePrimary is the primary tree with plain ISO 9660 names.
	TreePrimary
)

// String names the tree.
func (t Tree) String() string {
	switch t {
	case TreeRockRidge:
		return "rockridge"
	case TreeJoliet:
		return "joliet"
	case TreePrimary:
		return "primary"
	default:
		return "auto"
	}
}

// Option changes how Open reads an image.
type Option func(*config)

type config struct {
	tree       Tree
	maxEntries int
	maxDepth   int
	maxLinks   int
}

// WithTree makes Open read the given tree instead of the preferred one; Open fails when the image
// does not carry it.
func WithTree(t Tree) Option { return func(c *config) { c.tree = t } }

// WithMaxEntries bounds the number of files and directories Open indexes (default 4,194,304).
func WithMaxEntries(n int) Option { return func(c *config) { c.maxEntries = n } }

// WithMaxDepth bounds the depth of the directory tree (default 1024).
func WithMaxDepth(n int) Option { return func(c *config) { c.maxDepth = n } }

// WithMaxSymlinks bounds how many symbolic links one path resolution follows (default 40).
func WithMaxSymlinks(n int) Option { return func(c *config) { c.maxLinks = n } }

// Extent is a run of a file's bytes inside the image.
type Extent struct {
	// Offset is the byte offset of the run inside the image.
	Offset int64
	// Length is the number of bytes in the run.
	Length int64
}

// VolumeInfo describes the volume: its identifiers, size, dates, trees and boot entries.
type VolumeInfo struct {
	// VolumeID is the volume identifier of the primary volume descriptor (the Joliet one when
	// the Joliet tree is read).
	VolumeID string `json:"volumeID"`
	// VolumeSetID, Publisher, Preparer, Application and System are the other identifiers.
	VolumeSetID string `json:"volumeSetID,omitempty"`
	Publisher   string `json:"publisher,omitempty"`
	Preparer    string `json:"preparer,omitempty"`
	Application string `json:"application,omitempty"`
	System      string `json:"system,omitempty"`
	// Size is the declared size of the volume in bytes.
	Size int64 `json:"size"`
	// ImageSize is the size of the image that was opened, in bytes (at least Size).
	ImageSize int64 `json:"imageSize"`
	// Created and Modified are the volume dates (zero when unset).
	Created  time.Time `json:"created"`
	Modified time.Time `json:"modified"`
	// Primary, Joliet and RockRidge say which trees and extensions are present.
	Primary   bool `json:"primary"`
	Joliet    bool `json:"joliet"`
	RockRidge bool `json:"rockRidge"`
	// RockRidgeID is the extension identifier of the ER entry (such as "RRIP_1991A").
	RockRidgeID string `json:"rockRidgeID,omitempty"`
	// Tree is the tree the FS reads.
	Tree string `json:"tree"`
	// BootCatalog is the byte offset of the El Torito boot catalog, or 0 when there is none.
	BootCatalog int64 `json:"bootCatalog,omitempty"`
	// Boot lists the El Torito boot entries.
	Boot []BootEntry `json:"boot,omitempty"`
	// MBR and GPT say whether the image also carries a hybrid partition table.
	MBR bool `json:"mbr"`
	GPT bool `json:"gpt"`
}

// FS is a read-only file system over an ISO 9660 image. It is safe for concurrent use as long as
// the io.ReaderAt it was opened on is.
type FS struct {
	r        io.ReaderAt
	size     int64
	root     *node
	info     VolumeInfo
	maxLinks int
	entries  int
}

var (
	_ fs.FS         = (*FS)(nil)
	_ fs.StatFS     = (*FS)(nil)
	_ fs.ReadDirFS  = (*FS)(nil)
	_ fs.ReadFileFS = (*FS)(nil)
	_ fs.ReadLinkFS = (*FS)(nil)
)

// node is one file, directory or symbolic link of the tree.
type node struct {
	name     string
	mode     fs.FileMode
	size     int64
	mtime    time.Time
	extents  []Extent
	target   string
	parent   *node
	children []*node
	uid, gid uint32
	nlink    uint32
	// record is the byte offset of the directory record the node came from.
	record int64
}

// volume is what the descriptors say.
type volume struct {
	pvd, svd []byte
	svdOff   int64
	catalog  int64
	hasCat   bool
}

// Open reads the volume descriptors and directory records of an ISO 9660 image of size bytes
// read through r. It reads nothing else: file contents are read when files are read.
func Open(r io.ReaderAt, size int64, opts ...Option) (*FS, error) {
	cfg := config{maxEntries: 1 << 22, maxDepth: 1024, maxLinks: 40}
	for _, o := range opts {
		o(&cfg)
	}
	if size < 17*sectorSize {
		return nil, formatErr(ErrNotISO, 0, "image of %d bytes is too small to hold a volume descriptor", size)
	}
	if size > maxImageSize {
		// A size no volume can have (a hostile origin's Content-Range): past this bound the
		// walk's sums of offsets and lengths could overflow.
		return nil, corruptf(0, "bad size: image of %d bytes, more than the %d bytes an ISO 9660 volume and what follows it may take", size, int64(maxImageSize))
	}
	f := &FS{r: r, size: size, maxLinks: cfg.maxLinks}
	vol, err := f.readDescriptors()
	if err != nil {
		return nil, err
	}
	if err := f.readVolumeInfo(vol); err != nil {
		return nil, err
	}
	w := &walker{f: f, cfg: cfg, visited: map[int64]bool{}}
	rootRec, err := parseRecord(vol.pvd[156:190], 16*sectorSize+156)
	if err != nil {
		return nil, err
	}
	rr, err := w.detectRockRidge(rootRec)
	if err != nil {
		return nil, err
	}
	f.info.RockRidge = rr
	tree := cfg.tree
	if tree == TreeAuto {
		switch {
		case rr:
			tree = TreeRockRidge
		case vol.svd != nil:
			tree = TreeJoliet
		default:
			tree = TreePrimary
		}
	}
	switch tree {
	case TreeRockRidge:
		if !rr {
			return nil, fmt.Errorf("%w: the image has no rock ridge extensions", ErrNoTree)
		}
		w.rr = true
	case TreeJoliet:
		if vol.svd == nil {
			return nil, fmt.Errorf("%w: the image has no joliet tree", ErrNoTree)
		}
		w.joliet = true
		rootRec, err = parseRecord(vol.svd[156:190], vol.svdOff+156)
		if err != nil {
			return nil, err
		}
		f.info.VolumeID = decodeUCS2(bytes.TrimRight(vol.svd[40:72], "\x00"))
		f.info.VolumeID = trimSpace(f.info.VolumeID)
	}
	f.info.Tree = tree.String()
	root, err := w.walkRoot(rootRec)
	if err != nil {
		return nil, err
	}
	f.root = root
	f.entries = w.entries
	return f, nil
}

// Info describes the volume.
func (f *FS) Info() VolumeInfo {
	info := f.info
	info.Boot = append([]BootEntry(nil), f.info.Boot...)
	return info
}

// Entries reports how many files, directories and links the tree holds (the root excluded).
func (f *FS) Entries() int { return f.entries }

func (f *FS) readAt(p []byte, off int64, what string) error {
	if off < 0 || off+int64(len(p)) > f.size {
		return formatErr(ErrTruncated, off, "%s of %d bytes lies outside the image of %d bytes", what, len(p), f.size)
	}
	n, err := f.r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return formatErr(ErrTruncated, off+int64(n), "%s: image ends after %d of %d bytes", what, n, len(p))
	}
	return fmt.Errorf("iso: read %s at byte %d: %w", what, off, err)
}

func (f *FS) readDescriptors() (*volume, error) {
	vol := &volume{}
	buf := make([]byte, sectorSize)
	for i := 0; i < maxDescriptors; i++ {
		off := int64(16+i) * sectorSize
		if off+sectorSize > f.size {
			if vol.pvd != nil {
				return nil, formatErr(ErrTruncated, off, "volume descriptor set has no terminator before the end of the image")
			}
			return nil, formatErr(ErrNotISO, off, "no primary volume descriptor")
		}
		if err := f.readAt(buf, off, "volume descriptor"); err != nil {
			return nil, err
		}
		if string(buf[1:6]) != "CD001" {
			if i == 0 {
				return nil, formatErr(ErrNotISO, off, "no CD001 volume descriptor")
			}
			return nil, corruptf(off, "volume descriptor without the CD001 identifier")
		}
		switch buf[0] {
		case 0:
			if bytes.HasPrefix(buf[7:39], []byte("EL TORITO SPECIFICATION")) && !vol.hasCat {
				vol.hasCat = true
				vol.catalog = int64(binary.LittleEndian.Uint32(buf[71:75])) * sectorSize
			}
		case 1:
			if vol.pvd == nil {
				vol.pvd = bytes.Clone(buf)
			}
		case 2:
			esc := buf[88:120]
			if vol.svd == nil && buf[6] == 1 && (bytes.HasPrefix(esc, []byte("%/@")) ||
				bytes.HasPrefix(esc, []byte("%/C")) || bytes.HasPrefix(esc, []byte("%/E"))) {
				vol.svd = bytes.Clone(buf)
				vol.svdOff = off
			}
		case 255:
			if vol.pvd == nil {
				return nil, formatErr(ErrNotISO, off, "volume descriptor set ends without a primary volume descriptor")
			}
			return vol, nil
		}
	}
	return nil, corruptf(16*sectorSize, "volume descriptor set has more than %d descriptors", maxDescriptors)
}

func (f *FS) readVolumeInfo(vol *volume) error {
	p := vol.pvd
	const pvdOff = 16 * sectorSize
	if bs := binary.LittleEndian.Uint16(p[128:130]); bs != sectorSize {
		return formatErr(ErrUnsupported, pvdOff+128, "logical block size %d (only 2048 is supported)", bs)
	}
	declared := int64(binary.LittleEndian.Uint32(p[80:84])) * sectorSize
	if declared > f.size {
		return formatErr(ErrTruncated, pvdOff+80, "volume declares %d bytes but the image has only %d", declared, f.size)
	}
	f.info = VolumeInfo{
		VolumeID:    trimSpace(string(p[40:72])),
		System:      trimSpace(string(p[8:40])),
		VolumeSetID: trimSpace(string(p[190:318])),
		Publisher:   trimSpace(string(p[318:446])),
		Preparer:    trimSpace(string(p[446:574])),
		Application: trimSpace(string(p[574:702])),
		Size:        declared,
		ImageSize:   f.size,
		Created:     decDate(p[813:830]),
		Modified:    decDate(p[830:847]),
		Primary:     true,
		Joliet:      vol.svd != nil,
		Tree:        TreePrimary.String(),
	}
	head := make([]byte, 1024)
	if err := f.readAt(head, 0, "system area"); err != nil {
		return err
	}
	f.info.MBR = head[510] == 0x55 && head[511] == 0xAA
	f.info.GPT = string(head[512:520]) == "EFI PART"
	if vol.hasCat {
		boot, err := f.readBootCatalog(vol.catalog)
		if err != nil {
			return err
		}
		f.info.BootCatalog = vol.catalog
		f.info.Boot = boot
	}
	return nil
}

func trimSpace(s string) string {
	return string(bytes.TrimRight([]byte(s), " \x00"))
}

// decDate decodes a 17-byte volume descriptor date ("YYYYMMDDHHMMSScc" and a zone offset).
func decDate(b []byte) time.Time {
	if len(b) < 17 || b[0] < '0' || b[0] > '9' || string(b[0:4]) == "0000" {
		return time.Time{}
	}
	n := func(s []byte) int {
		v := 0
		for _, c := range s {
			if c < '0' || c > '9' {
				return -1
			}
			v = v*10 + int(c-'0')
		}
		return v
	}
	year, mon, day, h, m, s, cs := n(b[0:4]), n(b[4:6]), n(b[6:8]), n(b[8:10]), n(b[10:12]), n(b[12:14]), n(b[14:16])
	if year < 0 || mon < 1 || mon > 12 || day < 1 || day > 31 || h < 0 || h > 23 || m < 0 || m > 59 || s < 0 || s > 60 || cs < 0 {
		return time.Time{}
	}
	return time.Date(year, time.Month(mon), day, h, m, s, cs*10_000_000, zone(int8(b[16])))
}

// recDate decodes a 7-byte directory record date.
func recDate(b []byte) time.Time {
	if len(b) < 7 || (b[0] == 0 && b[1] == 0 && b[2] == 0) {
		return time.Time{}
	}
	return time.Date(1900+int(b[0]), time.Month(b[1]), int(b[2]), int(b[3]), int(b[4]), int(b[5]), 0, zone(int8(b[6])))
}

// zone turns an offset in 15-minute steps into a location; out-of-range offsets mean UTC.
func zone(q int8) *time.Location {
	if q < -48 || q > 52 || q == 0 {
		return time.UTC
	}
	return time.FixedZone("", int(q)*15*60)
}

func decodeUCS2(b []byte) string {
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = binary.BigEndian.Uint16(b[2*i:])
	}
	return string(utf16.Decode(u))
}

// OpenFile opens the ISO 9660 image in the named file, as Open does. The returned file backs the
// FS: the caller closes it when done with the FS. Errors name the file; a name that is no
// regular file gets CheckFile's error.
func OpenFile(name string, opts ...Option) (*FS, *os.File, error) {
	if err := CheckFile(name); err != nil {
		return nil, nil, err
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	fsys, err := Open(f, st.Size(), opts...)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	return fsys, f, nil
}
