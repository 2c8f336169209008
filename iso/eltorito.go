package iso

import (
	"encoding/binary"
	"fmt"
)

// BootEntry is one El Torito boot catalog entry.
type BootEntry struct {
	// Platform is the platform of the entry's section: "x86", "PowerPC", "Mac", "EFI" or a number.
	Platform string `json:"platform"`
	// Bootable is true when the entry is marked bootable (0x88).
	Bootable bool `json:"bootable"`
	// Emulation is the boot media emulation ("no-emulation", "floppy-1.2M", "floppy-1.44M",
	// "floppy-2.88M", "hard-disk").
	Emulation string `json:"emulation"`
	// LoadSegment is the real-mode segment the image loads at (0 means the default 0x7C0).
	LoadSegment uint16 `json:"loadSegment"`
	// SystemType is the partition type byte of a hard-disk emulation image.
	SystemType byte `json:"systemType"`
	// SectorCount is the number of 512-byte virtual sectors loaded.
	SectorCount uint16 `json:"sectorCount"`
	// Offset is the byte offset of the boot image inside the ISO.
	Offset int64 `json:"offset"`
}

const (
	maxCatalogSectors = 4
	maxBootEntries    = 256
)

func platformName(p byte) string {
	switch p {
	case 0:
		return "x86"
	case 1:
		return "PowerPC"
	case 2:
		return "Mac"
	case 0xEF:
		return "EFI"
	default:
		return fmt.Sprintf("%#x", p)
	}
}

func emulationName(m byte) string {
	switch m & 0x0F {
	case 0:
		return "no-emulation"
	case 1:
		return "floppy-1.2M"
	case 2:
		return "floppy-1.44M"
	case 3:
		return "floppy-2.88M"
	case 4:
		return "hard-disk"
	default:
		return fmt.Sprintf("%#x", m&0x0F)
	}
}

// readBootCatalog parses the El Torito boot catalog at byte off.
func (f *FS) readBootCatalog(off int64) ([]BootEntry, error) {
	if off < 17*sectorSize || off+sectorSize > f.size {
		return nil, corruptf(off, "boot catalog lies outside the image of %d bytes", f.size)
	}
	n := min((f.size-off)/sectorSize, maxCatalogSectors)
	buf := make([]byte, n*sectorSize)
	if err := f.readAt(buf, off, "boot catalog"); err != nil {
		return nil, err
	}
	if buf[0] != 1 || buf[30] != 0x55 || buf[31] != 0xAA {
		return nil, corruptf(off, "boot catalog has no validation entry")
	}
	var sum uint16
	for i := 0; i < 32; i += 2 {
		sum += binary.LittleEndian.Uint16(buf[i:])
	}
	if sum != 0 {
		return nil, corruptf(off, "boot catalog validation entry has a bad checksum")
	}
	platform := buf[1]
	entry := func(e []byte) BootEntry {
		return BootEntry{
			Platform:    platformName(platform),
			Bootable:    e[0] == 0x88,
			Emulation:   emulationName(e[1]),
			LoadSegment: binary.LittleEndian.Uint16(e[2:4]),
			SystemType:  e[4],
			SectorCount: binary.LittleEndian.Uint16(e[6:8]),
			Offset:      int64(binary.LittleEndian.Uint32(e[8:12])) * sectorSize,
		}
	}
	check := func(e BootEntry, at int) error {
		if e.Offset >= f.size {
			return corruptf(off+int64(at), "boot image at byte %d lies outside the image of %d bytes", e.Offset, f.size)
		}
		return nil
	}
	var entries []BootEntry
	initial := entry(buf[32:64])
	if err := check(initial, 32); err != nil {
		return nil, err
	}
	entries = append(entries, initial)
	pos := 64
	for pos+32 <= len(buf) {
		h := buf[pos]
		if h != 0x90 && h != 0x91 {
			break
		}
		platform = buf[pos+1]
		count := int(binary.LittleEndian.Uint16(buf[pos+2 : pos+4]))
		pos += 32
		for i := 0; i < count; {
			if pos+32 > len(buf) {
				return nil, corruptf(off+int64(pos), "boot catalog section of %d entries overruns the catalog", count)
			}
			e := buf[pos : pos+32]
			pos += 32
			if e[0] == 0x44 {
				continue // extension record of the previous entry
			}
			be := entry(e)
			if err := check(be, pos-32); err != nil {
				return nil, err
			}
			if len(entries) >= maxBootEntries {
				return nil, formatErr(ErrLimit, off+int64(pos), "more than %d boot entries", maxBootEntries)
			}
			entries = append(entries, be)
			i++
		}
		if h == 0x91 {
			break
		}
	}
	return entries, nil
}
