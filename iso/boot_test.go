package iso_test

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
)

func TestBootImages(t *testing.T) {
	t.Parallel()
	isotest.RequireXorriso(t)
	src := t.TempDir()
	writeFixture(t, src, false)
	for name, size := range map[string]int{"boot/bios.img": 4096, "boot/efi.img": 64 << 10} {
		data := make([]byte, size)
		_, err := rand.Read(data)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(src, name), data, 0o644))
	}
	efi := filepath.Join(src, "boot/efi.img")
	tests := []struct {
		name      string
		args      []string
		platforms []string
		mbr, gpt  bool
		appended  bool // the image is larger than its volume
	}{
		{name: "el torito bios", args: []string{"-b", "boot/bios.img", "-no-emul-boot", "-boot-load-size", "4"},
			platforms: []string{"x86"}},
		{name: "el torito bios and efi with a gpt partition", args: []string{
			"-b", "boot/bios.img", "-no-emul-boot", "-boot-load-size", "4",
			"-eltorito-alt-boot", "-e", "boot/efi.img", "-no-emul-boot",
			"-append_partition", "2", "0xef", efi, "-appended_part_as_gpt"},
			platforms: []string{"x86", "EFI"}, mbr: true, gpt: true, appended: true},
		{name: "mbr partition offset", args: []string{"-b", "boot/bios.img", "-no-emul-boot", "-partition_offset", "16"},
			platforms: []string{"x86"}, mbr: true},
		{name: "mbr appended partition", args: []string{"-append_partition", "2", "0xef", efi},
			mbr: true, appended: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			image := isotest.Build(t, src, tt.args...)
			fsys := openImage(t, image)
			info := fsys.Info()
			require.Equal(t, tt.mbr, info.MBR)
			require.Equal(t, tt.gpt, info.GPT)
			require.Equal(t, tt.appended, info.Size < info.ImageSize, "volume %d, image %d", info.Size, info.ImageSize)
			require.Len(t, info.Boot, len(tt.platforms))
			want := map[string]string{"x86": "boot/bios.img", "EFI": "boot/efi.img"}
			for i, p := range tt.platforms {
				b := info.Boot[i]
				require.Equal(t, p, b.Platform)
				require.True(t, b.Bootable)
				require.Equal(t, "no-emulation", b.Emulation)
				// The boot entry points at the bytes of the file it was made from.
				ext, err := fsys.Extents(want[p])
				require.NoError(t, err)
				require.Len(t, ext, 1)
				require.Equal(t, ext[0].Offset, b.Offset)
			}
			if len(tt.platforms) > 0 {
				require.NotZero(t, info.BootCatalog)
			}
			// xorriso shows the boot catalog as a file type of its own ("e"); in the image it is a
			// regular file whose bytes are the catalog.
			xl, fl := xorrisoListing(t, image), fsListing(t, fsys)
			if len(tt.platforms) > 0 {
				require.Equal(t, byte('e'), xl["/boot.catalog"].Mode[0])
				require.Equal(t, "-r--r--r--", fl["/boot.catalog"].Mode)
				ext, err := fsys.Extents("boot.catalog")
				require.NoError(t, err)
				require.Equal(t, []iso.Extent{{Offset: info.BootCatalog, Length: 2048}}, ext)
				delete(xl, "/boot.catalog")
				delete(fl, "/boot.catalog")
			}
			require.Equal(t, xl, fl)
			requireSameFiles(t, fsys, xorrisoExtract(t, image))
			require.NoError(t, fstest.TestFS(fsys, "boot/bios.img", "harvester-release.yaml"))
		})
	}
}
