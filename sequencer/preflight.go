package sequencer

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/forecast"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
	"github.com/upgrade-repo/upgrade-repo/release"
)

// judgeEarly refuses a plan whose ISO, read from its URL before any download, holds another
// release than the plan's; the policies are then judged with that release (judge). Where the
// ISO could not be read so, the plan goes on and says that it is judged after the download.
func (d *decider) judgeEarly() bool {
	rel := d.o.EarlyRelease
	if rel == nil {
		msg := "the release is judged after the download"
		if d.o.EarlyReleaseErr != nil {
			msg += ": " + d.o.EarlyReleaseErr.Error()
		}
		d.setCondition(v1beta1.ConditionReleaseJudged, metav1.ConditionFalse, "AfterDownload", msg)
		return true
	}
	if rel.Harvester != d.o.Plan.Spec.Version {
		d.fail("ReleaseMismatch", fmt.Sprintf("the ISO holds release %s, the plan wants %s (read from the ISO's URL, before any download)", rel.Harvester, d.o.Plan.Spec.Version))
		return false
	}
	d.setCondition(v1beta1.ConditionReleaseJudged, metav1.ConditionTrue, "BeforeDownload",
		"release "+rel.Harvester+" read from the ISO's URL and judged before any download; judged again once verified")
	return true
}

// judge judges the plan with the release rel (Judge), records the judgement in the decision and
// reports whether the plan may go on; it fails or stalls the plan when not.
func (d *decider) judge(rel *release.Release) bool {
	j := Judge(d.o.Plan, d.judgeFacts(rel))
	d.out.Judgement = &j
	res := j.Result
	if !res.Allowed {
		if res.Transient() {
			d.wait("PolicyCheckPending", res.Summary(), 0, true)
		} else {
			d.fail("PolicyCheckFailed", res.Summary())
		}
		return false
	}
	for _, c := range res.Checks {
		if c.Forced {
			d.out.Events = append(d.out.Events, Event{Warning: true, Reason: "PolicyForced", Message: c.Name + ": " + c.Message})
		}
	}
	return true
}

func (d *decider) initialize() {
	if d.o.UpgradeImage == "" {
		d.fail("InvalidPlan", "the plan names no upgrade image (spec.upgrade) and the sequencer has no default (--upgrade-image)")
		return
	}
	if v := d.o.Version; v != nil {
		if msg := validateVersion(v); msg != "" {
			d.fail("InvalidVersion", msg)
			return
		}
	}
	if !d.judgeEarly() || d.refusedBeforeMeasures() || d.awaitMeasures() || !d.judge(d.o.EarlyRelease) {
		return
	}
	warnings := d.preflight()
	d.st.Warnings = warnings
	if j := d.out.Judgement; j != nil {
		d.st.DiskForecast = diskRecord(j.Disk)
	}
	for _, w := range warnings {
		d.out.Events = append(d.out.Events, Event{Warning: true, Reason: "PreflightWarning", Message: w})
	}
	v := d.o.Version
	d.st.Version = v.Spec.DeepCopy()
	d.st.PreviousVersion = d.o.Installed.Version
	d.st.ISOImageID = v.Spec.ISOChecksum
	if d.st.ISOImageID == "" {
		d.st.ISOImageID = v.Spec.ISOURL
	}
	d.st.Agents = &v1beta1.AgentInstructions{ISOURL: v.Spec.ISOURL, ISOChecksum: v.Spec.ISOChecksum, Hold: true}
	d.st.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
	for _, n := range d.o.Nodes {
		d.st.NodeUpgradeStatuses[n.Name] = v1beta1.NodeUpgradeStatus{}
	}
	d.enter(v1beta1.PhaseInitialized)
}

// MeasureWait is how long the pre-flight waits, from the plan's start, for the agents of Ready
// nodes to measure the release against their containerd (RepoNode status.forecast): it then
// judges with what it has, the release's blob index or its archives' sizes for the others.
const MeasureWait = 30 * time.Second

// refusedBeforeMeasures fails the plan, and reports so, when its policies refuse it for good
// whatever the agents would measure: the agents are asked to measure (awaitMeasures) only for a
// plan that may go on.
func (d *decider) refusedBeforeMeasures() bool {
	if j := Judge(d.o.Plan, d.judgeFacts(d.o.EarlyRelease)); j.Result.Allowed || j.Result.Transient() {
		return false
	}
	return !d.judge(d.o.EarlyRelease)
}

// awaitMeasures keeps the plan in Initializing, up to MeasureWait, while an agent of a Ready node
// of the plan has not measured the Version's ISO; it reports whether it did. Nothing is awaited
// when the ISO's archives could not be read (there is nothing to measure) or no Version names it.
func (d *decider) awaitMeasures() bool {
	v := d.o.Version
	if v == nil || len(d.o.EarlyArchives) == 0 || d.now.Sub(d.enteredAt()) >= MeasureWait {
		return false
	}
	var waiting []string
	for _, n := range PlanNodes(d.o.Plan, d.o.Nodes) {
		rn := d.o.RepoNodes[n.Name]
		if !n.Ready || rn == nil {
			continue
		}
		if f := rn.Forecast; f == nil || !checksum.Same(f.ISOChecksum, v.Spec.ISOChecksum) {
			waiting = append(waiting, n.Name)
		}
	}
	if len(waiting) == 0 {
		return false
	}
	slices.Sort(waiting)
	d.wait(v1beta1.ReasonAwaitingNodeMeasures, fmt.Sprintf("waiting up to %s for the agents of %s to measure the release against their containerd", MeasureWait, strings.Join(waiting, ", ")), 0, false)
	if d.out.RequeueAfter <= 0 || d.out.RequeueAfter > 5*time.Second {
		d.out.RequeueAfter = 5 * time.Second
	}
	return true
}

// validateVersion says what is wrong with v, or returns "". The CRD checks the same, but a
// Version may predate the CRD's rules.
func validateVersion(v *v1beta1.Version) string {
	var bad []string
	if u, err := url.Parse(v.Spec.ISOURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad = append(bad, fmt.Sprintf("isoURL %q is not an http or https URL", redact.URL(v.Spec.ISOURL)))
	}
	if _, err := checksum.Parse(v.Spec.ISOChecksum); err != nil {
		bad = append(bad, "isoChecksum must be the ISO's SHA-512 as 128 hex digits, optionally prefixed with sha512:")
	}
	if len(bad) == 0 {
		return ""
	}
	return "Version " + v.Name + ": " + strings.Join(bad, "; ")
}

// preflight names what the pre-flight could not check or found that will make a drain wait or
// cost availability: warnings, which do not stop the plan. What does not fit on a node's disk is
// a policy (Judge, NodeDiskSpace), decided before this.
func (d *decider) preflight() (warnings []string) {
	if d.o.ISOSize <= 0 {
		warnings = append(warnings, "the ISO's size is unknown (its origin did not announce it): free space was not checked")
	}
	for _, n := range orderedNames(d.o.Nodes) {
		if d.o.RepoNodes[n] == nil {
			warnings = append(warnings, fmt.Sprintf("node %s: no report from its agent yet, its free space was not checked", n))
		}
	}
	return append(warnings, d.o.DrainWarnings...)
}

// diskRecord is the status's record of the judgement's disk forecast.
func diskRecord(disk []forecast.NodeDisk) []v1beta1.NodeDiskForecast {
	var out []v1beta1.NodeDiskForecast
	for _, d := range disk {
		f := v1beta1.NodeDiskForecast{Node: d.Node, ISOBytes: d.ISOBytes, ImagesStoredBytes: d.ImagesStoredBytes,
			ImagesUnpackedBytes: d.ImagesUnpackedBytes, ImagesArchiveBytes: d.ArchiveBytes, ImagesMissing: int32(d.ImagesMissing), Estimated: d.Estimated,
			ImagesBasis: d.Basis, CleanupBytes: d.CleanupBytes, CleanupAfter: d.CleanupAfter}
		for _, u := range d.Filesystems {
			f.Filesystems = append(f.Filesystems, v1beta1.FilesystemForecast{Path: u.Path, What: u.What, FreeBytes: u.FreeBytes,
				TotalBytes: u.TotalBytes, AddedBytes: u.AddedBytes, UsedPercentAfter: int32(math.Round(u.UsedPercentAfter)),
				ImageGCHighPercent: int32(u.ImageGCHighPercent)})
		}
		out = append(out, f)
	}
	return out
}
