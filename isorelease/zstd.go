package isorelease

import (
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
)

// zstdMagic opens every zstd frame (RFC 8878, 3.1.1).
const zstdMagic = 0xFD2FB528

// tarBytes returns the size an archive decompresses to, as the header of its zstd frame says
// (the frame content size, which zstd writes when it compresses a file of known size); 0 when it
// does not say or the archive is not zstd. Only the header's first 18 bytes are read. An archive
// of several frames says only its first frame's size, which is taken as unknown when it is well
// below the compressed size.
func tarBytes(fsys fs.FS, name string, compressed int64) int64 {
	f, err := fsys.Open(name)
	if err != nil {
		return 0
	}
	defer f.Close()
	var b [18]byte
	n, err := io.ReadFull(f, b[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return 0
	}
	size := zstdContentSize(b[:n])
	// Incompressible content (random layers) compresses to a little more than itself; a first
	// frame far below the archive is one frame of several.
	if size < compressed-compressed/10 {
		return 0
	}
	return size
}

// zstdContentSize parses the frame header at the start of b and returns its frame content
// size, or 0 when the header does not give one.
func zstdContentSize(b []byte) int64 {
	if len(b) < 5 || binary.LittleEndian.Uint32(b) != zstdMagic {
		return 0
	}
	fhd := b[4]
	single := fhd&0x20 != 0
	fcsFlag := fhd >> 6
	at := 5
	if !single {
		at++ // the window descriptor
	}
	at += [4]int{0, 1, 2, 4}[fhd&3] // the dictionary ID
	var size int
	switch fcsFlag {
	case 0:
		if !single {
			return 0
		}
		size = 1
	case 1:
		size = 2
	case 2:
		size = 4
	case 3:
		size = 8
	}
	if len(b) < at+size {
		return 0
	}
	v := b[at : at+size]
	switch size {
	case 1:
		return int64(v[0])
	case 2:
		return int64(binary.LittleEndian.Uint16(v)) + 256
	case 4:
		return int64(binary.LittleEndian.Uint32(v))
	}
	u := binary.LittleEndian.Uint64(v)
	if u > 1<<62 {
		return 0
	}
	return int64(u)
}
