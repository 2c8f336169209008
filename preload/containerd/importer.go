package containerd

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/containerd/containerd/v2/pkg/labels"
	"github.com/containerd/containerd/v2/pkg/reference"
	"github.com/containerd/platforms"
	distref "github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// jsonLimit bounds the archive's own JSON files (oci-layout, manifest.json) read into memory.
const jsonLimit = 20 << 20

// dockerManifest is one image of the manifest.json that docker save writes.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// importIndex reads an image archive, an OCI image layout or the layout docker save writes, into
// store and returns the descriptor of the index of its images. The result is the one containerd's
// archive.ImportIndex gives for the same archive and store, to the byte of every manifest and
// index it writes; the difference is that each blob is hashed once, by the content writer that
// stores it (the direct ingest's, or containerd's behind its content service), where containerd's
// importer hashes every byte a second time on its way to that writer.
func importIndex(ctx context.Context, store content.Store, r io.Reader) (ocispec.Descriptor, error) {
	var (
		tr       = tar.NewReader(r)
		layout   ocispec.ImageLayout
		manifest []dockerManifest
		links    = map[string]string{}
		blobs    = map[string]ocispec.Descriptor{}
	)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return ocispec.Descriptor{}, err
		}
		if hdr.Typeflag == tar.TypeSymlink {
			// docker save links a layer it already wrote: "<id>/layer.tar" -> "../<other>/layer.tar".
			links[hdr.Name] = path.Join(path.Dir(hdr.Name), hdr.Linkname)
		}
		// The reader gives the pre-POSIX regular file type as TypeReg too.
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		name := path.Clean(hdr.Name)
		switch name {
		case ocispec.ImageLayoutFile:
			if err := json.NewDecoder(io.LimitReader(tr, jsonLimit)).Decode(&layout); err != nil {
				return ocispec.Descriptor{}, fmt.Errorf("untar oci layout %q: %w", hdr.Name, err)
			}
		case "manifest.json":
			if err := json.NewDecoder(io.LimitReader(tr, jsonLimit)).Decode(&manifest); err != nil {
				return ocispec.Descriptor{}, fmt.Errorf("untar manifest %q: %w", hdr.Name, err)
			}
		default:
			dgst, err := writeBlob(ctx, store, tr, hdr.Size, "tar-"+name)
			if err != nil {
				return ocispec.Descriptor{}, fmt.Errorf("failed to ingest %q: %w", hdr.Name, err)
			}
			blobs[name] = ocispec.Descriptor{Digest: dgst, Size: hdr.Size}
		}
	}

	// An OCI layout, when the archive has one, is what it holds (docker save writes both since
	// Docker 25); otherwise the archive is docker save's older layout.
	if layout.Version != "" {
		if layout.Version != ocispec.ImageLayoutVersion {
			return ocispec.Descriptor{}, fmt.Errorf("unsupported OCI version %s", layout.Version)
		}
		idx, ok := blobs[ocispec.ImageIndexFile]
		if !ok {
			return ocispec.Descriptor{}, fmt.Errorf("missing index.json in OCI layout %s", ocispec.ImageLayoutVersion)
		}
		idx.MediaType = ocispec.MediaTypeImageIndex
		return idx, nil
	}
	if manifest == nil {
		return ocispec.Descriptor{}, errors.New("unrecognized image format")
	}
	for name, target := range links {
		desc, ok := blobs[target]
		if !ok {
			return ocispec.Descriptor{}, fmt.Errorf("no target for symlink layer from %q to %q", name, target)
		}
		blobs[name] = desc
	}
	idx := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}}
	for _, m := range manifest {
		descs, err := dockerImage(ctx, store, m, blobs)
		if err != nil {
			return ocispec.Descriptor{}, err
		}
		idx.Manifests = append(idx.Manifests, descs...)
	}
	return writeJSON(ctx, store, idx, ocispec.MediaTypeImageIndex)
}

// writeBlob stores the size bytes of r under the ingest ref and returns their digest, the one
// the writer computed.
func writeBlob(ctx context.Context, store content.Ingester, r io.Reader, size int64, ref string) (digest.Digest, error) {
	cw, err := content.OpenWriter(ctx, store, content.WithRef(ref), content.WithDescriptor(ocispec.Descriptor{Size: size}))
	if err != nil {
		return "", fmt.Errorf("failed to open writer: %w", err)
	}
	defer cw.Close()
	if err := content.Copy(ctx, cw, r, size, ""); err != nil {
		return "", err
	}
	if size == 0 {
		// A writer that was given no byte may not have computed anything.
		return digest.FromBytes(nil), nil
	}
	dgst := cw.Digest()
	if err := dgst.Validate(); err != nil {
		return "", fmt.Errorf("the content writer of %s gave no digest: %w", ref, err)
	}
	return dgst, nil
}

// dockerImage writes the manifest of one image of docker save's manifest.json and returns its
// descriptor once per tag (once, without a name, for an image without tags).
func dockerImage(ctx context.Context, store content.Store, m dockerManifest, blobs map[string]ocispec.Descriptor) ([]ocispec.Descriptor, error) {
	config, ok := blobs[m.Config]
	if !ok {
		return nil, fmt.Errorf("image config %q not found", m.Config)
	}
	config.MediaType = images.MediaTypeDockerSchema2Config
	layers, err := dockerLayers(ctx, store, m.Layers, blobs)
	if err != nil {
		return nil, fmt.Errorf("failed to resolve layers: %w", err)
	}
	// Field for field the manifest containerd writes, so that both name an image alike.
	doc := struct {
		SchemaVersion int                  `json:"schemaVersion"`
		MediaType     string               `json:"mediaType"`
		Config        ocispec.Descriptor   `json:"config"`
		Layers        []ocispec.Descriptor `json:"layers"`
	}{SchemaVersion: 2, MediaType: images.MediaTypeDockerSchema2Manifest, Config: config, Layers: layers}
	desc, err := writeJSON(ctx, store, doc, doc.MediaType)
	if err != nil {
		return nil, fmt.Errorf("write docker manifest: %w", err)
	}
	plats, err := images.Platforms(ctx, store, desc)
	if err != nil {
		return nil, fmt.Errorf("unable to resolve platform: %w", err)
	}
	if len(plats) > 0 {
		// The config's platform; a Windows image without an OS version is taken as this host's,
		// as containerd takes it.
		desc.Platform = &plats[0]
		if desc.Platform.OS == "windows" && desc.Platform.OSVersion == "" {
			desc.Platform.OSVersion = platforms.DefaultSpec().OSVersion
		}
	}
	if len(m.RepoTags) == 0 {
		return []ocispec.Descriptor{desc}, nil
	}
	out := make([]ocispec.Descriptor, 0, len(m.RepoTags))
	for _, tag := range m.RepoTags {
		named, err := distref.ParseDockerRef(tag)
		if err != nil {
			return nil, fmt.Errorf("normalize image ref %q: %w", tag, err)
		}
		name := named.String()
		// OCI's reference name is the tag alone; a name by digest stays whole.
		ociName := name
		if spec, err := reference.Parse(name); err == nil && spec.Object != "" && spec.Object[0] != '@' {
			ociName = spec.Object
		}
		d := desc
		d.Annotations = map[string]string{images.AnnotationImageName: name, ocispec.AnnotationRefName: ociName}
		out = append(out, d)
	}
	return out, nil
}

// dockerLayers returns the descriptors of an image's layers, named by their files in the archive.
// A layer the store already holds compressed (a blob labelled with the layer's digest as its
// uncompressed form, as containerd labels what it unpacked) is referred to by that blob, as
// containerd's importer does; the others are typed by their first bytes.
func dockerLayers(ctx context.Context, store content.Store, files []string, blobs map[string]ocispec.Descriptor) ([]ocispec.Descriptor, error) {
	layers := make([]ocispec.Descriptor, len(files))
	byDigest := map[digest.Digest]*ocispec.Descriptor{}
	filters := make([]string, len(files))
	for i, f := range files {
		desc, ok := blobs[f]
		if !ok {
			return nil, fmt.Errorf("layer %q not found", f)
		}
		layers[i] = desc
		byDigest[desc.Digest] = &layers[i]
		filters[i] = fmt.Sprintf("labels.%q==%s", labels.LabelUncompressed, desc.Digest)
	}
	err := store.Walk(ctx, func(info content.Info) error {
		d := byDigest[digest.Digest(info.Labels[labels.LabelUncompressed])]
		if d == nil {
			return nil
		}
		d.Digest, d.Size = info.Digest, info.Size
		mt, err := layerMediaType(ctx, store, *d)
		if err != nil {
			return err
		}
		d.MediaType = mt
		return nil
	}, filters...)
	if err != nil {
		return nil, fmt.Errorf("failure checking for compressed blobs: %w", err)
	}
	for i := range layers {
		if layers[i].MediaType != "" {
			continue
		}
		mt, err := layerMediaType(ctx, store, layers[i])
		if err != nil {
			return nil, fmt.Errorf("layer %q (%s): %w", files[i], layers[i].Digest, err)
		}
		layers[i].MediaType = mt
	}
	return layers, nil
}

// layerMediaType types a docker layer by its first bytes: uncompressed, or (gzip or any other
// compression containerd knows) the gzip layer type, as containerd's importer types them.
func layerMediaType(ctx context.Context, store content.Provider, desc ocispec.Descriptor) (string, error) {
	ra, err := store.ReaderAt(ctx, desc)
	if err != nil {
		return "", fmt.Errorf("failed to read content store to detect layer media type: %w", err)
	}
	defer ra.Close()
	head := make([]byte, 10)
	n, err := ra.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("failed to read header bytes from layer to detect media type: %w", err)
	}
	// An empty layer is an uncompressed one.
	if n == 0 || compression.DetectCompression(head[:n]) == compression.Uncompressed {
		return images.MediaTypeDockerSchema2Layer, nil
	}
	return images.MediaTypeDockerSchema2LayerGzip, nil
}

// writeJSON stores v as JSON and returns its descriptor of the given media type.
func writeJSON(ctx context.Context, store content.Ingester, v any, mediaType string) (ocispec.Descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := content.WriteBlob(ctx, store, "manifest-"+desc.Digest.String(), bytes.NewReader(data), desc); err != nil {
		return ocispec.Descriptor{}, err
	}
	return desc, nil
}
