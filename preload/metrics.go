package preload

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the preload's Prometheus series. Archive labels are archive file names, of which a
// release has a handful.
type metrics struct {
	archiveRead   *prometheus.CounterVec
	archiveSize   *prometheus.GaugeVec
	read          prometheus.Counter
	imagesTotal   prometheus.Gauge
	imagesPresent prometheus.Gauge
	archives      *prometheus.GaugeVec
	retries       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		archiveRead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "upgrade_repo_preload_archive_read_bytes_total",
			Help: "Compressed bytes of each image archive read by imports.",
		}, []string{"archive"}),
		archiveSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "upgrade_repo_preload_archive_size_bytes",
			Help: "Compressed size of each image archive being imported.",
		}, []string{"archive"}),
		read: counter("upgrade_repo_preload_read_bytes_total", "Compressed bytes of all image archives read by imports."),
		imagesTotal: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "upgrade_repo_preload_images",
			Help: "Images the release lists.",
		}),
		imagesPresent: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "upgrade_repo_preload_images_present",
			Help: "Listed images present in the image store.",
		}),
		archives: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "upgrade_repo_preload_archives",
			Help: "Archives of the release by phase (pending, importing, imported, skipped, failed).",
		}, []string{"phase"}),
		retries: counter("upgrade_repo_preload_retries_total", "Reopened archive streams and retried imports after transient errors."),
	}
	if err := register(reg, m.archiveRead, m.archiveSize, m.read, m.imagesTotal, m.imagesPresent, m.archives, m.retries); err != nil {
		return nil, err
	}
	return m, nil
}

// counter is a counter of the preload's, not yet registered.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// register registers cs with reg, in order, up to the first error; with a nil reg, none.
func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
