// Command benchrelease writes the uncompressed docker-save archive (classic layout) that
// make bench-preload imports: several images sharing base layers, of a chosen total size, with
// data about as compressible as real layers. It streams to stdout in constant memory, so
// `benchrelease | zstd` makes an archive of any size.
//
// Layers are single-file tars of pseudo-random bytes from a fixed seed, so runs are reproducible.
package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"os"
	"strings"
)

// layer is one layer tar: its size on disk and the seed of its content.
type layer struct {
	name string
	size int64 // bytes of the file inside the layer tar
	seed uint64
}

func main() {
	if err := run(os.Stdout, os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "benchrelease: %v\n", err)
		os.Exit(1)
	}
}

func run(w io.Writer, args []string) error {
	fset := flag.NewFlagSet("benchrelease", flag.ContinueOnError)
	images := fset.Int("images", 6, "images in the archive")
	baseMB := fset.Int64("base-mb", 200, "MiB of the base layer every image shares")
	midMB := fset.Int64("mid-mb", 100, "MiB of the middle layer each half of the images shares")
	ownMB := fset.Int64("own-mb", 40, "MiB of each image's own layer")
	list := fset.String("list", "", "also write the image list (one reference a line) to this file")
	seed := fset.Uint64("seed", 0, "varies every layer and image name, for several distinct archives")
	if err := fset.Parse(args); err != nil {
		return err
	}
	s0 := *seed * 1000
	base := layer{name: "base", size: *baseMB << 20, seed: s0 + 1}
	mids := []layer{{name: "mid-a", size: *midMB << 20, seed: s0 + 2}, {name: "mid-b", size: *midMB << 20, seed: s0 + 3}}
	tw := tar.NewWriter(w)
	diffIDs := map[string]string{}
	writeLayer := func(l layer) (string, error) {
		path := l.name + "/layer.tar"
		if _, ok := diffIDs[path]; ok {
			return path, nil
		}
		d, err := writeLayerTar(tw, path, l)
		if err != nil {
			return "", err
		}
		diffIDs[path] = d
		return path, nil
	}
	type entry struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	var manifest []entry
	var refs []string
	for i := range *images {
		ls := []layer{base, mids[i%2], {name: fmt.Sprintf("own-%d", i), size: *ownMB << 20, seed: s0 + uint64(10+i)}}
		var paths, ids []string
		for _, l := range ls {
			p, err := writeLayer(l)
			if err != nil {
				return err
			}
			paths = append(paths, p)
			ids = append(ids, diffIDs[p])
		}
		cfg, err := json.Marshal(map[string]any{
			"architecture": "amd64",
			"os":           "linux",
			"config":       map[string]any{"Cmd": []string{"/app"}, "Labels": map[string]string{"image": fmt.Sprint(i)}},
			"rootfs":       map[string]any{"type": "layers", "diff_ids": ids},
		})
		if err != nil {
			return err
		}
		sum := sha256.Sum256(cfg)
		cfgName := hex.EncodeToString(sum[:]) + ".json"
		if err := writeFile(tw, cfgName, cfg); err != nil {
			return err
		}
		tag := fmt.Sprintf("rancher/bench-%d-%d:v1.0.%d", *seed, i, i)
		refs = append(refs, "docker.io/"+tag)
		manifest = append(manifest, entry{Config: cfgName, RepoTags: []string{tag}, Layers: paths})
	}
	m, err := json.Marshal(manifest)
	if err != nil {
		return err
	}
	if err := writeFile(tw, "manifest.json", m); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if *list != "" {
		return os.WriteFile(*list, []byte(strings.Join(refs, "\n")+"\n"), 0o644)
	}
	return nil
}

func writeFile(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// layerTarSize is the size of a tar holding one file of n bytes: a header, the data padded to
// 512 bytes and the two-block end marker.
func layerTarSize(n int64) int64 { return 512 + (n+511)/512*512 + 1024 }

// writeLayerTar writes the layer as an entry of tw, streaming, and returns its diff ID.
func writeLayerTar(tw *tar.Writer, path string, l layer) (string, error) {
	if err := tw.WriteHeader(&tar.Header{Name: path, Mode: 0o644, Size: layerTarSize(l.size), Typeflag: tar.TypeReg}); err != nil {
		return "", err
	}
	h := sha256.New()
	inner := tar.NewWriter(io.MultiWriter(tw, h))
	if err := inner.WriteHeader(&tar.Header{Name: "data/" + l.name + ".bin", Mode: 0o644, Size: l.size, Typeflag: tar.TypeReg}); err != nil {
		return "", err
	}
	if err := fill(inner, l.size, l.seed); err != nil {
		return "", err
	}
	if err := inner.Close(); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(sumOf(h)), nil
}

func sumOf(h hash.Hash) []byte { return h.Sum(nil) }

// fill writes n bytes in 64 KiB chunks of which 56 KiB are random and 8 KiB a repeated pattern,
// so zstd shrinks them about as much as it shrinks typical image layers of binaries.
func fill(w io.Writer, n int64, seed uint64) error {
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), 42})
	buf := make([]byte, 64<<10)
	pattern := []byte(strings.Repeat("usr/lib/x86_64-linux-gnu/libexample.so.1 ", 200))
	for n > 0 {
		_, _ = rng.Read(buf[:56<<10])
		copy(buf[56<<10:], pattern)
		k := min(int64(len(buf)), n)
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}
