package agent

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/forecast"
	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
	"github.com/upgrade-repo/upgrade-repo/isorelease"
	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/release"
	"github.com/upgrade-repo/upgrade-repo/sequencer/report"
)

// Measuring a release before the download, for the sequencer's pre-flight.
//
// While a plan is being judged (report.Instruction.Judged), the agent reads its Version's ISO
// through range requests (isorelease.OpenBlobs: the volume's directories, the release's metadata
// and the blob index in blocks of 32 KiB, not the archives' headers nor, for an archive the index
// names, its image list; 192 KiB of an ISO of three archives where Open reads 1 MiB), checks
// every blob against the node's containerd (preload.MeasureMissing) and forecasts what the
// previous release's cleanup frees (preload.CleanupForecaster), and reports
// the figures, for that ISO's checksum, in its RepoNode's status.forecast. A failure is reported
// there, not retried before forecastAgain.

// Bounds of one measure.
const (
	// forecastTimeout bounds one measure: the ranges read and the store's answers.
	forecastTimeout = 2 * time.Minute
	// forecastAgain is how long a measure of an ISO stands before it is made again while a plan
	// is still judged: the node's containerd changes.
	forecastAgain = 10 * time.Minute
)

// forecastISO measures, while plans are judged, what their releases would add to this node, and
// puts the figures on the board, until ctx ends.
func (a *Agent) forecastISO(ctx context.Context, hc *http.Client) {
	checker, ok := a.images.(preload.BlobChecker)
	if !ok || a.plans == nil {
		return
	}
	var last *v1beta1.RepoNodeForecast
	for {
		changed := a.plans.changes()
		in, _ := a.plans.current()
		if in.Judged != "" {
			if f := a.forecastVersion(ctx, hc, checker, in, last); f != nil {
				last = f
				a.board.update(func(s *Status) { s.Forecast = f })
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-time.After(forecastAgain):
		}
	}
}

// forecastVersion measures the release of the Version in.Judged names, unless last measured its
// ISO less than forecastAgain ago; nil when nothing was measured.
func (a *Agent) forecastVersion(ctx context.Context, hc *http.Client, checker preload.BlobChecker, in report.Instruction, last *v1beta1.RepoNodeForecast) *v1beta1.RepoNodeForecast {
	var v v1beta1.Version
	if err := a.kube.Get(ctx, client.ObjectKey{Name: in.Judged}, &v); err != nil {
		if ctx.Err() == nil {
			a.log.Warn("forecast the judged release: read its Version", "version", in.Judged, "err", err)
		}
		return nil
	}
	if last != nil && checksum.Same(last.ISOChecksum, v.Spec.ISOChecksum) && time.Since(last.Time.Time) < forecastAgain {
		return nil
	}
	mctx, cancel := context.WithTimeout(ctx, forecastTimeout)
	defer cancel()
	f := a.measureRelease(mctx, hc, checker, v.Spec.ISOURL, v.Spec.ISOChecksum)
	if ctx.Err() != nil {
		return nil
	}
	a.log.Info("release measured against the node's containerd", "version", in.Judged, "blobs", f.Blobs, "missingBlobs", f.MissingBlobs,
		"missingStoredBytes", f.MissingStoredBytes, "missingUnpackedBytes", f.MissingUnpackedBytes, "cleanupBytes", f.CleanupBytes, "message", f.Message)
	return f
}

// measureRelease reads the release in the ISO at isoURL through range requests (what the blob
// index needs, isorelease.OpenBlobs, within forecastTimeout) and measures it against checker:
// what the node lacks of its blobs and, when the store can tell, what the previous release's
// cleanup frees. What fails is said in the Message; the rest is measured.
func (a *Agent) measureRelease(ctx context.Context, hc *http.Client, checker preload.BlobChecker, isoURL, isoChecksum string) *v1beta1.RepoNodeForecast {
	f := &v1beta1.RepoNodeForecast{ISOChecksum: isoChecksum}
	defer func() { f.Time = metav1.Now() }()
	c, err := isorelease.OpenBlobs(ctx, hc, isoURL, httprange.WithDeadline(forecastTimeout),
		httprange.WithReadTimeouts(10*time.Second, backoff.Policy{Initial: 250 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2, Attempts: 3}))
	if err != nil {
		f.Message = fmt.Sprintf("read the release from its ISO: %v", err)
		return f
	}
	f.Release = c.Release.Harvester
	target := f.Release
	if sum, err := checksum.Parse(isoChecksum); err == nil {
		target = claimName(f.Release, sum.Hex())
	}
	var images [][]preload.ImageBlob
	needed := map[string]bool{}
	var keep []string
	for _, ar := range c.Archives {
		keep = append(keep, ar.Images...)
		if !forecast.Layered(ar.Images, ar.Blobs) {
			continue
		}
		for _, ref := range ar.Images {
			var bs []preload.ImageBlob
			for _, b := range ar.Blobs[ref] {
				bs = append(bs, preload.ImageBlob{Digest: b.Digest, Size: b.Size, Unpacked: b.Unpacked})
				needed[b.Digest] = true
			}
			images = append(images, bs)
		}
	}
	var msgs []string
	if len(images) == 0 {
		msgs = append(msgs, "the ISO records no image blobs ("+release.BlobsFile+")")
	} else if m, err := preload.MeasureMissing(ctx, checker, images); err != nil {
		msgs = append(msgs, "check the release's blobs: "+err.Error())
	} else {
		f.Blobs, f.MissingBlobs, f.MissingStoredBytes = int32(m.Blobs), int32(m.MissingBlobs), m.StoredBytes
		f.MissingLayers, f.MissingUnpackedBytes = int32(m.Layers), m.UnpackedBytes
	}
	if cf, ok := checker.(preload.CleanupForecaster); ok {
		n, bytes, err := cf.ForecastCleanup(ctx, target, keep, func(d string) bool { return needed[d] })
		if err != nil {
			msgs = append(msgs, "forecast the cleanup: "+err.Error())
		} else {
			f.CleanupMeasured, f.CleanupImages, f.CleanupBytes = true, int32(n), bytes
		}
	}
	f.Message = strings.Join(msgs, "; ")
	return f
}
