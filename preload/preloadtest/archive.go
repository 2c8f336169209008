package preloadtest

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

// Image is a test image and the reference it is saved under.
type Image struct {
	Ref string
	Img v1.Image
}

// ImageOptions shape NewImage's result.
type ImageOptions struct {
	// OS and Arch go into the config; both empty makes a config without a platform.
	OS, Arch string
	// Shared layers come first, then Own fresh random layers of LayerSize bytes.
	Shared    []v1.Layer
	Own       int
	LayerSize int64
	// OCI uses OCI media types instead of docker's.
	OCI bool
	// Seed makes the random layers reproducible.
	Seed int64
}

// NewLayer returns a random layer of about size bytes.
func NewLayer(t testing.TB, size int64, oci bool, seed int64) v1.Layer {
	t.Helper()
	mt := types.DockerLayer
	if oci {
		mt = types.OCILayer
	}
	l, err := random.Layer(size, mt, random.WithSource(rand.NewSource(seed)))
	require.NoError(t, err)
	return l
}

// NewImage returns an image made of layers as o says, tagged ref.
func NewImage(t testing.TB, ref string, o ImageOptions) Image {
	t.Helper()
	img := empty.Image
	if o.OCI {
		img = mutate.MediaType(img, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	} else {
		img = mutate.MediaType(img, types.DockerManifestSchema2)
	}
	layers := append([]v1.Layer(nil), o.Shared...)
	size := o.LayerSize
	if size == 0 {
		size = 2048
	}
	for i := range o.Own {
		layers = append(layers, NewLayer(t, size, o.OCI, o.Seed*1000+int64(i)+1))
	}
	img, err := mutate.AppendLayers(img, layers...)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = o.OS, o.Arch
	cf.Config.Labels = map[string]string{"ref": ref}
	img, err = mutate.ConfigFile(img, cf)
	require.NoError(t, err)
	return Image{Ref: ref, Img: img}
}

// DockerArchive returns the uncompressed docker-save archive (classic layout: manifest.json,
// config and layer files) of images.
func DockerArchive(t testing.TB, images ...Image) []byte {
	t.Helper()
	refs := map[name.Reference]v1.Image{}
	for _, im := range images {
		r, err := name.ParseReference(im.Ref)
		require.NoError(t, err)
		refs[r] = im.Img
	}
	var b bytes.Buffer
	require.NoError(t, tarball.MultiRefWrite(refs, &b))
	return b.Bytes()
}

// OCIArchive returns the uncompressed archive newer docker saves: an OCI image layout (oci-layout,
// index.json naming each image, blobs/sha256/...) plus docker's manifest.json.
func OCIArchive(t testing.TB, images ...Image) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	written := map[string]bool{}
	blob := func(h v1.Hash, data []byte) string {
		p := "blobs/" + h.Algorithm + "/" + h.Hex
		if !written[p] {
			written[p] = true
			writeFile(t, tw, p, data)
		}
		return p
	}
	type dockerEntry struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	var docker []dockerEntry
	idx := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for _, im := range images {
		raw, err := im.Img.RawManifest()
		require.NoError(t, err)
		digest, err := im.Img.Digest()
		require.NoError(t, err)
		mt, err := im.Img.MediaType()
		require.NoError(t, err)
		cfg, err := im.Img.RawConfigFile()
		require.NoError(t, err)
		cfgName, err := im.Img.ConfigName()
		require.NoError(t, err)
		e := dockerEntry{Config: blob(cfgName, cfg), RepoTags: []string{strings.TrimPrefix(im.Ref, "docker.io/library/")}}
		layers, err := im.Img.Layers()
		require.NoError(t, err)
		for _, l := range layers {
			d, err := l.Digest()
			require.NoError(t, err)
			rc, err := l.Compressed()
			require.NoError(t, err)
			var lb bytes.Buffer
			_, err = lb.ReadFrom(rc)
			require.NoError(t, err)
			require.NoError(t, rc.Close())
			e.Layers = append(e.Layers, blob(d, lb.Bytes()))
		}
		blob(digest, raw)
		docker = append(docker, e)
		tag := im.Ref[strings.LastIndexByte(im.Ref, ':')+1:]
		idx.Manifests = append(idx.Manifests, v1.Descriptor{
			MediaType: mt, Digest: digest, Size: int64(len(raw)),
			Annotations: map[string]string{
				"io.containerd.image.name":          im.Ref,
				"org.opencontainers.image.ref.name": tag,
			},
		})
	}
	ij, err := json.Marshal(idx)
	require.NoError(t, err)
	writeFile(t, tw, "index.json", ij)
	writeFile(t, tw, "oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	mj, err := json.Marshal(docker)
	require.NoError(t, err)
	writeFile(t, tw, "manifest.json", mj)
	require.NoError(t, tw.Close())
	return b.Bytes()
}

func writeFile(t testing.TB, tw *tar.Writer, name string, data []byte) {
	t.Helper()
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}))
	_, err := tw.Write(data)
	require.NoError(t, err)
}

// Zstd compresses data as zstd does by default, with a checksum.
func Zstd(t testing.TB, data []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(true))
	require.NoError(t, err)
	return enc.EncodeAll(data, nil)
}

// Archive is one archive of a test release: its group, file name, listed references and its
// compressed bytes.
type Archive struct {
	Group string
	Name  string
	Refs  []string
	Data  []byte
}

// ArchivePath returns the fs.FS path WriteRelease gives an archive.
func ArchivePath(a Archive) string { return "bundle/" + a.Group + "/images/" + a.Name }

// WriteRelease writes a release tree under dir: harvester-release.yaml, bundle/metadata.yaml, and
// for each archive bundle/<group>/images/<name> and bundle/<group>/images-lists/<name>.txt.
func WriteRelease(t testing.TB, dir string, archives ...Archive) {
	t.Helper()
	groups := map[string][]string{}
	for _, a := range archives {
		list := "/" + a.Group + "/images-lists/" + strings.TrimSuffix(a.Name, ".tar.zst") + ".txt"
		arch := "/" + a.Group + "/images/" + a.Name
		groups[a.Group] = append(groups[a.Group], "  - list: "+list+"\n    archive: "+arch+"\n")
		write(t, filepath.Join(dir, "bundle", list), []byte(strings.Join(a.Refs, "\n")+"\n"))
		write(t, filepath.Join(dir, "bundle", arch), a.Data)
	}
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	var meta strings.Builder
	meta.WriteString("images:\n")
	for _, g := range names {
		meta.WriteString("  " + g + ":\n" + strings.Join(groups[g], ""))
	}
	write(t, filepath.Join(dir, "bundle", "metadata.yaml"), []byte(meta.String()))
	write(t, filepath.Join(dir, "harvester-release.yaml"), []byte("harvester: v1.5.2\nkubernetes: v1.32.7+rke2r1\n"))
}

func write(t testing.TB, p string, data []byte) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, data, 0o644))
}
