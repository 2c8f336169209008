package pack

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/upgrade-repo/upgrade-repo/release"
)

// decompress returns the docker-save tar of a .tar.zst archive written into dir.
func decompress(t *testing.T, dir, archive string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, archive))
	require.NoError(t, err)
	defer f.Close()
	zr, err := zstd.NewReader(f)
	require.NoError(t, err)
	defer zr.Close()
	out := filepath.Join(t.TempDir(), "save.tar")
	o, err := os.Create(out)
	require.NoError(t, err)
	_, err = io.Copy(o, zr)
	require.NoError(t, err)
	require.NoError(t, o.Close())
	return out
}

func TestBuildTreeLayout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := Demo("v1.5.2", 9, 64<<10, 100<<10)
	res, err := BuildTree(t.Context(), spec, dir)
	require.NoError(t, err)
	fsys := os.DirFS(dir)

	rel, err := release.LoadRelease(fsys)
	require.NoError(t, err)
	require.Equal(t, "v1.5.2", rel.Harvester)
	require.Equal(t, "v1.4.2", rel.MinUpgradableVersion)
	require.Contains(t, rel.RancherDependencies, "fleet")

	// Every key the product's scripts read with `yq -e` is there and not empty, and so are
	// the other keys real releases carry.
	raw, err := os.ReadFile(filepath.Join(dir, release.ReleaseFile))
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	require.Len(t, ScriptReleaseKeys, 15)
	for _, key := range append(slices.Clone(ScriptReleaseKeys), ".installer", ".osImage", ".minUpgradableVersion") {
		var v any = doc
		for _, part := range strings.Split(strings.TrimPrefix(key, "."), ".") {
			m, ok := v.(map[string]any)
			require.True(t, ok, "%s: %v is not a map", key, v)
			v = m[part]
		}
		require.NotEmpty(t, v, key)
		_, isString := v.(string)
		require.True(t, isString, "%s: %v", key, v)
	}

	b, err := release.LoadBundle(fsys)
	require.NoError(t, err)
	require.Equal(t, []string{"agent", "common", "rke2"}, b.Groups())
	names := map[string][]string{}
	for _, a := range b.Archives {
		names[a.Group] = append(names[a.Group], a.Archive)
	}
	require.Equal(t, map[string][]string{
		"common": {
			"bundle/harvester/images/rancher-images-v2.11.3.tar.zst",
			"bundle/harvester/images/harvester-images-v1.5.2.tar.zst",
			"bundle/harvester/images/harvester-repo-images.tar.zst",
			"bundle/harvester/images/harvester-extra-v1.5.2.tar.zst",
		},
		"rke2": {
			"bundle/harvester/images/rke2-images.linux-amd64-v1.32.7-rke2r1.tar.zst",
			"bundle/harvester/images/rke2-images-multus.linux-amd64-v1.32.7-rke2r1.tar.zst",
		},
		"agent": {"bundle/rancherd/images/rancherd-bootstrap-images-v1.5.2.tar.zst"},
	}, names)
	require.Len(t, res.Archives, 7)

	// The metadata's paths start with a slash, relative to bundle/, as the scripts expect.
	meta, err := os.ReadFile(filepath.Join(dir, release.BundleFile))
	require.NoError(t, err)
	require.Contains(t, string(meta), "archive: /harvester/images/rke2-images.linux-amd64-v1.32.7-rke2r1.tar.zst")
	require.Contains(t, string(meta), "list: /rancherd/images/rancherd-bootstrap-images-v1.5.2.txt")

	var every []string
	for _, a := range b.Archives {
		var built BuiltArchive
		for _, ba := range res.Archives {
			if ba.Archive == a.Archive {
				built = ba
			}
		}
		require.Equal(t, a.List, built.List, "archive %s", a.Archive)
		refs, err := release.LoadImageList(fsys, a)
		require.NoError(t, err)
		require.Equal(t, built.Refs(), refs)
		require.NotEmpty(t, refs)
		every = append(every, refs...)

		save := decompress(t, dir, a.Archive)
		m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(save) })
		require.NoError(t, err)
		require.Len(t, m, len(refs))
		for _, im := range built.Images {
			tag, err := name.NewTag(im.Ref)
			require.NoError(t, err)
			img, err := tarball.ImageFromPath(save, &tag)
			require.NoError(t, err)
			cfg, err := img.ConfigName()
			require.NoError(t, err)
			require.Equal(t, im.ConfigDigest, cfg.String())
			cf, err := img.ConfigFile()
			require.NoError(t, err)
			require.Equal(t, "amd64", cf.Architecture)
			ls, err := img.Layers()
			require.NoError(t, err)
			require.Len(t, ls, 2)
			for i, l := range ls {
				// Reading the layer back must give the bytes its digest names.
				rc, err := l.Uncompressed()
				require.NoError(t, err)
				h, _, err := v1.SHA256(rc)
				require.NoError(t, err)
				require.Equal(t, im.Layers[i], h.String())
			}
		}
		if a.Group == "agent" {
			require.True(t, strings.HasPrefix(a.Archive, "bundle/rancherd/images/"))
			require.True(t, strings.HasPrefix(a.List, "bundle/rancherd/images/"), "agent lists lie beside their archives")
		} else {
			require.True(t, strings.HasPrefix(a.List, "bundle/harvester/images-lists/"))
		}
		require.NotContains(t, a.Archive, "+", "rke2 names write + as -")
	}
	require.Len(t, every, 9)

	// images-lists-archive: current/ (every image of this release) and the previous version's.
	slices.Sort(every)
	all, err := os.ReadFile(filepath.Join(dir, "bundle/harvester/images-lists-archive/current/image_list_all.txt"))
	require.NoError(t, err)
	require.Equal(t, every, strings.Fields(string(all)))
	prev, err := os.ReadFile(filepath.Join(dir, "bundle/harvester/images-lists-archive/v1.4.2/image_list_all.txt"))
	require.NoError(t, err)
	require.Contains(t, strings.Fields(string(prev)), "docker.io/rancher/harvester:v1.4.2")
	require.Contains(t, strings.Fields(string(prev)), "docker.io/rancher/rancher:v2.11.3", "images whose tags do not name the version are shared")
	require.NotContains(t, string(prev), "v1.5.2")
	entries, err := os.ReadDir(filepath.Join(dir, "bundle/harvester/images-lists-archive"))
	require.NoError(t, err)
	require.Len(t, entries, 2)

	fi, err := os.Stat(filepath.Join(dir, "rootfs.squashfs"))
	require.NoError(t, err)
	require.EqualValues(t, 100<<10, fi.Size())
	require.Contains(t, res.Files, "rootfs.squashfs")
	for _, p := range []string{"boot/x86_64/loader/eltorito.img", "boot/x86_64/loader/linux", "boot/x86_64/loader/initrd", "boot/uefi.img", "EFI/BOOT/bootx64.efi", "boot/grub2/harvester.cfg"} {
		require.Contains(t, res.Files, p)
		require.FileExists(t, filepath.Join(dir, p))
	}

	// Every image shares the base layer.
	base := res.Archives[0].Images[0].Layers[0]
	for _, a := range res.Archives {
		for _, im := range a.Images {
			require.Equal(t, base, im.Layers[0])
			require.NotEqual(t, base, im.Layers[1])
		}
	}
}

func TestBuildTreeNoBoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := Spec{NoRelease: true, NoBundle: true, NoBoot: true, Files: []File{{Path: "a", Size: 1}}}
	res, err := BuildTree(t.Context(), spec, dir)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, res.Files)

	// A file the spec gives replaces the boot file of its path.
	dir = t.TempDir()
	res, err = BuildTree(t.Context(), Spec{NoRelease: true, NoBundle: true, Files: []File{{Path: "boot/uefi.img", Size: 3}}}, dir)
	require.NoError(t, err)
	fi, err := os.Stat(filepath.Join(dir, "boot/uefi.img"))
	require.NoError(t, err)
	require.EqualValues(t, 3, fi.Size())
	n := 0
	for _, f := range res.Files {
		if f == "boot/uefi.img" {
			n++
		}
	}
	require.Equal(t, 1, n, "written once")
}

func TestBuildTreeDeterministic(t *testing.T) {
	t.Parallel()
	build := func(seed int64) (*Result, []byte) {
		dir := t.TempDir()
		spec := Demo("v1.6.0", 3, 10<<10, 5000)
		spec.Seed = seed
		res, err := BuildTree(t.Context(), spec, dir)
		require.NoError(t, err)
		data, err := os.ReadFile(filepath.Join(dir, "rootfs.squashfs"))
		require.NoError(t, err)
		return res, data
	}
	r1, d1 := build(7)
	r2, d2 := build(7)
	r3, d3 := build(8)
	for _, r := range []*Result{r1, r2, r3} {
		for i := range r.Archives {
			r.Archives[i].Size = 0 // tar entry order may differ; the content does not
		}
	}
	require.Equal(t, r1, r2)
	require.Equal(t, d1, d2)
	require.NotEqual(t, r1.Archives[0].Images[0].ConfigDigest, r3.Archives[0].Images[0].ConfigDigest)
	require.False(t, bytes.Equal(d1, d3))
}

func TestBuildTreeTarball(t *testing.T) {
	t.Parallel()
	img, err := random.Image(2048, 2)
	require.NoError(t, err)
	tag, err := name.NewTag("busybox:1.36")
	require.NoError(t, err)
	src := filepath.Join(t.TempDir(), "busybox.tar")
	require.NoError(t, tarball.WriteToFile(src, tag, img))

	dir := t.TempDir()
	res, err := BuildTree(t.Context(), Spec{Archives: []Archive{{Group: "common", Name: "extra", Tarballs: []string{src}}}}, dir)
	require.NoError(t, err)
	require.Equal(t, []string{"docker.io/library/busybox:1.36"}, res.Archives[0].Refs())
	want, err := img.ConfigName()
	require.NoError(t, err)
	require.Equal(t, want.String(), res.Archives[0].Images[0].ConfigDigest)

	save := decompress(t, dir, res.Archives[0].Archive)
	ntag, err := name.NewTag("docker.io/library/busybox:1.36")
	require.NoError(t, err)
	got, err := tarball.ImageFromPath(save, &ntag)
	require.NoError(t, err)
	gotCfg, err := got.ConfigName()
	require.NoError(t, err)
	require.Equal(t, want, gotCfg)
}

// Retag names a tarball's image by another reference in the release: the archive and its list
// hold the new name with the image's own bytes; a retag of a tag no tarball holds, or onto a name
// the archive already has, is refused.
func TestBuildTreeTarballRetag(t *testing.T) {
	t.Parallel()
	bad, err := random.Image(1024, 1)
	require.NoError(t, err)
	good, err := random.Image(1024, 1)
	require.NoError(t, err)
	badTag, err := name.NewTag("local/bad-kube-apiserver:v1.34.4")
	require.NoError(t, err)
	goodTag, err := name.NewTag("registry.k8s.io/pause:3.10")
	require.NoError(t, err)
	src := filepath.Join(t.TempDir(), "images.tar")
	f, err := os.Create(src)
	require.NoError(t, err)
	require.NoError(t, tarball.MultiRefWrite(map[name.Reference]v1.Image{badTag: bad, goodTag: good}, f))
	require.NoError(t, f.Close())

	tests := []struct {
		name    string
		retag   map[string]string
		want    []string
		wantErr string
	}{
		{
			name: "renamed", retag: map[string]string{"local/bad-kube-apiserver:v1.34.4": "registry.k8s.io/kube-apiserver:v1.34.4"},
			want: []string{"registry.k8s.io/kube-apiserver:v1.34.4", "registry.k8s.io/pause:3.10"},
		},
		{name: "no such tag", retag: map[string]string{"local/other:1": "registry.k8s.io/kube-apiserver:v1.34.4"}, wantErr: "retag docker.io/local/other:1: no tarball of the archive holds it"},
		{name: "onto a name the archive has", retag: map[string]string{"local/bad-kube-apiserver:v1.34.4": "registry.k8s.io/pause:3.10"}, wantErr: "two images named registry.k8s.io/pause:3.10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			res, err := BuildTree(t.Context(), Spec{Archives: []Archive{{Group: "common", Name: "k", Tarballs: []string{src}, Retag: tt.retag}}}, dir)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			refs := res.Archives[0].Refs()
			sort.Strings(refs)
			require.Equal(t, tt.want, refs)
			save := decompress(t, dir, res.Archives[0].Archive)
			to, err := name.NewTag(tt.want[0])
			require.NoError(t, err)
			got, err := tarball.ImageFromPath(save, &to)
			require.NoError(t, err)
			gotCfg, err := got.ConfigName()
			require.NoError(t, err)
			wantCfg, err := bad.ConfigName()
			require.NoError(t, err)
			require.Equal(t, wantCfg, gotCfg, "the new name holds the retagged image's bytes")
		})
	}
}

func TestBuildTreeWithoutMetadata(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := BuildTree(t.Context(), Spec{NoRelease: true, NoBundle: true, Files: []File{{Path: "/boot/kernel", Size: 10}}}, dir)
	require.NoError(t, err)
	_, err = release.LoadRelease(os.DirFS(dir))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = release.LoadBundle(os.DirFS(dir))
	require.ErrorIs(t, err, os.ErrNotExist)
	fi, err := os.Stat(filepath.Join(dir, "boot/kernel"))
	require.NoError(t, err)
	require.EqualValues(t, 10, fi.Size())
}

func TestValidate(t *testing.T) {
	t.Parallel()
	img := []Image{{Ref: "a:1", Layers: []Size{1}}}
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"no name", Spec{Archives: []Archive{{Group: "common", Images: img}}}, "archives[0]: group and name are required"},
		{"slash in name", Spec{Archives: []Archive{{Group: "common", Name: "../x", Images: img}}}, "plain file names"},
		{"twice", Spec{Archives: []Archive{{Group: "common", Name: "x", Images: img}, {Group: "rke2", Name: "x", Images: img}}}, "appears twice"},
		{"empty", Spec{Archives: []Archive{{Group: "common", Name: "x"}}}, "needs images or tarballs"},
		{"bad ref", Spec{Archives: []Archive{{Group: "common", Name: "x", Images: []Image{{Ref: "a b", Layers: []Size{1}}}}}}, "archives[0].images[0]: invalid image reference"},
		{"no layer", Spec{Archives: []Archive{{Group: "common", Name: "x", Images: []Image{{Ref: "a"}}}}}, "at least one layer"},
		{"unknown shared", Spec{Archives: []Archive{{Group: "common", Name: "x", Images: []Image{{Ref: "a", Shared: []string{"s"}}}}}}, `shared layer "s"`},
		{"escaping file", Spec{Files: []File{{Path: "../etc/passwd"}}}, "files[0]: path"},
		{"layout file", Spec{Files: []File{{Path: "bundle/metadata.yaml"}}}, "belongs to the release layout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.spec.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestParseSpec(t *testing.T) {
	t.Parallel()
	s, err := ParseSpec([]byte(`
version: v1.7.0
seed: 3
sharedLayers: {base: 1MiB}
archives:
- group: common
  name: harvester-images-v1.7.0
  images:
  - {ref: "rancher/harvester:v1.7.0", shared: [base], layers: [4096, "2KiB"]}
files:
- {path: rootfs.squashfs, size: 1.5GiB}
`))
	require.NoError(t, err)
	require.Equal(t, Size(1<<20), s.SharedLayers["base"])
	require.Equal(t, []Size{4096, 2048}, s.Archives[0].Images[0].Layers)
	require.Equal(t, Size(3<<29), s.Files[0].Size)

	_, err = ParseSpec([]byte("version: v1\nbogus: 1\n"))
	require.ErrorContains(t, err, "bogus")
	_, err = ParseSpec([]byte("files: [{path: a, size: 12XB}]"))
	require.ErrorContains(t, err, `invalid size "12XB"`)
}

func TestBuildISO(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "release.iso")
	res, err := Build(t.Context(), Demo("v1.5.2", 3, 4096, 0), out)
	require.NoError(t, err)
	require.Equal(t, "COS_LIVE", res.VolumeID)
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	pvd := make([]byte, 2048)
	_, err = f.ReadAt(pvd, 16*2048)
	require.NoError(t, err)
	require.Equal(t, "CD001", string(pvd[1:6]))
	require.Equal(t, "COS_LIVE", strings.TrimSpace(string(pvd[40:72])))
	// The boot record: El Torito entries for the release's boot images.
	brvd := make([]byte, 2048)
	_, err = f.ReadAt(brvd, 17*2048)
	require.NoError(t, err)
	require.Equal(t, byte(0), brvd[0])
	require.Equal(t, "EL TORITO SPECIFICATION", strings.TrimRight(string(brvd[7:39]), "\x00"))
	entries, err := os.ReadDir(filepath.Dir(out))
	require.NoError(t, err)
	require.Len(t, entries, 1, "the temporary tree is removed")
}

// Each archive's zstd frame says the size of its tar, as zstd does for a file, so that a plan
// forecasts a node's disk from a few bytes of the ISO.
func TestBuildTreeArchivesSayTheirSize(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res, err := BuildTree(t.Context(), Demo("v1.5.2", 3, 64<<10, 100<<10), dir)
	require.NoError(t, err)
	require.NotEmpty(t, res.Archives)
	for _, a := range res.Archives {
		f, err := os.Open(filepath.Join(dir, a.Archive))
		require.NoError(t, err)
		head := make([]byte, zstd.HeaderMaxSize)
		_, err = io.ReadFull(f, head)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		var h zstd.Header
		require.NoError(t, h.Decode(head))
		require.True(t, h.HasFCS, "archive %s: the frame says its size", a.Archive)
		st, err := os.Stat(decompress(t, dir, a.Archive))
		require.NoError(t, err)
		require.Equal(t, uint64(st.Size()), h.FrameContentSize, "archive %s", a.Archive)
	}
}

func TestBuildTreeRecordsBlobs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res, err := BuildTree(t.Context(), Demo("v1.5.2", 3, 64<<10, 100<<10), dir)
	require.NoError(t, err)
	b, err := release.LoadBlobs(os.DirFS(dir))
	require.NoError(t, err)
	require.Len(t, b.Archives, len(res.Archives))
	for i, a := range res.Archives {
		ab := b.Archive(a.Archive)
		require.NotNil(t, ab, "archive %s", a.Archive)
		require.Equal(t, a.Archive, b.Archives[i].Archive, "in the bundle's order")
		require.Len(t, ab.Images, len(a.Images))
		for _, im := range a.Images {
			want := append([]string{im.ManifestDigest, im.ConfigDigest}, im.Layers...)
			require.Equal(t, want, ab.Images[im.Ref], "image %s: manifest, config, layers", im.Ref)
			for _, l := range im.Layers {
				// Synthetic layers are stored uncompressed: unpacked, the same tar.
				s := b.Sizes[l]
				require.Positive(t, s.Size, "layer %s", l)
				require.Equal(t, s.Size, s.Unpacked, "layer %s", l)
			}
			require.Zero(t, b.Sizes[im.ConfigDigest].Unpacked)
			require.Positive(t, b.Sizes[im.ConfigDigest].Size)
		}
	}
}

// BuildTo without an ISO writes the tree, creating its directory, and Write says what it wrote:
// an archive a line, then the totals.
func TestBuildToTreeAndWrite(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "new", "tree")
	res, err := BuildTo(t.Context(), Demo("v1.5.2", 3, 64<<10, 0), "", dir)
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(dir, "harvester-release.yaml"))
	var b strings.Builder
	res.Write(&b, dir)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	require.Len(t, lines, len(res.Archives)+1)
	images := 0
	for i, a := range res.Archives {
		images += len(a.Images)
		require.Equal(t, fmt.Sprintf("%-7s %s (%d bytes, %d images)", a.Group, a.Archive, a.Size, len(a.Images)), lines[i])
	}
	require.Equal(t, fmt.Sprintf("wrote %s: release v1.5.2, %d archives, %d images, %d files", dir, len(res.Archives), images, len(res.Files)), lines[len(lines)-1])
}
