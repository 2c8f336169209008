package sequencer

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/release"
)

// The harvester-release.yaml keys of a kubeadm release that package release keeps in
// Release.Extra: the etcd and CoreDNS image tags of the release's control plane.
const (
	releaseEtcdKey    = "etcd"
	releaseCoreDNSKey = "coredns"
)

// releaseFromMetadata turns the metadata kept in a plan's status back into a Release.
func releaseFromMetadata(m *v1beta1.ReleaseMetadata) *release.Release {
	r := &release.Release{
		Harvester: m.Harvester, HarvesterChart: m.HarvesterChart, OS: m.OS, Kubernetes: m.Kubernetes,
		Rancher: m.Rancher, MonitoringChart: m.MonitoringChart, LoggingChart: m.LoggingChart,
		Kubevirt: m.Kubevirt, MinUpgradableVersion: m.MinUpgradableVersion,
	}
	for k, v := range map[string]string{releaseEtcdKey: m.Etcd, releaseCoreDNSKey: m.CoreDNS} {
		if v != "" {
			if r.Extra == nil {
				r.Extra = map[string]any{}
			}
			r.Extra[k] = v
		}
	}
	return r
}

// extraString reads a key of r that package release keeps in Extra as a string: a string as it
// is, a number or a boolean (YAML's unquoted 3.6) as printed; "" when absent or not a scalar.
func extraString(r *release.Release, key string) string {
	switch v := r.Extra[key].(type) {
	case string:
		return v
	case float64, bool, int, int64:
		return fmt.Sprint(v)
	}
	return ""
}

// shortHash is a short stable digest of s, to keep generated names unique once shortened.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}
