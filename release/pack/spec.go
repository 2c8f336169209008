package pack

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/upgrade-repo/upgrade-repo/release"
)

// Spec describes a release ISO to build. The zero value of every optional field has a default
// documented beside it; Validate reports what is wrong with a Spec.
type Spec struct {
	// Version is the Harvester version of the release, such as v1.5.2 (default v1.5.2).
	Version string `json:"version,omitempty"`
	// VolumeID is the ISO's volume identifier (default COS_LIVE, as real releases have it).
	VolumeID string `json:"volumeID,omitempty"`
	// Seed makes every synthetic byte of the release; equal seeds give equal releases.
	Seed int64 `json:"seed,omitempty"`
	// Release, when set, is written as harvester-release.yaml as it is; otherwise a plausible
	// release for Version is written.
	Release *release.Release `json:"release,omitempty"`
	// SharedLayers names synthetic layers, by their size, that images may share.
	SharedLayers map[string]Size `json:"sharedLayers,omitempty"`
	// Archives are the image archives of the bundle.
	Archives []Archive `json:"archives,omitempty"`
	// Files are extra files of the ISO, such as rootfs.squashfs.
	Files []File `json:"files,omitempty"`
	// PreviousVersions are the earlier versions whose image lists the release carries, each as
	// bundle/harvester/images-lists-archive/<version>/image_list_all.txt beside current/ (this
	// release's). Their lists are synthetic: this release's, with Version written as theirs.
	PreviousVersions []string `json:"previousVersions,omitempty"`
	// NoBoot leaves out the boot files (boot/x86_64/loader/, boot/grub2/, boot/uefi.img, EFI/)
	// and the El Torito boot entries that real releases have.
	NoBoot bool `json:"noBoot,omitempty"`
	// NoBundle leaves bundle/metadata.yaml out (a release without bundle metadata).
	NoBundle bool `json:"noBundle,omitempty"`
	// NoRelease leaves harvester-release.yaml out (a release without release metadata).
	NoRelease bool `json:"noRelease,omitempty"`
}

// Archive is one image archive of the bundle: bundle/<Dir>/images/<Name>.tar.zst and its list.
type Archive struct {
	// Group is the bundle group: common, rke2, agent or any other name.
	Group string `json:"group"`
	// Name is the archive's file name without .tar.zst.
	Name string `json:"name"`
	// Dir is the bundle subdirectory (default rancherd for the agent group, harvester otherwise).
	Dir string `json:"dir,omitempty"`
	// Images are synthetic images of the archive.
	Images []Image `json:"images,omitempty"`
	// Tarballs are paths of docker-save tarballs (uncompressed) whose tagged images join the archive.
	Tarballs []string `json:"tarballs,omitempty"`
	// Retag gives images of Tarballs another reference in the archive and its list: each key is
	// a tag a tarball holds, its value the reference the release names it by. It builds a
	// release whose image under a well-known name is another one, such as a component that
	// exits at once for a test of a release that fails.
	Retag map[string]string `json:"retag,omitempty"`
}

// Image is one synthetic image: a linux/amd64 image whose layers hold random bytes.
type Image struct {
	// Ref is the image reference; the archive and lists hold its normalised form.
	Ref string `json:"ref"`
	// Layers are the sizes of the layers only this image has, in order.
	Layers []Size `json:"layers,omitempty"`
	// Shared names layers of Spec.SharedLayers the image has, before its own layers.
	Shared []string `json:"shared,omitempty"`
}

// File is an extra file of the ISO: Size random bytes, or a copy of the local file Source.
type File struct {
	// Path is the file's path in the ISO, such as rootfs.squashfs or boot/kernel.
	Path string `json:"path"`
	// Size is the number of random bytes to write when Source is empty.
	Size Size `json:"size,omitempty"`
	// Source is a local file to copy.
	Source string `json:"source,omitempty"`
}

// Size is a byte count that reads from JSON or YAML as a number or a string such as "64MiB".
type Size int64

// UnmarshalJSON accepts a number of bytes or a string that ParseSize accepts.
func (s *Size) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("size %s: want bytes or a string such as 64MiB", b)
		}
		str = strconv.FormatInt(n, 10)
	}
	v, err := ParseSize(str)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// ParseSize parses a byte count: a plain number or a number followed by B, K/KB/KiB, M/MB/MiB,
// G/GB/GiB (all binary multiples).
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	}
	mult := map[string]float64{"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
		"m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}[unit]
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || mult == 0 || f < 0 || f*mult > 1<<50 {
		return 0, fmt.Errorf("invalid size %q: want bytes or a number with a unit such as 64MiB", s)
	}
	return Size(f * mult), nil
}

// ParseSpec parses a Spec from YAML or JSON and validates it.
func ParseSpec(data []byte) (*Spec, error) {
	var s Spec
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return nil, fmt.Errorf("parse spec: %w", err)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate reports the first problem of the Spec, naming the field at fault.
func (s *Spec) Validate() error {
	names := map[string]bool{}
	for i, a := range s.Archives {
		where := fmt.Sprintf("archives[%d]", i)
		if a.Group == "" || a.Name == "" {
			return fmt.Errorf("spec %s: group and name are required", where)
		}
		if !safeName(a.Name) || (a.Dir != "" && !safeName(a.Dir)) {
			return fmt.Errorf("spec %s: name %q and dir %q must be plain file names", where, a.Name, a.Dir)
		}
		if names[a.archivePath()] {
			return fmt.Errorf("spec %s: archive %s appears twice", where, a.archivePath())
		}
		names[a.archivePath()] = true
		if len(a.Images) == 0 && len(a.Tarballs) == 0 {
			return fmt.Errorf("spec %s: an archive needs images or tarballs", where)
		}
		for from, to := range a.Retag {
			for _, r := range []string{from, to} {
				if _, err := release.NormalizeRef(r); err != nil {
					return fmt.Errorf("spec %s.retag: %w", where, err)
				}
			}
		}
		for j, im := range a.Images {
			if _, err := release.NormalizeRef(im.Ref); err != nil {
				return fmt.Errorf("spec %s.images[%d]: %w", where, j, err)
			}
			if len(im.Layers)+len(im.Shared) == 0 {
				return fmt.Errorf("spec %s.images[%d]: an image needs at least one layer", where, j)
			}
			for _, sh := range im.Shared {
				if _, ok := s.SharedLayers[sh]; !ok {
					return fmt.Errorf("spec %s.images[%d]: shared layer %q is not in sharedLayers", where, j, sh)
				}
			}
		}
	}
	for i, v := range s.PreviousVersions {
		if !safeName(v) || v == CurrentList {
			return fmt.Errorf("spec previousVersions[%d]: %q must be a plain directory name other than %s", i, v, CurrentList)
		}
	}
	for i, f := range s.Files {
		p := path.Clean(strings.TrimPrefix(f.Path, "/"))
		if f.Path == "" || p == "." || strings.HasPrefix(p, "../") || p == ".." || strings.ContainsAny(f.Path, "\x00\\") {
			return fmt.Errorf("spec files[%d]: path %q must stay inside the image", i, f.Path)
		}
		if p == release.ReleaseFile || strings.HasPrefix(p, release.BundleDir+"/") || p == release.BundleDir {
			return fmt.Errorf("spec files[%d]: path %q belongs to the release layout", i, f.Path)
		}
	}
	return nil
}

func safeName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\\\x00")
}

func (s *Spec) version() string {
	if s.Version == "" {
		return "v1.5.2"
	}
	return s.Version
}

// VolumeIDOrDefault returns VolumeID, or the default derived from the version.
func (s *Spec) VolumeIDOrDefault() string { return s.volumeID() }

func (s *Spec) volumeID() string {
	if s.VolumeID != "" {
		return s.VolumeID
	}
	return DefaultVolumeID
}

// DefaultVolumeID is the volume id of real release ISOs.
const DefaultVolumeID = "COS_LIVE"

// CurrentList names the directory of images-lists-archive that holds the release's own list of
// every image (the product's controller reads current/image_list_all.txt).
const CurrentList = "current"

func (a Archive) dir() string {
	if a.Dir != "" {
		return a.Dir
	}
	if a.Group == "agent" {
		return "rancherd"
	}
	return "harvester"
}

// archivePath is the archive's path inside the ISO (fs.FS form).
func (a Archive) archivePath() string {
	return path.Join(release.BundleDir, a.dir(), "images", a.Name+".tar.zst")
}

// listPath is the image list's path inside the ISO: beside the archive for rancherd, as real
// releases have it, in images-lists otherwise.
func (a Archive) listPath() string {
	if a.dir() == "rancherd" {
		return path.Join(release.BundleDir, a.dir(), "images", a.Name+".txt")
	}
	return path.Join(release.BundleDir, a.dir(), "images-lists", a.Name+".txt")
}

// Demo returns a small release for version (default v1.5.2) in the layout of a real one: the
// common group's archives (rancher, harvester, harvester-repo, harvester-extra), the rke2 group's
// (rke2 and rke2-multus, named after the Kubernetes version with its "+" written as "-"), the
// agent group's under bundle/rancherd/images/, the image lists of the previous version (the
// release's minUpgradableVersion) beside current/, and the boot files. Its images (at least one
// an archive, images in all) share a base layer, each layer about layerSize bytes; a
// rootfs.squashfs of rootfsSize bytes is added when rootfsSize is positive.
func Demo(version string, images int, layerSize, rootfsSize Size) Spec {
	if version == "" {
		version = "v1.5.2"
	}
	if layerSize <= 0 {
		layerSize = 256 << 10
	}
	rel := defaultRelease(version)
	rke2 := strings.ReplaceAll(rel.Kubernetes, "+", "-")
	s := Spec{
		Version:      version,
		Seed:         1,
		SharedLayers: map[string]Size{"base": layerSize},
	}
	if rel.MinUpgradableVersion != "" {
		s.PreviousVersions = []string{rel.MinUpgradableVersion}
	}
	// Archive names as the product's build scripts write them, and images such archives hold.
	archives := []struct {
		group, name, tag string
		repos            []string
	}{
		{"common", "rancher-images-" + rel.Rancher, rel.Rancher, []string{"rancher/rancher", "rancher/rancher-webhook", "rancher/fleet"}},
		{"common", "harvester-images-" + version, version, []string{"rancher/harvester", "rancher/harvester-webhook", "longhornio/longhorn-manager"}},
		{"common", "harvester-repo-images", version, []string{"rancher/harvester-cluster-repo"}},
		{"common", "harvester-extra-" + version, version, []string{"rancher/harvester-upgrade"}},
		{"rke2", "rke2-images.linux-amd64-" + rke2, rke2, []string{"rancher/rke2-runtime", "rancher/hardened-kubernetes"}},
		{"rke2", "rke2-images-multus.linux-amd64-" + rke2, rke2, []string{"rancher/hardened-multus-cni", "rancher/hardened-cni-plugins"}},
		{"agent", "rancherd-bootstrap-images-" + version, rke2, []string{"rancher/system-agent-installer-rke2"}},
	}
	images = max(images, len(archives))
	for ai, a := range archives {
		ar := Archive{Group: a.group, Name: a.name}
		for i, j := ai, 0; i < images; i, j = i+len(archives), j+1 {
			repo := a.repos[j%len(a.repos)]
			if j >= len(a.repos) {
				repo = fmt.Sprintf("%s-%d", repo, j/len(a.repos))
			}
			ar.Images = append(ar.Images, Image{Ref: repo + ":" + a.tag, Shared: []string{"base"}, Layers: []Size{layerSize}})
		}
		s.Archives = append(s.Archives, ar)
	}
	if rootfsSize > 0 {
		s.Files = append(s.Files, File{Path: "rootfs.squashfs", Size: rootfsSize})
	}
	return s
}

// errNoImages is returned when an archive ends up holding no image at all.
var errNoImages = errors.New("the archive holds no image")
