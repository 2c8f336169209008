package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"

	"sigs.k8s.io/yaml"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// kubeletConfigLimit bounds the kubelet configuration file read.
const kubeletConfigLimit = 1 << 20

// fsUsage reports the free and total space of dir's file system and which file system it is
// (its device number: bind mounts of one file system share it), for the sequencer's disk
// forecast; zero figures when dir is empty or cannot be read.
func fsUsage(dir string) v1beta1.RepoNodeCache {
	if dir == "" {
		return v1beta1.RepoNodeCache{}
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return v1beta1.RepoNodeCache{Path: dir}
	}
	bs := int64(fs.Bsize) //nolint:unconvert // Bsize is not int64 on every platform.
	c := v1beta1.RepoNodeCache{Path: dir, FreeBytes: int64(fs.Bavail) * bs, TotalBytes: int64(fs.Blocks) * bs}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err == nil {
		c.FilesystemID = strconv.FormatUint(uint64(st.Dev), 10) //nolint:unconvert // Dev is not uint64 on every platform.
	}
	return c
}

// kubeletImageGC is the part of the kubelet's configuration file (KubeletConfiguration) the
// disk forecast reads.
type kubeletImageGC struct {
	High *int32 `json:"imageGCHighThresholdPercent"`
	Low  *int32 `json:"imageGCLowThresholdPercent"`
}

// readImageGC reads the kubelet's image garbage collection thresholds from its configuration
// file at path (at most kubeletConfigLimit bytes), the kubelet's defaults for those it does not
// set. The file is mounted read-only, alone: the least the agent needs, where the kubelet's
// configz through the API server's node proxy would need nodes/proxy, which reaches every
// kubelet's whole API. A file that cannot be read gives the defaults, without Source, and says
// why.
func readImageGC(path string) *v1beta1.RepoNodeImageGC {
	gc := &v1beta1.RepoNodeImageGC{HighThresholdPercent: 85, LowThresholdPercent: 80}
	if path == "" {
		return nil
	}
	cfg, err := parseImageGC(path)
	if err != nil {
		gc.Message = err.Error()
		return gc
	}
	gc.Source = path
	if cfg.High != nil {
		gc.HighThresholdPercent = *cfg.High
	}
	if cfg.Low != nil {
		gc.LowThresholdPercent = *cfg.Low
	}
	return gc
}

func parseImageGC(path string) (kubeletImageGC, error) {
	var cfg kubeletImageGC
	f, err := os.Open(path)
	if err != nil {
		return cfg, fmt.Errorf("read the kubelet's configuration: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, kubeletConfigLimit+1))
	if err != nil {
		return cfg, fmt.Errorf("read the kubelet's configuration %s: %w", path, err)
	}
	if len(data) > kubeletConfigLimit {
		return cfg, fmt.Errorf("the kubelet's configuration %s is over %d bytes", path, kubeletConfigLimit)
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return cfg, fmt.Errorf("parse the kubelet's configuration %s: %w", path, err)
	}
	for _, v := range []*int32{cfg.High, cfg.Low} {
		if v != nil && (*v < 0 || *v > 100) {
			return kubeletImageGC{}, errors.New("the kubelet's configuration " + path + ": an image GC threshold outside 0-100")
		}
	}
	return cfg, nil
}
