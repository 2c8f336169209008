package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/upgrade-repo/upgrade-repo/checksum"
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
	info := inspect.DescribeImage(im.fsys)
	if *out == "json" {
		return planview.Encode(a.stdout, info)
	}
	info.Write(a.stdout)
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
	var want inspect.Want // none without --checksum
	if *sum != "" {
		d, err := checksum.ParseDigest(*sum)
		if err != nil {
			return fmt.Errorf("%w: --checksum %w", errUsage, err)
		}
		want = d
	}
	im, err := isoOpen(ctx, a, pos[0], *timeout)
	if err != nil {
		return err
	}
	defer im.Close()
	rep, err := inspect.Check(ctx, im.fsys, im.ra, im.size, want)
	if errors.Is(err, inspect.ErrMismatch) && *out == "json" {
		_ = planview.Encode(a.stdout, rep)
	}
	if err != nil {
		return fmt.Errorf("verify %s: %w", isoName(pos[0]), err)
	}
	if *out == "json" {
		return planview.Encode(a.stdout, rep)
	}
	rep.Write(a.stdout)
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
	n.Write(a.stdout, pos[1])
	return nil
}
