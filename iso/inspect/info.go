package inspect

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/upgrade-repo/upgrade-repo/iso"
)

// Info describes an image as a whole: its volume descriptors and boot entries (iso.VolumeInfo)
// and how many entries its tree holds.
type Info struct {
	iso.VolumeInfo
	Entries int `json:"entries"`
}

// DescribeImage returns the Info of fsys.
func DescribeImage(fsys *iso.FS) Info {
	return Info{fsys.Info(), fsys.Entries()}
}

// Write writes info for people, one "name: value" line each, the fields left empty left out.
func (info Info) Write(w io.Writer) {
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
	fmt.Fprintf(w, "entries:     %d\n", info.Entries)
	fmt.Fprintf(w, "hybrid:      mbr=%t gpt=%t\n", info.MBR, info.GPT)
	if info.BootCatalog != 0 {
		fmt.Fprintf(w, "boot catalog at byte %d\n", info.BootCatalog)
	}
	for i, b := range info.Boot {
		fmt.Fprintf(w, "boot entry %d: platform %s, bootable %t, %s, load segment %#x, %d sectors at byte %d\n",
			i, b.Platform, b.Bootable, b.Emulation, b.LoadSegment, b.SectorCount, b.Offset)
	}
}
