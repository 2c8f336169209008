package inspect

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"

	"github.com/upgrade-repo/upgrade-repo/iso"
)

// Report is what Verify finds.
type Report struct {
	Files   int   `json:"files"`
	Dirs    int   `json:"dirs"`
	Links   int   `json:"links"`
	Bytes   int64 `json:"bytes"`
	Extents int   `json:"extents"`
	// Checksum is the digest of the whole image, "ALGO:HEX", when one was asked for.
	Checksum string `json:"checksum,omitempty"`
	OK       bool   `json:"ok"`
}

// Verify reads every regular file of fsys, an image of size bytes, and checks that each of its
// extents lies inside the image and that it reads as many bytes as its size and extents say. The
// first problem is returned, naming the file. Report.OK is left to the caller, which may check
// a digest besides (Digest).
func Verify(ctx context.Context, fsys *iso.FS, size int64) (Report, error) {
	var rep Report
	buf := make([]byte, 1<<20)
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
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
			if x.Offset < 0 || x.Length < 0 || x.Offset+x.Length > size {
				return fmt.Errorf("%s: extent at byte %d of %d bytes lies outside the image of %d bytes", p, x.Offset, x.Length, size)
			}
			total += x.Length
		}
		rep.Extents += len(exts)
		f, err := fsys.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.CopyBuffer(io.Discard, Reader{Ctx: ctx, R: f}, buf)
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
	return rep, err
}

// Digest hashes the size bytes of image with h and returns the sum.
func Digest(ctx context.Context, image io.ReaderAt, size int64, h hash.Hash) ([]byte, error) {
	if _, err := io.CopyBuffer(h, Reader{Ctx: ctx, R: io.NewSectionReader(image, 0, size)}, make([]byte, 1<<20)); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// ErrMismatch is returned by Check when the image's digest is not the one wanted.
var ErrMismatch = errors.New("checksum mismatch")

// Want is a digest an image is checked against, such as a checksum.Digest (not imported: this
// package knows only the ISO format).
type Want interface {
	// NewHash returns the hash the digest is a sum of.
	NewHash() hash.Hash
	// Matches returns raw, a sum of that hash, as "ALGO:HEX", and whether it is the digest.
	Matches(raw []byte) (string, bool, error)
	// String returns the digest as "ALGO:HEX".
	String() string
}

// Check verifies fsys, an image of size bytes read through image (Verify), and, unless want is
// nil, the digest of the whole image (Digest), which Report.Checksum gives. Report.OK is true
// when both pass; on a mismatch (ErrMismatch) the report is returned with the error.
func Check(ctx context.Context, fsys *iso.FS, image io.ReaderAt, size int64, want Want) (Report, error) {
	rep, err := Verify(ctx, fsys, size)
	if err != nil {
		return rep, err
	}
	if want != nil {
		raw, err := Digest(ctx, image, size, want.NewHash())
		if err != nil {
			return rep, fmt.Errorf("checksum: %w", err)
		}
		got, ok, err := want.Matches(raw)
		if err != nil {
			return rep, fmt.Errorf("checksum: %w", err)
		}
		rep.Checksum = got
		if !ok {
			return rep, fmt.Errorf("%w: image has %s, expected %s", ErrMismatch, got, want)
		}
	}
	rep.OK = true
	return rep, nil
}

// Write writes r for people: what was read and, when one was checked, the digest.
func (r Report) Write(w io.Writer) {
	fmt.Fprintf(w, "ok: %d files (%d bytes in %d extents), %d directories, %d symlinks\n",
		r.Files, r.Bytes, r.Extents, r.Dirs, r.Links)
	if r.Checksum != "" {
		fmt.Fprintf(w, "checksum ok: %s\n", r.Checksum)
	}
}
