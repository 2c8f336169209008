package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// boardCollector exposes the node's status board as the upgrade_repo_agent_ metrics, read at
// each scrape: the node's ISO (state, bytes held of its size, whether the origin is failing) and
// its preload (state, compressed bytes read of the archives' size, images present of those
// listed, pinned against the kubelet's image garbage collection, whether its blobs go into
// containerd's content directory directly). The series carry no node label: the scrape adds the target's, one agent per node. The
// states are named as the RepoNode's status names them, so that a dashboard reads like
// `kubectl get reponodes`.
type boardCollector struct {
	board *Board

	ready, isoState, isoSize, isoHeld, originFailing              *prometheus.Desc
	preloadState, preloadSize, preloadRead, images, imagesPresent *prometheus.Desc
	pinnedImages                                                  *prometheus.Desc
	// directIngest is sent only with an image store, onePass only with one that unpacks.
	directIngest, onePass *prometheus.Desc
}

var _ prometheus.Collector = (*boardCollector)(nil)

// isoStateNames and preloadStateNames are every state the gauges report, each 1 while it is the
// node's and 0 otherwise, so that a change of state is a change of value, not a new series.
var (
	isoStateNames     = []v1beta1.ISOState{v1beta1.ISOPending, v1beta1.ISODownloading, v1beta1.ISOVerifying, v1beta1.ISOReady, v1beta1.ISOFailed}
	preloadStateNames = []v1beta1.PreloadState{v1beta1.PreloadRunning, v1beta1.PreloadDone, v1beta1.PreloadFailed}
)

// newBoardCollector returns the collector of b's metrics.
func newBoardCollector(b *Board) *boardCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("upgrade_repo_agent_"+name, help, labels, nil)
	}
	return &boardCollector{
		board:         b,
		ready:         d("ready", "1 while the node's repo serves a verified ISO, else 0."),
		isoState:      d("iso_state", "1 for the state of the node's ISO (Pending, Downloading, Verifying, Ready, Failed), 0 for the others.", "state"),
		isoSize:       d("iso_size_bytes", "Size of the ISO the node holds or gets (0 until known)."),
		isoHeld:       d("iso_held_bytes", "Bytes of the ISO the node holds, chunk-verified."),
		originFailing: d("origin_failing", "1 while the origin's last answer to this node was a failure being retried, else 0."),
		preloadState:  d("preload_state", "1 for the state of the node's image preload (ImagePreloading, ImagePreloaded, ImagePreloadFailed), 0 for the others; all 0 before it starts.", "state"),
		preloadSize:   d("preload_size_bytes", "Compressed bytes of the image archives the preload imports."),
		preloadRead:   d("preload_read_bytes", "Compressed bytes of the image archives the preload read so far."),
		images:        d("preload_images", "Images the release lists."),
		imagesPresent: d("preload_images_present", "Images the release lists that are present in the node's image store."),
		pinnedImages:  d("pinned_images", "Images the release lists that carry the CRI plugin's pinned label (io.cri-containerd.pinned), which keeps them from the kubelet's image garbage collection on containerd 1.7.3 and later; 0 until counted."),
		directIngest:  d("preload_direct_ingest", "1 while the agent writes image blobs into containerd's content directory itself, 0 while they go through containerd's content service."),
		onePass:       d("preload_one_pass_unpack", "1 while the agent extracts image layers while it writes them, 0 while containerd unpacks them after each import; absent when the agent does not unpack."),
	}
}

// Describe sends the descriptors of every metric the collector sends.
func (c *boardCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ready, c.isoState, c.isoSize, c.isoHeld, c.originFailing,
		c.preloadState, c.preloadSize, c.preloadRead, c.images, c.imagesPresent, c.pinnedImages, c.directIngest, c.onePass} {
		ch <- d
	}
}

// Collect sends the board's state now.
func (c *boardCollector) Collect(ch chan<- prometheus.Metric) {
	rn := c.board.RepoNode("")
	s := c.board.Snapshot()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.ready, bit(s.Ready))
	for _, st := range isoStateNames {
		gauge(c.isoState, bit(rn.ISO.State == st), string(st))
	}
	gauge(c.isoSize, float64(rn.ISO.BytesTotal))
	gauge(c.isoHeld, float64(rn.ISO.BytesDone))
	gauge(c.originFailing, bit(s.ISO.OriginError != ""))
	for _, st := range preloadStateNames {
		gauge(c.preloadState, bit(rn.Preload.State == st), string(st))
	}
	gauge(c.preloadSize, float64(rn.Preload.BytesTotal))
	gauge(c.preloadRead, float64(rn.Preload.BytesDone))
	gauge(c.images, float64(rn.Preload.ImagesTotal))
	gauge(c.imagesPresent, float64(rn.Preload.ImagesDone))
	gauge(c.pinnedImages, float64(rn.Preload.ImagesPinned))
	if s.Ingest != "" {
		gauge(c.directIngest, bit(s.Ingest == v1beta1.IngestDirect))
	}
	if s.Unpack != "" {
		gauge(c.onePass, bit(s.Unpack == v1beta1.UnpackOnePass))
	}
}

// bit is 1 for true and 0 for false.
func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
