// Package hoststoml writes the hosts.toml files through which containerd uses a mirror: one file
// per registry, <dir>/<registry>/hosts.toml, under containerd's registry configuration directory
// (the CRI plugin's registry config_path, /etc/containerd/certs.d by default; RKE2 and k3s keep
// their own). containerd reads them from 1.5 on, and only where config_path is set.
//
// A file is written only where there is none, or where the one there was written by this
// package (it starts with Marker): a hosts.toml an operator wrote is never overwritten.
//
// Imports: the standard library only.
package hoststoml

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Marker is the first line of every file this package writes.
const Marker = "# written by upgrade-repo: the node's agent mirrors this registry's release images"

// ErrNotOurs is wrapped by the error of a registry whose hosts.toml was written by someone else.
var ErrNotOurs = errors.New("hosts.toml not written by upgrade-repo")

var registryRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?$`)

// Render returns the hosts.toml of registry that makes containerd ask mirror (such as
// http://10.0.0.5:5050) first for pulls and tag resolution, then the registry itself.
func Render(registry, mirror string) string {
	server := "https://" + registry
	if registry == "docker.io" {
		server = "https://registry-1.docker.io"
	}
	return fmt.Sprintf("%s\nserver = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", Marker, server, mirror)
}

// Write writes the hosts.toml of each registry under dir, pointing at mirror. It stops at the
// first registry it cannot write, and refuses (ErrNotOurs) to replace a file it did not write.
func Write(dir, mirror string, registries []string) error {
	if !strings.HasPrefix(mirror, "http://") && !strings.HasPrefix(mirror, "https://") {
		return fmt.Errorf("mirror %q: want an http:// or https:// URL", mirror)
	}
	for _, reg := range registries {
		if !registryRE.MatchString(reg) {
			return fmt.Errorf("registry %q: want a host name with an optional port", reg)
		}
		path := filepath.Join(dir, reg, "hosts.toml")
		old, err := os.ReadFile(path)
		if err == nil && !bytes.HasPrefix(old, []byte(Marker)) {
			return fmt.Errorf("%s: %w; leaving it as it is", path, ErrNotOurs)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("read %s: %w", path, err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(Render(reg, mirror)), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", tmp, err)
		}
		if err := os.Rename(tmp, path); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}
