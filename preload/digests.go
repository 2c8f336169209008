package preload

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/upgrade-repo/upgrade-repo/release"
)

// ImageDigest is what a release's own archive says one of its listed images is, read from the
// archive's bytes: the digest of the image's config (hashed from the config file the archive's
// manifest.json names) and, where the archive is an OCI image layout, the digest of the manifest
// or index its index.json names the image by. A docker save archive in the older layout has no
// manifest of its own (the import writes one, which depends on what the store already held), so
// only its config is known.
type ImageDigest struct {
	// Ref is the listed reference, fully qualified.
	Ref string `json:"ref"`
	// Config is the digest of the image's config ("sha256:<hex>"); empty when the archive names
	// the image only by an index.
	Config string `json:"config,omitempty"`
	// Manifest is the digest of the image's manifest or index ("sha256:<hex>"); empty for an
	// archive in docker save's older layout.
	Manifest string `json:"manifest,omitempty"`
}

// Bounds of ReadDigests.
const (
	// digestJSONLimit bounds each JSON file of an archive read into memory (manifest.json,
	// index.json, an OCI manifest) and each file hashed as a possible config.
	digestJSONLimit = 4 << 20
	// digestKeepLimit bounds the bytes of small blobs kept while an archive is read, for the OCI
	// manifests its index.json (read last) may name.
	digestKeepLimit = 64 << 20
)

var sha256Hex = regexp.MustCompile(`^[a-f0-9]{64}$`)

// ReadDigests reads every archive of the release in fsys (its verified ISO) and returns, for each
// listed reference its archive holds, what the archive says the image is, sorted by reference.
// Each archive is decompressed whole, as the preload decompresses it; no image is imported. An
// archive that cannot be read is skipped and named in the returned error, with the digests of
// the others.
func ReadDigests(ctx context.Context, fsys fs.FS) ([]ImageDigest, error) {
	archives, err := LoadArchives(fsys)
	if err != nil {
		return nil, err
	}
	var (
		out  []ImageDigest
		errs []error
		seen = map[string]bool{}
	)
	for _, ar := range archives {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		held, err := archiveDigestsOf(ctx, fsys, ar.Archive.Archive)
		if err != nil {
			errs = append(errs, fmt.Errorf("read the image digests of %s: %w", ar.Name(), err))
			continue
		}
		for _, ref := range ar.Images {
			d, ok := held[ref]
			if !ok || seen[ref] {
				continue
			}
			seen[ref] = true
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b ImageDigest) int { return strings.Compare(a.Ref, b.Ref) })
	return out, errors.Join(errs...)
}

func archiveDigestsOf(ctx context.Context, fsys fs.FS, name string) (map[string]ImageDigest, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec, err := zstd.NewReader(bufio.NewReaderSize(f, 128<<10), zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(64<<20))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	return ArchiveDigests(ctx, dec)
}

// ArchiveDigests reads an uncompressed image archive (docker save's output, in either layout)
// and returns what it says its images are, by fully qualified reference: the images an OCI
// layout's index.json names (as the import names them) when the archive has one, else those of
// docker save's manifest.json. Configs and manifests are hashed from the archive's bytes.
func ArchiveDigests(ctx context.Context, r io.Reader) (map[string]ImageDigest, error) {
	var (
		tr       = tar.NewReader(r)
		layout   bool
		manifest []struct {
			Config   string
			RepoTags []string
		}
		index    []byte
		hashes   = map[string]string{} // file → digest of its bytes, for files small enough
		kept     = map[string][]byte{} // file → bytes of small JSON blobs (OCI manifests)
		keptSize int
		buf      bytes.Buffer
	)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Size > digestJSONLimit {
			continue
		}
		name := path.Clean(hdr.Name)
		buf.Reset()
		if _, err := io.Copy(&buf, io.LimitReader(tr, digestJSONLimit)); err != nil {
			return nil, fmt.Errorf("read %s: %w", hdr.Name, err)
		}
		data := buf.Bytes()
		switch name {
		case "oci-layout":
			layout = true
			continue
		case "index.json":
			index = bytes.Clone(data)
			continue
		case "manifest.json":
			if err := json.Unmarshal(data, &manifest); err != nil {
				return nil, fmt.Errorf("decode manifest.json: %w", err)
			}
			continue
		}
		sum := sha256.Sum256(data)
		hashes[name] = "sha256:" + hex.EncodeToString(sum[:])
		if len(data) > 0 && data[0] == '{' && keptSize+len(data) <= digestKeepLimit {
			kept[name] = bytes.Clone(data)
			keptSize += len(data)
		}
	}
	out := map[string]ImageDigest{}
	if layout {
		if index == nil {
			return nil, errors.New("an OCI layout without index.json")
		}
		var idx struct {
			Manifests []struct {
				MediaType   string            `json:"mediaType"`
				Digest      string            `json:"digest"`
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.Unmarshal(index, &idx); err != nil {
			return nil, fmt.Errorf("decode index.json: %w", err)
		}
		for _, m := range idx.Manifests {
			ref := ociImageName(m.Annotations)
			hexd, ok := strings.CutPrefix(m.Digest, "sha256:")
			if ref == "" || !ok || !sha256Hex.MatchString(hexd) {
				continue
			}
			if ref, err := release.NormalizeRef(ref); err == nil {
				d := ImageDigest{Ref: ref, Manifest: m.Digest}
				blob := "blobs/sha256/" + hexd
				if body, ok := kept[blob]; ok && hashes[blob] == m.Digest {
					d.Config = configOf(body)
				}
				out[ref] = d
			}
		}
		return out, nil
	}
	if manifest == nil {
		return nil, errors.New("neither an OCI layout nor a docker save manifest.json")
	}
	for _, m := range manifest {
		cfg := hashes[path.Clean(m.Config)]
		if cfg == "" {
			continue // no such file in the archive, or a config too large to be one
		}
		for _, tag := range m.RepoTags {
			if ref, err := release.NormalizeRef(tag); err == nil {
				out[ref] = ImageDigest{Ref: ref, Config: cfg}
			}
		}
	}
	return out, nil
}

// ociImageName is the name the import gives an image of an OCI layout's index: containerd's
// annotation, else an OCI reference name that is a full reference.
func ociImageName(a map[string]string) string {
	if n := a["io.containerd.image.name"]; n != "" {
		return n
	}
	if n := a["org.opencontainers.image.ref.name"]; strings.Contains(n, "/") {
		return n
	}
	return ""
}

// configOf returns the config digest an image manifest names; empty for an index or anything
// else.
func configOf(body []byte) string {
	var m struct {
		Config *struct {
			Digest string `json:"digest"`
		} `json:"config"`
		Manifests json.RawMessage `json:"manifests"`
	}
	if json.Unmarshal(body, &m) != nil || m.Config == nil || m.Manifests != nil {
		return ""
	}
	if h, ok := strings.CutPrefix(m.Config.Digest, "sha256:"); !ok || !sha256Hex.MatchString(h) {
		return ""
	}
	return m.Config.Digest
}
