package pack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
	"sigs.k8s.io/yaml"

	"github.com/upgrade-repo/upgrade-repo/release"
)

// Result describes what BuildTree and Build wrote.
type Result struct {
	// Version is the release's Harvester version.
	Version string
	// VolumeID is the volume identifier the ISO got (Build only).
	VolumeID string
	// Archives are the archives written, in Spec order.
	Archives []BuiltArchive
	// Files are the paths of every file written, in fs.FS form, sorted.
	Files []string
}

// BuiltArchive is one archive written and what it holds.
type BuiltArchive struct {
	// Group is the bundle group of the archive.
	Group string
	// Archive and List are the paths of the archive and its image list (fs.FS form).
	Archive, List string
	// Size is the size of the compressed archive in bytes.
	Size int64
	// Images are the archive's images, by normalised reference, sorted.
	Images []BuiltImage
}

// BuiltImage is one image of an archive.
type BuiltImage struct {
	// Ref is the normalised reference, as containerd names the image.
	Ref string
	// ConfigDigest is the image ID (the digest of its config).
	ConfigDigest string
	// ManifestDigest is the digest of the image's manifest.
	ManifestDigest string
	// Layers are the digests of the image's layers, in order.
	Layers []string
}

// Refs returns the references of the archive's images.
func (a BuiltArchive) Refs() []string {
	out := make([]string, len(a.Images))
	for i, im := range a.Images {
		out[i] = im.Ref
	}
	return out
}

// BuildTree writes the release described by spec into dir, which must exist and should be empty.
func BuildTree(ctx context.Context, spec Spec, dir string) (*Result, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	res := &Result{Version: spec.version()}
	w := treeWriter{dir: dir, res: res}

	if !spec.NoRelease {
		rel := spec.Release
		if rel == nil {
			rel = defaultRelease(spec.version())
		}
		data, err := yaml.Marshal(rel)
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", release.ReleaseFile, err)
		}
		if err := w.write(release.ReleaseFile, bytes.NewReader(data)); err != nil {
			return nil, err
		}
	}

	layers := map[string]*synthLayer{}
	for name, size := range spec.SharedLayers {
		l, err := newSynthLayer(spec.Seed, "shared:"+name, int64(size))
		if err != nil {
			return nil, err
		}
		layers[name] = l
	}
	meta := map[string][]map[string]string{}
	var all []string
	blobs := &release.Blobs{Sizes: map[string]release.BlobSize{}}
	for i, a := range spec.Archives {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ba, err := w.archive(spec, i, a, layers, blobs)
		if err != nil {
			return nil, err
		}
		res.Archives = append(res.Archives, *ba)
		meta[a.Group] = append(meta[a.Group], map[string]string{
			"list":    strings.TrimPrefix(ba.List, release.BundleDir),
			"archive": strings.TrimPrefix(ba.Archive, release.BundleDir),
		})
		all = append(all, ba.Refs()...)
	}
	if len(spec.Archives) > 0 {
		// As the product's build does: every list of the release, sorted and unique, in current/,
		// and one folder for each earlier version the release can be upgraded from.
		sort.Strings(all)
		all = compactStrings(all)
		if err := w.write(listAllPath(CurrentList), strings.NewReader(strings.Join(all, "\n")+"\n")); err != nil {
			return nil, err
		}
		for _, prev := range spec.PreviousVersions {
			if err := w.write(listAllPath(prev), strings.NewReader(strings.Join(previousList(all, spec.version(), prev), "\n")+"\n")); err != nil {
				return nil, err
			}
		}
	}
	if !spec.NoBundle {
		data, err := yaml.Marshal(map[string]any{"images": meta})
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", release.BundleFile, err)
		}
		if err := w.write(release.BundleFile, bytes.NewReader(data)); err != nil {
			return nil, err
		}
		if len(blobs.Archives) > 0 {
			data, err := json.Marshal(blobs)
			if err != nil {
				return nil, fmt.Errorf("write %s: %w", release.BlobsFile, err)
			}
			if err := w.write(release.BlobsFile, bytes.NewReader(data)); err != nil {
				return nil, err
			}
		}
	}
	given := map[string]bool{}
	for _, f := range spec.Files {
		given[path.Clean(strings.TrimPrefix(f.Path, "/"))] = true
	}
	if !spec.NoBoot {
		for _, b := range bootFiles(spec.version()) {
			if given[b.path] {
				continue // the spec's own file of that path replaces it
			}
			r := io.Reader(strings.NewReader(b.text))
			if b.text == "" {
				r = randomReader(spec.Seed, b.path, b.size)
			}
			if err := w.write(b.path, r); err != nil {
				return nil, err
			}
		}
	}
	for i, f := range spec.Files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p := path.Clean(strings.TrimPrefix(f.Path, "/"))
		var r io.Reader
		if f.Source != "" {
			src, err := os.Open(f.Source)
			if err != nil {
				return nil, fmt.Errorf("spec files[%d]: %w", i, err)
			}
			defer src.Close()
			r = src
		} else {
			r = randomReader(spec.Seed, p, int64(f.Size))
		}
		if err := w.write(p, r); err != nil {
			return nil, err
		}
	}
	sort.Strings(res.Files)
	return res, nil
}

// listAllPath is the path of the list of every image of the release dir names (current or an
// earlier version) inside the ISO.
func listAllPath(dir string) string {
	return path.Join(release.BundleDir, "harvester", "images-lists-archive", dir, "image_list_all.txt")
}

// previousList is a plausible list of every image of the earlier release prev: the refs of this
// release, with this release's version in their tags written as prev (the images whose tags do
// not name the version are shared by both), sorted and unique.
func previousList(refs []string, version, prev string) []string {
	out := make([]string, 0, len(refs))
	for _, ref := range refs {
		if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
			ref = ref[:i] + strings.ReplaceAll(ref[i:], version, prev)
		}
		out = append(out, ref)
	}
	sort.Strings(out)
	return compactStrings(out)
}

// bootFile is one of the boot files of a release: text, or size random bytes.
type bootFile struct {
	path string
	size int64
	text string
}

// Boot files as the product's live ISO lays them out: the BIOS El Torito image and the loader
// under boot/x86_64/loader/, the EFI El Torito image boot/uefi.img and the EFI tree. Their bytes
// are random but for the configuration files: nothing here boots.
const (
	biosBootImage = "boot/x86_64/loader/eltorito.img"
	efiBootImage  = "boot/uefi.img"
	bootCatalog   = "boot/x86_64/boot.catalog"
)

func bootFiles(version string) []bootFile {
	return []bootFile{
		{path: biosBootImage, size: 32 << 10},
		{path: "boot/x86_64/loader/boot_hybrid.img", size: 512},
		{path: "boot/x86_64/loader/linux", size: 64 << 10},
		{path: "boot/x86_64/loader/initrd", size: 64 << 10},
		{path: "boot/grub2/grub.cfg", text: "search --no-floppy --file --set=root /boot/kernel\nset default=0\nsource /boot/grub2/harvester.cfg\n"},
		{path: "boot/grub2/harvester.cfg", text: "set harvester_version=" + version + "\n"},
		{path: efiBootImage, size: 64 << 10},
		{path: "EFI/BOOT/bootx64.efi", size: 16 << 10},
		{path: "EFI/BOOT/grub.cfg", text: "search --no-floppy --file --set=root /boot/x86_64/loader/linux\nconfigfile ($root)/boot/grub2/grub.cfg\n"},
	}
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

type treeWriter struct {
	dir string
	res *Result
}

// create opens the file of fs.FS path p in the tree for writing.
func (w treeWriter) create(p string) (*os.File, error) {
	full := filepath.Join(w.dir, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return nil, fmt.Errorf("write %s: %w", p, err)
	}
	f, err := os.Create(full)
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", p, err)
	}
	w.res.Files = append(w.res.Files, p)
	return f, nil
}

func (w treeWriter) write(p string, r io.Reader) error {
	f, err := w.create(p)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if _, err := io.Copy(bw, r); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", p, err)
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// archive writes one docker-save archive, zstd-compressed, and its image list.
func (w treeWriter) archive(spec Spec, idx int, a Archive, shared map[string]*synthLayer, blobs *release.Blobs) (*BuiltArchive, error) {
	where := fmt.Sprintf("archive %s", a.archivePath())
	refs := map[name.Reference]v1.Image{}
	norms := map[name.Reference]string{}
	for j, im := range a.Images {
		norm, err := release.NormalizeRef(im.Ref)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		ref, err := name.ParseReference(norm, name.StrictValidation)
		if err != nil {
			return nil, fmt.Errorf("%s: image %q: %w", where, im.Ref, err)
		}
		var ls []v1.Layer
		for _, sh := range im.Shared {
			ls = append(ls, shared[sh])
		}
		for k, size := range im.Layers {
			l, err := newSynthLayer(spec.Seed, fmt.Sprintf("%d/%d/%s/%d", idx, j, norm, k), int64(size))
			if err != nil {
				return nil, err
			}
			ls = append(ls, l)
		}
		img, err := syntheticImage(ls)
		if err != nil {
			return nil, fmt.Errorf("%s: image %q: %w", where, im.Ref, err)
		}
		refs[ref] = img
		norms[ref] = norm
	}
	retag, err := normalRetag(a.Retag)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	used := map[string]bool{}
	for _, tb := range a.Tarballs {
		if err := addTarball(refs, norms, tb, retag, used); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	for from := range retag {
		if !used[from] {
			return nil, fmt.Errorf("%s: retag %s: no tarball of the archive holds it", where, from)
		}
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("%s: %w", where, errNoImages)
	}

	ba := &BuiltArchive{Group: a.Group, Archive: a.archivePath(), List: a.listPath()}
	ab := release.ArchiveBlobs{Archive: ba.Archive, Images: map[string][]string{}}
	for ref, img := range refs {
		bi := BuiltImage{Ref: norms[ref]}
		digests, err := imageBlobs(img, blobs.Sizes)
		if err != nil {
			return nil, fmt.Errorf("%s: image %s: %w", where, norms[ref], err)
		}
		ab.Images[norms[ref]] = digests
		cfg, err := img.ConfigName()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		dig, err := img.Digest()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		bi.ConfigDigest, bi.ManifestDigest = cfg.String(), dig.String()
		ls, err := img.Layers()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		for _, l := range ls {
			d, err := l.Digest()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			bi.Layers = append(bi.Layers, d.String())
		}
		ba.Images = append(ba.Images, bi)
	}
	sort.Slice(ba.Images, func(i, j int) bool { return ba.Images[i].Ref < ba.Images[j].Ref })
	blobs.Archives = append(blobs.Archives, ab)

	f, err := w.create(ba.Archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	// The tar's size first (one pass that writes it nowhere), so that the zstd frame says it, as
	// zstd does for a file: a plan reads it from the frame's header to forecast each node's disk.
	var tarSize countWriter
	if err := tarball.MultiRefWrite(refs, &tarSize); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	zw, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	zw.ResetContentSize(bw, int64(tarSize))
	if err := tarball.MultiRefWrite(refs, zw); err != nil {
		zw.Close()
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	ba.Size = fi.Size()
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if err := w.write(ba.List, strings.NewReader(strings.Join(ba.Refs(), "\n")+"\n")); err != nil {
		return nil, err
	}
	return ba, nil
}

// imageBlobs returns the digests of img's blobs as containerd keeps them once the archive is
// imported (manifest, config, layers) and records their sizes in sizes: each layer as the
// archive stores it (what tarball.MultiRefWrite writes: Compressed) and, unpacked, its
// uncompressed tar, counted by reading it when the layer is stored compressed.
func imageBlobs(img v1.Image, sizes map[string]release.BlobSize) ([]string, error) {
	raw, err := img.RawManifest()
	if err != nil {
		return nil, err
	}
	dig, err := img.Digest()
	if err != nil {
		return nil, err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	// containerd writes a manifest of its own for a docker archive's image: of the same
	// descriptors, within bytes of the image's.
	sizes[dig.String()] = release.BlobSize{Size: int64(len(raw))}
	sizes[cfgName.String()] = release.BlobSize{Size: int64(len(cfg))}
	out := []string{dig.String(), cfgName.String()}
	ls, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for _, l := range ls {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		out = append(out, d.String())
		if _, ok := sizes[d.String()]; ok {
			continue
		}
		size, err := l.Size()
		if err != nil {
			return nil, err
		}
		unpacked, err := unpackedSize(l, size)
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", d, err)
		}
		sizes[d.String()] = release.BlobSize{Size: size, Unpacked: unpacked}
	}
	return out, nil
}

// unpackedSize is the size of layer l's uncompressed tar: size itself when l is stored
// uncompressed, else counted by reading it.
func unpackedSize(l v1.Layer, size int64) (int64, error) {
	mt, err := l.MediaType()
	if err != nil {
		return 0, err
	}
	if mt == types.DockerUncompressedLayer || mt == types.OCIUncompressedLayer {
		return size, nil
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return io.Copy(io.Discard, rc)
}

// syntheticImage makes a linux/amd64 image of the layers.
func syntheticImage(ls []v1.Layer) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Config.Cmd = []string{"/bin/true"}
	return mutate.ConfigFile(img, cf)
}

// addTarball adds every tagged image of a docker-save tarball to refs.
// normalRetag normalises both sides of an Archive's Retag.
func normalRetag(retag map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(retag))
	for from, to := range retag {
		f, err := release.NormalizeRef(from)
		if err != nil {
			return nil, fmt.Errorf("retag %q: %w", from, err)
		}
		t, err := release.NormalizeRef(to)
		if err != nil {
			return nil, fmt.Errorf("retag %q: %w", to, err)
		}
		out[f] = t
	}
	return out, nil
}

// addTarball adds the tagged images of the docker-save tarball p, each under its retag when
// retag names it (recorded in used).
func addTarball(refs map[name.Reference]v1.Image, norms map[name.Reference]string, p string, retag map[string]string, used map[string]bool) error {
	opener := func() (io.ReadCloser, error) { return os.Open(p) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return fmt.Errorf("tarball %s: %w", p, err)
	}
	n := 0
	for _, d := range m {
		for _, tag := range d.RepoTags {
			norm, err := release.NormalizeRef(tag)
			if err != nil {
				return fmt.Errorf("tarball %s: %w", p, err)
			}
			t, err := name.NewTag(norm, name.StrictValidation)
			if err != nil {
				return fmt.Errorf("tarball %s: tag %q: %w", p, tag, err)
			}
			img, err := tarball.Image(opener, &t)
			if err != nil {
				return fmt.Errorf("tarball %s: image %s: %w", p, tag, err)
			}
			if to, ok := retag[norm]; ok {
				used[norm] = true
				if t, err = name.NewTag(to, name.StrictValidation); err != nil {
					return fmt.Errorf("tarball %s: retag %s as %q: %w", p, tag, to, err)
				}
				norm = to
			}
			if _, dup := norms[t]; dup {
				return fmt.Errorf("tarball %s: two images named %s", p, norm)
			}
			refs[t] = img
			norms[t] = norm
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("tarball %s: no tagged image", p)
	}
	return nil
}

// defaultRelease is a plausible harvester-release.yaml for version, with every key real ones
// carry; among them the 15 the product's upgrade scripts read with `yq -e` (see
// ScriptReleaseKeys), which abort on a missing one.
func defaultRelease(version string) *release.Release {
	chart := strings.TrimPrefix(version, "v")
	return &release.Release{
		Harvester:            version,
		HarvesterChart:       chart,
		Installer:            "0f5c7a2d",
		OS:                   "Harvester " + version,
		Kubernetes:           "v1.32.7+rke2r1",
		Rancher:              "v2.11.3",
		MonitoringChart:      "105.1.2+up61.3.2",
		LoggingChart:         "105.2.0+up4.10.0",
		Kubevirt:             "1.4.1-150600.5.21.2",
		MinUpgradableVersion: "v1.4.2",
		RancherDependencies: map[string]release.Dependency{
			"fleet":           {Chart: "106.1.1+up0.12.4", App: "0.12.4"},
			"fleet-crd":       {Chart: "106.1.1+up0.12.4", App: "0.12.4"},
			"rancher-webhook": {Chart: "106.0.3+up0.7.3", App: "0.7.3"},
		},
		Extra: map[string]any{
			"loggingChartHarvesterEventRouter": "v0.4.0",
			"osImage":                          "rancher/harvester-os:" + version,
		},
	}
}

// ScriptReleaseKeys are the keys of harvester-release.yaml that the product's upgrade scripts
// (package/upgrade/lib.sh, detect_repo) read with `yq -e` under `bash -e`: a release without one
// of them stops the upgrade. minUpgradableVersion is read too, without -e (it may be empty).
var ScriptReleaseKeys = []string{
	".harvester", ".harvesterChart", ".os", ".kubernetes", ".rancher", ".monitoringChart",
	".loggingChart", ".loggingChartHarvesterEventRouter",
	".rancherDependencies.fleet.chart", ".rancherDependencies.fleet.app",
	".rancherDependencies.fleet-crd.chart", ".rancherDependencies.fleet-crd.app",
	".rancherDependencies.rancher-webhook.chart", ".rancherDependencies.rancher-webhook.app",
	".kubevirt",
}

// Build writes the release described by spec into a temporary tree beside out, runs xorriso on
// it and writes the ISO image to out (atomically: a failed build leaves no file at out).
func Build(ctx context.Context, spec Spec, out string) (*Result, error) {
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".pack-*")
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", out, err)
	}
	defer os.RemoveAll(tmp)
	tree := filepath.Join(tmp, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return nil, fmt.Errorf("build %s: %w", out, err)
	}
	res, err := BuildTree(ctx, spec, tree)
	if err != nil {
		return nil, err
	}
	if err := MakeISO(ctx, tree, out, spec.volumeID()); err != nil {
		return nil, err
	}
	res.VolumeID = spec.volumeID()
	return res, nil
}

// MakeISO runs xorriso to make an ISO image of the directory tree (Rock Ridge and Joliet, ISO
// level 3 so files may exceed 4 GiB) and writes it to out atomically. When the tree holds the
// boot images of a release (boot/x86_64/loader/eltorito.img, boot/uefi.img), the ISO gets El
// Torito entries for them (BIOS and EFI, no emulation) and a hidden boot catalog, as real
// releases have; the boot images' bytes stay as they are in the tree.
func MakeISO(ctx context.Context, tree, out, volumeID string) error {
	tmp := out + ".tmp"
	args := []string{"-as", "mkisofs", "-quiet", "-iso-level", "3", "-R", "-J", "-joliet-long", "-V", volumeID, "-o", tmp}
	exists := func(p string) bool {
		fi, err := os.Stat(filepath.Join(tree, filepath.FromSlash(p)))
		return err == nil && fi.Mode().IsRegular()
	}
	if exists(biosBootImage) {
		args = append(args, "-b", biosBootImage, "-no-emul-boot", "-boot-load-size", "4",
			"-c", bootCatalog, "--boot-catalog-hide")
		if exists(efiBootImage) {
			args = append(args, "-eltorito-alt-boot", "-e", efiBootImage, "-no-emul-boot")
		}
	}
	cmd := exec.CommandContext(ctx, "xorriso", append(args, tree)...)
	if outb, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("make iso %s: xorriso is not installed (make deps installs it): %w", out, err)
		}
		return fmt.Errorf("make iso %s: xorriso: %w: %s", out, err, bytes.TrimSpace(outb))
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("make iso %s: %w", out, err)
	}
	return nil
}

// countWriter counts the bytes written to it and keeps none.
type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}
