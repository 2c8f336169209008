package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/upgrade-repo/upgrade-repo/planview"
	"github.com/upgrade-repo/upgrade-repo/release/pack"
)

const releaseUsage = `usage: upgrade-repo release pack (--out FILE.iso | --tree DIR) [flags]

Build a release ISO in the layout of a Harvester release (volume id COS_LIVE):
harvester-release.yaml with every key real ones carry, bundle/metadata.yaml, zstd-compressed
docker-save archives (common: rancher, harvester, harvester-repo, harvester-extra; rke2: rke2 and
rke2-multus; agent: under bundle/rancherd/images/), their image lists,
images-lists-archive/current/ and the previous version's list, and boot files under
boot/x86_64/loader/ and EFI/ with El Torito entries. Images are synthetic (random layers of
--layer-size bytes sharing one base layer, all derived from --seed) or taken from docker-save
tarballs (--tarball); --spec FILE describes the whole release in YAML instead (see
release/pack.Spec).

`

// runRelease dispatches the release subcommands (only pack for now).
func runRelease(ctx context.Context, a *app, args []string) error {
	if done, err := helpOrMissing(a.stdout, a.stderr, args, func(w io.Writer) { fmt.Fprint(w, releaseUsage) }, "release needs a subcommand: pack"); done {
		return err
	}
	if args[0] != "pack" {
		return fmt.Errorf("%w: unknown release subcommand %q (want pack)", errUsage, args[0])
	}
	return runReleasePack(ctx, a, args[1:])
}

type tarballs []string

func (t *tarballs) String() string     { return fmt.Sprint(*t) }
func (t *tarballs) Set(v string) error { *t = append(*t, v); return nil }

type sizeFlag struct{ v *pack.Size }

func (s sizeFlag) String() string {
	if s.v == nil {
		return "0"
	}
	return fmt.Sprint(int64(*s.v))
}

func (s sizeFlag) Set(v string) error {
	n, err := pack.ParseSize(v)
	if err != nil {
		return err
	}
	*s.v = n
	return nil
}

func runReleasePack(ctx context.Context, a *app, args []string) error {
	fset := flag.NewFlagSet("release pack", flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	fset.Usage = func() { fmt.Fprint(fset.Output(), releaseUsage); fset.PrintDefaults() }
	out := fset.String("out", "", "the ISO file to write")
	tree := fset.String("tree", "", "also (or only) write the release's files into this directory")
	specFile := fset.String("spec", "", "a YAML Spec of the release (replaces --version, --images, --layer-size, --rootfs-size)")
	version := fset.String("version", "v1.5.2", "the Harvester version of the release")
	images := fset.Int("images", 7, "number of synthetic images, spread over the release's archives (at least one each)")
	layerSize := pack.Size(1 << 20)
	fset.Var(sizeFlag{&layerSize}, "layer-size", "size of each synthetic layer, such as 4MiB (every image has a shared base layer and its own)")
	var rootfs pack.Size
	fset.Var(sizeFlag{&rootfs}, "rootfs-size", "size of a random rootfs.squashfs to add, such as 1GiB (0: none)")
	seed := fset.Int64("seed", 1, "seed of every synthetic byte")
	volumeID := fset.String("volume-id", "", "volume id of the ISO (default COS_LIVE)")
	var tbs tarballs
	fset.Var(&tbs, "tarball", "a docker-save tarball whose images join the common group (repeatable)")
	output := fset.String("o", "text", "output format: text or json")
	if help, err := parseFlags(a.stdout, fset, args); help || err != nil {
		return err
	}
	switch {
	case fset.NArg() > 0:
		return fmt.Errorf("%w: release pack takes no arguments, got %q", errUsage, fset.Args())
	case *out == "" && *tree == "":
		return fmt.Errorf("%w: release pack needs --out FILE.iso or --tree DIR", errUsage)
	case *output != "text" && *output != "json":
		return checkOutput(*output, "text", "json")
	case *images < 0:
		return fmt.Errorf("%w: --images must not be negative", errUsage)
	}

	var spec pack.Spec
	if *specFile != "" {
		data, err := os.ReadFile(*specFile)
		if err != nil {
			return err
		}
		s, err := pack.ParseSpec(data)
		if err != nil {
			return fmt.Errorf("%s: %w", *specFile, err)
		}
		spec = *s
	} else {
		spec = pack.Demo(*version, *images, layerSize, rootfs)
		spec.Seed = *seed
	}
	if *volumeID != "" {
		spec.VolumeID = *volumeID
	}
	if len(tbs) > 0 {
		spec.Archives = append(spec.Archives, pack.Archive{Group: "common", Name: "extra-images", Tarballs: tbs})
	}

	res, err := pack.BuildTo(ctx, spec, *out, *tree)
	if err != nil {
		return err
	}
	if *output == "json" {
		return planview.Encode(a.stdout, res)
	}
	where := *out
	if where == "" {
		where = *tree
	}
	res.Write(a.stdout, where)
	return nil
}
