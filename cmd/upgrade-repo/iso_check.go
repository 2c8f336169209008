package main

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"flag"
	"fmt"
	"hash"
	"strings"
	"time"

	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/iso/inspect"
	"github.com/upgrade-repo/upgrade-repo/planview"
)

func isoInfo(ctx context.Context, a *app, args []string) error {
	fset, out := isoFlagSet(a, "info")
	timeout := isoTimeoutFlag(fset)
	pos, err := isoFlags(a, fset, args, 1, 1)
	if err != nil {
		return err
	}
	im, err := isoOpen(ctx, a, pos[0], *timeout)
	if err != nil {
		return err
	}
	defer im.Close()
	info := im.fsys.Info()
	if *out == "json" {
		return planview.Encode(a.stdout, struct {
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

// isoVerify checks every file of an image and, with --checksum, the digest of the whole.
func isoVerify(ctx context.Context, a *app, args []string) error {
	fset, out := isoFlagSet(a, "verify")
	sum := fset.String("checksum", "", "expected digest of the whole image: sha512:HEX (the prefix optional, any case, as everywhere) or sha256:HEX")
	timeout := isoTimeoutFlag(fset)
	pos, err := isoFlags(a, fset, args, 1, 1)
	if err != nil {
		return err
	}
	var want isoDigest
	if *sum != "" {
		if want, err = parseISODigest(*sum); err != nil {
			return err
		}
	}
	im, err := isoOpen(ctx, a, pos[0], *timeout)
	if err != nil {
		return err
	}
	defer im.Close()
	rep, err := inspect.Verify(ctx, im.fsys, im.size)
	if err != nil {
		return fmt.Errorf("verify %s: %w", isoName(pos[0]), err)
	}
	if !want.isZero() {
		raw, err := inspect.Digest(ctx, im.ra, im.size, want.newHash())
		if err != nil {
			return fmt.Errorf("verify %s: checksum: %w", isoName(pos[0]), err)
		}
		got, err := want.of(raw)
		if err != nil {
			return fmt.Errorf("verify %s: checksum: %w", isoName(pos[0]), err)
		}
		rep.Checksum = got.String()
		if !got.equal(want) {
			if *out == "json" {
				_ = planview.Encode(a.stdout, rep)
			}
			return fmt.Errorf("verify %s: checksum mismatch: image has %s, expected %s", isoName(pos[0]), rep.Checksum, want)
		}
	}
	rep.OK = true
	if *out == "json" {
		return planview.Encode(a.stdout, rep)
	}
	fmt.Fprintf(a.stdout, "ok: %d files (%d bytes in %d extents), %d directories, %d symlinks\n",
		rep.Files, rep.Bytes, rep.Extents, rep.Dirs, rep.Links)
	if rep.Checksum != "" {
		fmt.Fprintf(a.stdout, "checksum ok: %s\n", rep.Checksum)
	}
	return nil
}

// isoExtract writes a tree of an image under a directory.
func isoExtract(ctx context.Context, a *app, args []string) error {
	fset := flag.NewFlagSet("extract", flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	timeout := isoTimeoutFlag(fset)
	pos, err := isoFlags(a, fset, args, 2, -1)
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
	im, err := isoOpen(ctx, a, pos[0], *timeout)
	if err != nil {
		return err
	}
	defer im.Close()
	n, err := inspect.Extract(ctx, a.log, im.fsys, pos[1], paths)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "extracted %d files (%d bytes), %d directories, %d symlinks into %s\n",
		n.Files, n.Bytes, n.Dirs, n.Links, pos[1])
	return nil
}

// isoDigest is the digest --checksum asks for: the image's SHA-512, read by checksum.Parse as
// every other part of the product reads it (sha512:HEX or the bare HEX, in any case), or its
// SHA-256 (sha256:HEX), which an image's publisher may give instead. One of the two is set.
type isoDigest struct {
	sha512 checksum.Sum
	sha256 checksum.SHA256
}

func parseISODigest(s string) (isoDigest, error) {
	if c, err := checksum.Parse(s); err == nil {
		return isoDigest{sha512: c}, nil
	}
	if c, err := checksum.ParseSHA256(s); err == nil {
		return isoDigest{sha256: c}, nil
	}
	return isoDigest{}, fmt.Errorf("%w: --checksum %q: want sha512:HEX (or its 128 hex digits alone) or sha256:HEX", errUsage, s)
}

func (d isoDigest) isZero() bool { return d.sha512.IsZero() && d.sha256.IsZero() }

// newHash returns the hash d is a sum of.
func (d isoDigest) newHash() hash.Hash {
	if !d.sha256.IsZero() {
		return sha256.New()
	}
	return sha512.New()
}

// of returns raw, the sum of d's hash, as a digest of d's kind.
func (d isoDigest) of(raw []byte) (isoDigest, error) {
	if !d.sha256.IsZero() {
		c, err := checksum.NewSHA256(raw)
		return isoDigest{sha256: c}, err
	}
	c, err := checksum.Parse(hex.EncodeToString(raw))
	return isoDigest{sha512: c}, err
}

func (d isoDigest) equal(o isoDigest) bool {
	return d.sha512.Equal(o.sha512) && d.sha256.Equal(o.sha256)
}

func (d isoDigest) String() string {
	if !d.sha256.IsZero() {
		return d.sha256.String()
	}
	return d.sha512.String()
}
