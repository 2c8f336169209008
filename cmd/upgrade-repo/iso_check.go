package main

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"flag"
	"fmt"
	"hash"
	"slices"
	"strings"
	"time"

	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/iso/inspect"
)

func isoInfo(ctx context.Context, a *app, args []string) error {
	fset, out := isoFlagSet(a, "info")
	timeout := isoTimeoutFlag(fset)
	pos, err := isoFlags(fset, args, 1, 1)
	if err != nil {
		return err
	}
	if err := isoCheckFormat(*out); err != nil {
		return err
	}
	im, err := isoOpen(ctx, a, pos[0], *timeout)
	if err != nil {
		return err
	}
	defer im.Close()
	info := im.fsys.Info()
	if *out == "json" {
		return isoJSON(a.stdout, struct {
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
	sum := fset.String("checksum", "", "expected digest of the whole image, sha512:HEX or sha256:HEX")
	timeout := isoTimeoutFlag(fset)
	pos, err := isoFlags(fset, args, 1, 1)
	if err != nil {
		return err
	}
	if err := isoCheckFormat(*out); err != nil {
		return err
	}
	var (
		newHash func() hash.Hash
		want    []byte
	)
	if *sum != "" {
		algo, hexd, ok := strings.Cut(*sum, ":")
		switch {
		case ok && algo == "sha512":
			newHash = sha512.New
		case ok && algo == "sha256":
			newHash = sha256.New
		default:
			return fmt.Errorf("%w: --checksum %q: want sha512:HEX or sha256:HEX", errUsage, *sum)
		}
		if want, err = hex.DecodeString(hexd); err != nil || len(want) != newHash().Size() {
			return fmt.Errorf("%w: --checksum %q: not a %s digest in hex", errUsage, *sum, algo)
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
	if newHash != nil {
		got, err := inspect.Digest(ctx, im.ra, im.size, newHash())
		if err != nil {
			return fmt.Errorf("verify %s: checksum: %w", isoName(pos[0]), err)
		}
		rep.Checksum = strings.SplitN(*sum, ":", 2)[0] + ":" + hex.EncodeToString(got)
		if !slices.Equal(got, want) {
			if *out == "json" {
				_ = isoJSON(a.stdout, rep)
			}
			return fmt.Errorf("verify %s: checksum mismatch: image has %s, expected %s", isoName(pos[0]), rep.Checksum, *sum)
		}
	}
	rep.OK = true
	if *out == "json" {
		return isoJSON(a.stdout, rep)
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
	pos, err := isoFlags(fset, args, 2, -1)
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
