package isorepo

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/chunks"
	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/repo"
)

// Open opens the ISO at path, indexes it and parses its metadata: what /readyz waits for. With v,
// every byte read or served is checked first (see chunks.Verifier). It returns the repo handler of
// the release and what closes the file. sum names the release's content (its ETags); when it is
// zero, the volume ID, size and times of the file do.
func Open(path string, sum checksum.Sum, m *repo.Metrics, log *slog.Logger, v *chunks.Verifier) (*repo.Handler, func() error, error) {
	start := time.Now()
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	var ra io.ReaderAt = f
	var checks []repo.Option
	if v != nil {
		ra = v
		checks = append(checks, repo.WithRangeCheck(v.Check))
	}
	fsys, err := iso.Open(ra, fi.Size())
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	info := fsys.Info()
	modTime := info.Modified
	if modTime.IsZero() {
		modTime = info.Created
	}
	if modTime.IsZero() {
		modTime = fi.ModTime()
	}
	identity := sum.String()
	if sum.IsZero() {
		identity = fmt.Sprintf("%s/%d/%d/%d", info.VolumeID, fi.Size(), modTime.UnixNano(), fi.ModTime().UnixNano())
	}
	h, err := repo.New(fsys, append([]repo.Option{
		repo.WithBackingFile(path),
		repo.WithIdentity(identity),
		repo.WithVolumeID(info.VolumeID),
		repo.WithModTime(modTime),
		repo.WithMetrics(m),
		repo.WithLogger(log),
	}, checks...)...)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	log.Info("ready", "iso", path, "volumeID", info.VolumeID, "version", h.Version(),
		"entries", h.Entries(), "took", time.Since(start).Round(time.Microsecond))
	return h, f.Close, nil
}
