package sequencer

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/release"
)

// releaseFromMetadata turns the metadata kept in a plan's status back into a Release.
func releaseFromMetadata(m *v1beta1.ReleaseMetadata) *release.Release {
	return &release.Release{
		Harvester: m.Harvester, HarvesterChart: m.HarvesterChart, OS: m.OS, Kubernetes: m.Kubernetes,
		Rancher: m.Rancher, MonitoringChart: m.MonitoringChart, LoggingChart: m.LoggingChart,
		Kubevirt: m.Kubevirt, MinUpgradableVersion: m.MinUpgradableVersion,
	}
}

// shortHash is a short stable digest of s, to keep generated names unique once shortened.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}
