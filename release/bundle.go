package release

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// BundleDir is the directory of the image bundle inside a release ISO; BundleFile indexes it.
const (
	BundleDir  = "bundle"
	BundleFile = "bundle/metadata.yaml"
)

// Bundle is bundle/metadata.yaml: image archives grouped by purpose (common, rke2, agent, ...).
type Bundle struct {
	// Archives lists every archive of every group, groups in name order, archives in file order.
	Archives []Archive
}

// Archive is one image archive of the bundle and the list of the images it holds.
type Archive struct {
	// Group is the bundle group the archive belongs to, such as common, rke2 or agent.
	Group string `json:"group"`
	// List is the image list's path inside the ISO (fs.FS form, no leading slash).
	List string `json:"list"`
	// Archive is the archive's path inside the ISO (fs.FS form, no leading slash).
	Archive string `json:"archive"`
}

// Name returns the archive's file name, which identifies it in logs and metrics.
func (a Archive) Name() string { return path.Base(a.Archive) }

// Groups returns the group names of the bundle, sorted.
func (b *Bundle) Groups() []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range b.Archives {
		if !seen[a.Group] {
			seen[a.Group] = true
			out = append(out, a.Group)
		}
	}
	sort.Strings(out)
	return out
}

type bundleFile struct {
	Images map[string][]struct {
		List    string `json:"list"`
		Archive string `json:"archive"`
	} `json:"images"`
}

// ParseBundle parses bundle/metadata.yaml. Paths in the file are relative to bundle/ and begin
// with a slash; they are returned as fs.FS paths from the ISO's root. A path that leaves the
// bundle directory is an error.
func ParseBundle(data []byte) (*Bundle, error) {
	var f bundleFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse %s: %w", BundleFile, err)
	}
	groups := make([]string, 0, len(f.Images))
	for g := range f.Images {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	b := &Bundle{}
	for _, g := range groups {
		for i, e := range f.Images[g] {
			list, err := bundlePath(e.List)
			if err != nil {
				return nil, fmt.Errorf("parse %s: images.%s[%d].list: %w", BundleFile, g, i, err)
			}
			archive, err := bundlePath(e.Archive)
			if err != nil {
				return nil, fmt.Errorf("parse %s: images.%s[%d].archive: %w", BundleFile, g, i, err)
			}
			b.Archives = append(b.Archives, Archive{Group: g, List: list, Archive: archive})
		}
	}
	return b, nil
}

func bundlePath(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path")
	}
	if strings.ContainsAny(p, "\x00\\") {
		return "", fmt.Errorf("path %q holds a NUL or a backslash", p)
	}
	clean := path.Join(BundleDir, path.Clean("/"+p))
	if !fs.ValidPath(clean) || !strings.HasPrefix(clean, BundleDir+"/") {
		return "", fmt.Errorf("path %q leaves the bundle", p)
	}
	for _, elem := range strings.Split(strings.Trim(p, "/"), "/") {
		if elem == ".." {
			return "", fmt.Errorf("path %q leaves the bundle", p)
		}
	}
	return clean, nil
}

// LoadBundle reads and parses bundle/metadata.yaml from fsys. A release without the file returns
// an error that matches fs.ErrNotExist.
func LoadBundle(fsys fs.FS) (*Bundle, error) {
	data, err := readSmall(fsys, BundleFile)
	if err != nil {
		return nil, err
	}
	return ParseBundle(data)
}

// LoadImageList reads the image list of an archive and returns its references, normalised.
func LoadImageList(fsys fs.FS, a Archive) ([]string, error) {
	data, err := readSmall(fsys, a.List)
	if err != nil {
		return nil, err
	}
	refs, err := ParseImageList(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", a.List, err)
	}
	return refs, nil
}

// ParseImageList reads one image reference a line. Blank lines and lines starting with # are
// skipped; every reference is normalised with NormalizeRef and duplicates are dropped.
func ParseImageList(r io.Reader) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		ref, err := NormalizeRef(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if !seen[ref] {
			seen[ref] = true
			out = append(out, ref)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// NormalizeRef returns an image reference in the fully qualified form containerd stores:
// "nginx" becomes "docker.io/library/nginx:latest", "rancher/x:v1" becomes
// "docker.io/rancher/x:v1"; references with a registry, a tag or a digest keep them.
func NormalizeRef(ref string) (string, error) {
	if ref == "" || strings.ContainsAny(ref, " \t\x00") || strings.HasPrefix(ref, "/") || strings.HasSuffix(ref, "/") {
		return "", fmt.Errorf("invalid image reference %q", ref)
	}
	name, digest, _ := strings.Cut(ref, "@")
	domain, rest := "docker.io", name
	if i := strings.IndexByte(name, '/'); i >= 0 {
		first := name[:i]
		if strings.ContainsAny(first, ".:") || first == "localhost" {
			domain, rest = first, name[i+1:]
		}
	}
	if domain == "index.docker.io" {
		domain = "docker.io"
	}
	if domain == "docker.io" && !strings.Contains(rest, "/") {
		rest = "library/" + rest
	}
	// A tag follows the last colon of the last path element.
	last := rest[strings.LastIndexByte(rest, '/')+1:]
	if !strings.Contains(last, ":") && digest == "" {
		rest += ":latest"
	}
	if rest == "" || strings.Contains(rest, "//") || strings.HasPrefix(last, ":") {
		return "", fmt.Errorf("invalid image reference %q", ref)
	}
	out := domain + "/" + rest
	if digest != "" {
		if !strings.Contains(digest, ":") {
			return "", fmt.Errorf("invalid digest in image reference %q", ref)
		}
		out += "@" + digest
	}
	return out, nil
}
