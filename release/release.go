package release

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"
	"strconv"

	"sigs.k8s.io/yaml"
)

// ReleaseFile is the path of the release metadata inside a release ISO.
const ReleaseFile = "harvester-release.yaml"

// maxMetadataSize bounds every metadata file this package reads into memory.
const maxMetadataSize = 4 << 20

// Release is the content of harvester-release.yaml: the versions of the components a release
// ships. Fields a newer release adds are kept in Extra and written back by MarshalJSON.
type Release struct {
	Harvester            string `json:"harvester"`
	HarvesterChart       string `json:"harvesterChart"`
	Installer            string `json:"installer"`
	OS                   string `json:"os"`
	Kubernetes           string `json:"kubernetes"`
	Rancher              string `json:"rancher"`
	MonitoringChart      string `json:"monitoringChart"`
	LoggingChart         string `json:"loggingChart"`
	Kubevirt             string `json:"kubevirt"`
	MinUpgradableVersion string `json:"minUpgradableVersion"`
	// RancherDependencies maps a dependency's name to its chart and app versions.
	RancherDependencies map[string]Dependency `json:"rancherDependencies,omitempty"`
	// Extra holds the fields this version of the package does not know, as decoded JSON values.
	Extra map[string]any `json:"-"`
}

// Dependency is one entry of rancherDependencies.
type Dependency struct {
	Chart string `json:"chart"`
	App   string `json:"app"`
}

// knownFields lists the JSON names of Release's typed fields, in the order they are written.
var knownFields = []string{
	"harvester", "harvesterChart", "installer", "os", "kubernetes", "rancher",
	"monitoringChart", "loggingChart", "kubevirt", "minUpgradableVersion",
}

func (r *Release) field(name string) *string {
	switch name {
	case "harvester":
		return &r.Harvester
	case "harvesterChart":
		return &r.HarvesterChart
	case "installer":
		return &r.Installer
	case "os":
		return &r.OS
	case "kubernetes":
		return &r.Kubernetes
	case "rancher":
		return &r.Rancher
	case "monitoringChart":
		return &r.MonitoringChart
	case "loggingChart":
		return &r.LoggingChart
	case "kubevirt":
		return &r.Kubevirt
	case "minUpgradableVersion":
		return &r.MinUpgradableVersion
	}
	return nil
}

// Components returns the named component versions of the release (every typed string field but
// installer, which is a commit), keyed by their JSON name, for comparing two releases.
func (r *Release) Components() map[string]string {
	out := make(map[string]string, len(knownFields))
	for _, k := range knownFields {
		if k == "installer" || k == "minUpgradableVersion" {
			continue
		}
		out[k] = *r.field(k)
	}
	return out
}

// UnmarshalJSON decodes a release, accepting numbers and booleans where strings are expected
// (YAML turns an unquoted 1.5 into a number) and keeping unknown fields in Extra.
func (r *Release) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*r = Release{}
	for k, v := range raw {
		if p := r.field(k); p != nil {
			s, err := scalarString(v)
			if err != nil {
				return fmt.Errorf("field %s: %w", k, err)
			}
			*p = s
			continue
		}
		if k == "rancherDependencies" {
			if err := decodeDependencies(v, &r.RancherDependencies); err != nil {
				return fmt.Errorf("field rancherDependencies: %w", err)
			}
			continue
		}
		var val any
		if err := json.Unmarshal(v, &val); err != nil {
			return fmt.Errorf("field %s: %w", k, err)
		}
		if r.Extra == nil {
			r.Extra = map[string]any{}
		}
		r.Extra[k] = val
	}
	return nil
}

func decodeDependencies(v json.RawMessage, out *map[string]Dependency) error {
	if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return nil
	}
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(v, &raw); err != nil {
		return err
	}
	*out = make(map[string]Dependency, len(raw))
	for name, fields := range raw {
		var d Dependency
		var err error
		if d.Chart, err = scalarString(fields["chart"]); err != nil {
			return fmt.Errorf("%s.chart: %w", name, err)
		}
		if d.App, err = scalarString(fields["app"]); err != nil {
			return fmt.Errorf("%s.app: %w", name, err)
		}
		(*out)[name] = d
	}
	return nil
}

// scalarString renders a JSON scalar as the string YAML's author meant.
func scalarString(v json.RawMessage) (string, error) {
	if len(v) == 0 {
		return "", nil
	}
	var x any
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := dec.Decode(&x); err != nil {
		return "", err
	}
	switch t := x.(type) {
	case nil:
		return "", nil
	case string:
		return t, nil
	case json.Number:
		return t.String(), nil
	case bool:
		return strconv.FormatBool(t), nil
	default:
		return "", fmt.Errorf("want a string, got %s", bytes.TrimSpace(v))
	}
}

// MarshalJSON writes the typed fields and every field kept in Extra.
func (r Release) MarshalJSON() ([]byte, error) {
	out := make(map[string]any, len(knownFields)+len(r.Extra)+1)
	for k, v := range r.Extra {
		out[k] = v
	}
	for _, k := range knownFields {
		out[k] = *r.field(k)
	}
	if r.RancherDependencies != nil {
		out["rancherDependencies"] = r.RancherDependencies
	}
	return json.Marshal(out)
}

// ExtraKeys returns the names of the unknown fields, sorted.
func (r *Release) ExtraKeys() []string {
	keys := make([]string, 0, len(r.Extra))
	for k := range r.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ParseRelease parses harvester-release.yaml. The harvester field is required.
func ParseRelease(data []byte) (*Release, error) {
	var r Release
	if err := yaml.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("parse %s: %w", ReleaseFile, err)
	}
	if r.Harvester == "" {
		return nil, fmt.Errorf("parse %s: the harvester version is missing", ReleaseFile)
	}
	return &r, nil
}

// LoadRelease reads and parses harvester-release.yaml from the root of fsys. A release without
// the file returns an error that matches fs.ErrNotExist.
func LoadRelease(fsys fs.FS) (*Release, error) {
	data, err := readSmall(fsys, ReleaseFile)
	if err != nil {
		return nil, err
	}
	return ParseRelease(data)
}

// readSmall reads a metadata file, refusing files larger than maxMetadataSize.
func readSmall(fsys fs.FS, name string) ([]byte, error) {
	fi, err := fs.Stat(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s: not a regular file", name)
	}
	if fi.Size() > maxMetadataSize {
		return nil, fmt.Errorf("read %s: %d bytes is more than the %d a metadata file may have", name, fi.Size(), maxMetadataSize)
	}
	data, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return data, nil
}
