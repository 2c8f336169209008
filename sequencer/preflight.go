package sequencer

import (
	"fmt"
	"net/url"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/planview"
	"github.com/upgrade-repo/upgrade-repo/redact"
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
	if !d.judgeEarly() || !d.judge(d.o.EarlyRelease) {
		return
	}
	warnings, blocking := d.preflight()
	if len(blocking) > 0 {
		if !d.o.Plan.Spec.Force {
			d.wait("PreflightCheckFailed", strings.Join(blocking, "; ")+" (spec.force goes on anyway)", 0, true)
			return
		}
		for _, b := range blocking {
			warnings = append(warnings, "forced: "+b)
		}
	}
	d.st.Warnings = warnings
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

// preflight runs the checks that need the agents' reports, before anything is downloaded:
// free space in every node's cache for the ISO (blocking) and for the images besides
// (warning), and what will make a drain wait (warnings).
func (d *decider) preflight() (warnings, blocking []string) {
	want := d.o.Version.Spec.ISOChecksum
	size := d.o.ISOSize
	if size <= 0 {
		warnings = append(warnings, "the ISO's size is unknown (its origin did not announce it): free space was not checked")
	}
	for _, n := range orderedNames(d.o.Nodes) {
		rn := d.o.RepoNodes[n]
		switch {
		case rn == nil:
			warnings = append(warnings, fmt.Sprintf("node %s: no report from its agent yet, its free space was not checked", n))
			continue
		case rn.Cache.TotalBytes <= 0 || size <= 0:
			continue
		}
		var need int64
		if !checksum.Same(rn.ISO.Checksum, want) || rn.ISO.State != v1beta1.ISOReady {
			need = size
		}
		where := rn.Cache.Path
		if where == "" {
			where = "the node cache"
		}
		switch {
		case rn.Cache.FreeBytes < need:
			blocking = append(blocking, fmt.Sprintf("node %s: %s free in %s, the ISO needs %s", n, planview.Bytes(rn.Cache.FreeBytes), where, planview.Bytes(need)))
		case rn.Cache.FreeBytes < need+size:
			warnings = append(warnings, fmt.Sprintf("node %s: %s free in %s: room for the ISO (%s) but perhaps not for the release's images besides", n,
				planview.Bytes(rn.Cache.FreeBytes), where, planview.Bytes(size)))
		}
	}
	return append(warnings, d.o.DrainWarnings...), blocking
}
