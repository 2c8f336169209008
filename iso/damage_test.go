package iso_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
)

// damageFixture is a small Rock Ridge + Joliet image and the facts the damage cases patch.
type damageFixture struct {
	image   []byte
	rootLBA uint32
	dirRec  int64 // record of the directory "bundle"
	fileRec int64 // record of "harvester-release.yaml"
	longRec int64 // record of the long-named file (its NM continues in a CE area)
}

func newDamageFixture(t *testing.T) damageFixture {
	t.Helper()
	_, p := fixtureImage(t, false, "-R", "-J", "-no-pad")
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	fsys, err := iso.Open(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	rec := func(name string) int64 {
		info, err := fsys.Lstat(name)
		require.NoError(t, err)
		return info.Sys().(*iso.Stat).Record
	}
	return damageFixture{
		image:   data,
		rootLBA: binary.LittleEndian.Uint32(data[16*2048+156+2:]),
		dirRec:  rec("bundle"),
		fileRec: rec("harvester-release.yaml"),
		longRec: rec(longName),
	}
}

// put32 writes v both-endian (as ISO 9660 stores 32-bit numbers) at off.
func put32(b []byte, off int64, v uint32) {
	binary.LittleEndian.PutUint32(b[off:], v)
	binary.BigEndian.PutUint32(b[off+4:], v)
}

func TestDamagedImages(t *testing.T) {
	t.Parallel()
	isotest.RequireXorriso(t)
	fx := newDamageFixture(t)
	ceEntry := func(b []byte) int64 {
		recLen := int64(b[fx.longRec])
		i := bytes.Index(b[fx.longRec:fx.longRec+recLen], []byte{'C', 'E', 28, 1})
		require.Positive(t, i, "the long name's record has a CE entry")
		return fx.longRec + int64(i)
	}
	tests := []struct {
		name     string
		damage   func(b []byte) []byte
		class    error
		offset   func(b []byte) int64 // the byte offset the error must name; nil: any
		contains string
	}{
		{name: "not an image", damage: func([]byte) []byte { return bytes.Repeat([]byte("x"), 64<<10) },
			class: iso.ErrNotISO, contains: "no CD001"},
		{name: "too small", damage: func(b []byte) []byte { return b[:1000] }, class: iso.ErrNotISO, contains: "too small"},
		{name: "truncated below the declared volume size", damage: func(b []byte) []byte { return b[:len(b)-5*2048] },
			class: iso.ErrTruncated, offset: func([]byte) int64 { return 16*2048 + 80 }, contains: "volume declares"},
		{name: "no terminator", damage: func(b []byte) []byte {
			for s := 17; s < len(b)/2048; s++ {
				copy(b[s*2048:], append([]byte{2}, "CD001\x01"...))
			}
			return b
		}, class: iso.ErrTruncated, contains: "no terminator"},
		{name: "block size 512", damage: func(b []byte) []byte {
			binary.LittleEndian.PutUint16(b[16*2048+128:], 512)
			binary.BigEndian.PutUint16(b[16*2048+130:], 512)
			return b
		}, class: iso.ErrUnsupported, offset: func([]byte) int64 { return 16*2048 + 128 }, contains: "logical block size 512"},
		{name: "directory loop", damage: func(b []byte) []byte {
			put32(b, fx.dirRec+2, fx.rootLBA)
			return b
		}, class: iso.ErrCorrupt, offset: func([]byte) int64 { return fx.dirRec }, contains: "directory loop"},
		{name: "directory of absurd size", damage: func(b []byte) []byte {
			put32(b, fx.dirRec+10, 0xFFFFF800)
			return b
		}, class: iso.ErrCorrupt, offset: func([]byte) int64 { return fx.dirRec }, contains: "directory of 4294965248 bytes"},
		{name: "directory outside the image", damage: func(b []byte) []byte {
			put32(b, fx.dirRec+2, 0x00FFFFFF)
			return b
		}, class: iso.ErrCorrupt, offset: func([]byte) int64 { return fx.dirRec }, contains: "outside the image"},
		{name: "file of absurd size", damage: func(b []byte) []byte {
			put32(b, fx.fileRec+10, 0xFFFFFFFF)
			return b
		}, class: iso.ErrCorrupt, offset: func([]byte) int64 { return fx.fileRec }, contains: "extent at byte"},
		{name: "continuation area outside the image", damage: func(b []byte) []byte {
			put32(b, ceEntry(b)+4, 0x7FFFFFFF)
			return b
		}, class: iso.ErrCorrupt, contains: "lies outside the image"},
		{name: "continuation area larger than a block", damage: func(b []byte) []byte {
			put32(b, ceEntry(b)+20, 1<<30)
			return b
		}, class: iso.ErrCorrupt, contains: "larger than a block"},
		{name: "continuation area chained to itself", damage: func(b []byte) []byte {
			ce := ceEntry(b)
			block := binary.LittleEndian.Uint32(b[ce+4:])
			at := int64(block)*2048 + int64(binary.LittleEndian.Uint32(b[ce+12:]))
			// Write a CE entry at the start of the area that points back at the area itself.
			copy(b[at:], b[ce:ce+28])
			return b
		}, class: iso.ErrCorrupt, contains: "chained continuation areas"},
		{name: "record too short", damage: func(b []byte) []byte {
			b[fx.fileRec] = 20
			return b
		}, class: iso.ErrCorrupt, offset: func([]byte) int64 { return fx.fileRec }, contains: "directory record of 20 bytes is too short"},
		{name: "system use entry overruns its area", damage: func(b []byte) []byte {
			// The first SUSP entry of the file's record claims 250 bytes.
			nameLen := int64(b[fx.fileRec+32])
			su := fx.fileRec + 33 + nameLen
			if nameLen%2 == 0 {
				su++
			}
			b[su+2] = 250
			return b
		}, class: iso.ErrCorrupt, contains: "system use entry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			img := tt.damage(bytes.Clone(fx.image))
			fsys, err := iso.Open(bytes.NewReader(img), int64(len(img)))
			require.Nil(t, fsys)
			require.ErrorIs(t, err, tt.class)
			var fe *iso.FormatError
			require.ErrorAs(t, err, &fe)
			require.ErrorContains(t, err, tt.contains)
			require.ErrorContains(t, err, "at byte")
			if tt.offset != nil {
				require.Equal(t, tt.offset(img), fe.Offset, "%v", err)
			}
		})
	}
}

func TestSymlinkResolution(t *testing.T) {
	t.Parallel()
	isotest.RequireXorriso(t)
	src := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(src, "a/b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "a/b/f"), []byte("data"), 0o644))
	// A name that is not UTF-8 (ISO 8859-1 "café") reads as its ISO 8859-1 characters.
	require.NoError(t, os.WriteFile(filepath.Join(src, "caf\xe9"), []byte("latin"), 0o644))
	for link, target := range map[string]string{
		"loop1": "loop2", "loop2": "loop1", "self": "self", "dangling": "nowhere",
		"a/up": "../a/b/f", "a/root": "/", "a/escape": "../../../../a/b/f", "a/b/abs": "/a/b",
	} {
		require.NoError(t, os.Symlink(target, filepath.Join(src, link)))
	}
	fsys := openImage(t, isotest.Build(t, src))
	tests := []struct {
		name, path string
		want       string
		err        error
	}{
		{name: "relative with ..", path: "a/up", want: "data"},
		{name: "latin-1 name", path: "café", want: "latin"},
		{name: "escape is clamped at the root", path: "a/escape", want: "data"},
		{name: "through the root", path: "a/root/a/b/f", want: "data"},
		{name: "absolute dir in the middle", path: "a/b/abs/f", want: "data"},
		{name: "loop", path: "loop1", err: iso.ErrTooManyLinks},
		{name: "self", path: "self/x", err: iso.ErrTooManyLinks},
		{name: "dangling", path: "dangling", err: fs.ErrNotExist},
		{name: "file as dir", path: "a/b/f/x", err: fs.ErrNotExist},
		{name: "invalid path", path: "/a", err: fs.ErrInvalid},
		{name: "dot dot path", path: "a/../a", err: fs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data, err := fsys.ReadFile(tt.path)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				var pe *fs.PathError
				require.True(t, errors.As(err, &pe))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, string(data))
		})
	}
	// Lstat and ReadLink do not follow the last link, even a dangling or looping one.
	for _, name := range []string{"loop1", "dangling", "self"} {
		info, err := fsys.Lstat(name)
		require.NoError(t, err)
		require.Equal(t, fs.ModeSymlink, info.Mode().Type())
	}
	_, err := fsys.ReadLink("a/b/f")
	require.ErrorIs(t, err, fs.ErrInvalid)
	_, err = fsys.Extents("a")
	require.ErrorIs(t, err, iso.ErrNotRegular)
}
