package iso_test

import (
	"bytes"
	"encoding/binary"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
)

// FuzzOpen opens arbitrary bytes as an image and reads everything it finds. The seeds are real
// images made by xorriso: every tree layout, relocated directories and an El Torito image.
//
// The fuzzer works on a compact form of an image (see compactImage): sectors 16 on, each without
// its trailing zeros. Real images are mostly zeros, and the mutator and the minimizer spend their
// time on the bytes that mean something.
func FuzzOpen(f *testing.F) {
	isotest.RequireXorriso(f)
	src := f.TempDir()
	write := func(name, data string) {
		p := filepath.Join(src, name)
		require.NoError(f, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(f, os.WriteFile(p, []byte(data), 0o644))
	}
	write("a/b/c/d/e/f/g/h/i/deep.txt", "deep")
	write(longName, "long")
	write("boot.img", string(bytes.Repeat([]byte{0xEB}, 2048)))
	write("empty", "")
	require.NoError(f, os.Symlink("a/b/c", filepath.Join(src, "link")))
	for _, args := range [][]string{
		{"-abort_on", "FAILURE", "-as", "mkisofs", "-R", "-J", "-no-pad"},
		{"-abort_on", "FAILURE", "-as", "mkisofs", "--norock", "-J", "-no-pad"},
		{"-abort_on", "FAILURE", "-as", "mkisofs", "--norock", "-iso-level", "1", "-no-pad"},
		{"-abort_on", "FAILURE", "-compliance", "deep_paths_off", "-as", "mkisofs", "-R", "-rr_reloc_dir", "rr_moved", "-no-pad"},
		{"-abort_on", "FAILURE", "-as", "mkisofs", "-R", "-no-pad", "-b", "boot.img", "-no-emul-boot"},
	} {
		out := filepath.Join(f.TempDir(), "seed.iso")
		isotest.Xorriso(f, append(args, "-o", out, src)...)
		data, err := os.ReadFile(out)
		require.NoError(f, err)
		compact := compactImage(data)
		expanded := expandImage(compact)
		require.True(f, bytes.Equal(expanded, data[:len(expanded)]), "the compact form of a seed does not expand to the seed")
		f.Add(compact)
	}
	f.Fuzz(func(t *testing.T, compact []byte) {
		data := expandImage(compact)
		fsys, err := iso.Open(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			var fe *iso.FormatError
			require.ErrorAs(t, err, &fe, "open failed without a *FormatError")
			return
		}
		size := int64(len(data))
		_ = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
			require.NoError(t, err, "walk %s", p)
			info, err := d.Info()
			require.NoError(t, err, "info %s", p)
			switch {
			case d.Type()&fs.ModeSymlink != 0:
				_, err := fsys.ReadLink(p)
				require.NoError(t, err, "readlink %s", p)
				_, _ = fsys.Stat(p) // may dangle or loop, must not hang
			case d.Type().IsRegular():
				ext, err := fsys.Extents(p)
				require.NoError(t, err, "extents %s", p)
				var total int64
				for _, e := range ext {
					require.True(t, e.Offset >= 0 && e.Length > 0 && e.Offset+e.Length <= size,
						"%s: extent %+v outside an image of %d bytes", p, e, size)
					total += e.Length
				}
				require.Equal(t, info.Size(), total, "%s: bytes in extents", p)
				b, err := fsys.ReadFile(p)
				require.NoError(t, err, "readfile %s", p)
				require.Len(t, b, int(info.Size()), "readfile %s", p)
			}
			return nil
		})
	})
}

// maxFuzzSectors bounds the size of an expanded fuzz input (2 MiB).
const maxFuzzSectors = 1024

// compactImage encodes the sectors of img from 16 on as a little-endian 16-bit length and the
// sector's bytes up to its last non-zero byte.
func compactImage(img []byte) []byte {
	var out []byte
	for off := 16 * 2048; off < len(img); off += 2048 {
		sector := bytes.TrimRight(img[off:min(off+2048, len(img))], "\x00")
		out = binary.LittleEndian.AppendUint16(out, uint16(len(sector)))
		out = append(out, sector...)
	}
	return out
}

// expandImage decodes compactImage: 16 zero sectors, then one sector per length-prefixed chunk.
func expandImage(compact []byte) []byte {
	img := make([]byte, 16*2048, 64*2048)
	for n := 0; len(compact) >= 2 && n < maxFuzzSectors; n++ {
		l := min(int(binary.LittleEndian.Uint16(compact))%2049, len(compact)-2)
		sector := make([]byte, 2048)
		copy(sector, compact[2:2+l])
		img = append(img, sector...)
		compact = compact[2+l:]
	}
	return img
}
