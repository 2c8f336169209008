package planview

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/forecast"
	"github.com/upgrade-repo/upgrade-repo/policy"
)

// Component is one component's version before and after.
type Component struct {
	// Name is the component's (harvester, kubernetes, os, ...).
	Name string `json:"name"`
	// Current is its version now; "unknown" when the installed release's metadata is not known.
	Current string `json:"current"`
	// Target is its version in the target release.
	Target string `json:"target"`
	// Changed says Current and Target differ.
	Changed bool `json:"changed"`
}

// Check is one policy's outcome as the plan command shows it.
type Check struct {
	// Check is the policy's outcome as the policies judged it.
	policy.Check
	// Result is pass, fail, warn (failed, forced) or skip (not judged without a cluster).
	Result string `json:"result"`
}

// PhaseStep is one phase that would run.
type PhaseStep struct {
	// Phase is the phase, as the plan's status names it while it runs.
	Phase v1beta1.Phase `json:"phase"`
	// What is what the phase does, in a sentence.
	What string `json:"what"`
}

// Report is what `upgrade-repo plan` prints (WriteReport); -o json prints it as it is, and its JSON
// field names are part of the command's interface for scripts.
type Report struct {
	// Allowed says the policies let the upgrade go ahead.
	Allowed bool `json:"allowed"`
	// Current is the installed version; empty when unknown.
	Current string `json:"current"`
	// Target is the version upgraded to.
	Target string `json:"target"`
	// Components are the release's components, before and after.
	Components []Component `json:"components"`
	// Checks are the policies' outcomes.
	Checks []Check `json:"checks"`
	// Phases are the phases that would run, in order.
	Phases []PhaseStep `json:"phases"`
	// CurrentKubernetes and TargetKubernetes are the control plane's Kubernetes version and the
	// release's, when known: what the Kubernetes version-skew checks judged.
	CurrentKubernetes string `json:"currentKubernetes,omitempty"`
	TargetKubernetes  string `json:"targetKubernetes,omitempty"`
	// ControlPlaneNodes and OtherNodes give the node upgrade order when a cluster was asked.
	ControlPlaneNodes []string `json:"controlPlaneNodes,omitempty"`
	OtherNodes        []string `json:"otherNodes,omitempty"`
	// WorkersFirst says the other nodes go first, then the control plane (a rollback).
	WorkersFirst bool `json:"workersFirst,omitempty"`
	// Batches are the other nodes in the batches they are upgraded in, with the plan's
	// concurrency, when each takes as long: no two nodes of one zone, nor two whose pods one
	// PodDisruptionBudget needs, in one batch.
	Batches [][]string `json:"batches,omitempty"`
	// Notes say what was not known or how the release was read.
	Notes []string `json:"notes,omitempty"`
	// Images is what the target ISO's archives hold, when --release names an ISO.
	Images *ImageReport `json:"images,omitempty"`
	// Disk is each node's disk forecast, when a cluster was asked and the ISO's size is known.
	Disk []forecast.NodeDisk `json:"disk,omitempty"`
}

// ImageReport is what the target ISO's image archives hold, against the current ISO's when
// it was given.
type ImageReport struct {
	// Archives are the target ISO's image archives.
	Archives []Archive `json:"archives"`
	// Compared is true when the installed release's image lists were known (--current-release
	// naming its ISO): New, Removed and Unchanged are then filled.
	Compared bool `json:"compared"`
	// New are the images the target holds and the installed release does not.
	New []string `json:"new,omitempty"`
	// Removed are the images the installed release holds and the target does not.
	Removed []string `json:"removed,omitempty"`
	// Unchanged counts the images both hold.
	Unchanged int `json:"unchanged"`
}

// Archive is one image archive of the target ISO.
type Archive struct {
	// Group is the archive's image group (common, rke2, ...).
	Group string `json:"group"`
	// Archive is the archive's file name.
	Archive string `json:"archive"`
	// Images counts the images its list names.
	Images int `json:"images"`
	// Size is the archive's size in bytes.
	Size int64 `json:"size"`
	// New counts its images that the installed release does not hold, when compared.
	New int `json:"new"`
}

// Version is one Version of the cluster as `plan` lists them.
type Version struct {
	// Name is the Version's name.
	Name string `json:"name"`
	// Allowed says whether the policies let the cluster upgrade to it now.
	Allowed bool `json:"allowed"`
	// Failed names the policies that refuse it.
	Failed []string `json:"failed"`
	// Reachable is the Version's URLReachable condition: True, False or "" before the check.
	Reachable string `json:"reachable"`
	// Installed is true for the version the cluster runs.
	Installed bool `json:"installed"`
}

// CheckResult is how a report shows a check's outcome: pass, warn (failed, forced) or fail.
func CheckResult(ch policy.Check) string {
	switch {
	case ch.Forced:
		return "warn"
	case !ch.Passed:
		return "fail"
	}
	return "pass"
}

// Failed names the checks that failed, in the order the report lists them.
func (r *Report) Failed() []string {
	var failed []string
	for _, c := range r.Checks {
		if c.Result == "fail" {
			failed = append(failed, c.Name)
		}
	}
	return failed
}

// WriteReport writes r as `upgrade-repo plan` prints it: the versions, the components that
// change, a table of the checks, the images and the disk forecast when known, the phases that
// would run, the node order and batches, the notes and the verdict.
func WriteReport(w io.Writer, rep *Report) error {
	tw := NewTable(w)
	fmt.Fprintf(tw, "Upgrade plan: %s -> %s\n", orUnknown(rep.Current), orUnknown(rep.Target))
	if rep.CurrentKubernetes != "" || rep.TargetKubernetes != "" {
		fmt.Fprintf(tw, "Kubernetes: %s -> %s\n", orUnknown(rep.CurrentKubernetes), orUnknown(rep.TargetKubernetes))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "COMPONENT\tCURRENT\tTARGET")
	changed := 0
	for _, c := range rep.Components {
		if c.Changed {
			changed++
			fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, c.Current, c.Target)
		}
	}
	if changed == 0 {
		fmt.Fprintln(tw, "(no component changes)\t\t")
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "POLICY\tREQUIRED\tRESULT\tMESSAGE")
	for _, c := range rep.Checks {
		req := "skippable"
		if c.Required {
			req = "required"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Name, req, c.Result, c.Message)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rep.Images != nil {
		fmt.Fprintln(w)
		writeImages(w, rep.Images)
	}
	if len(rep.Disk) > 0 {
		fmt.Fprintln(w)
		writeDisk(w, rep.Disk)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Phases that would run:")
	for i, p := range rep.Phases {
		fmt.Fprintf(w, "  %d. %s: %s\n", i+1, p.Phase, p.What)
	}
	switch {
	case len(rep.ControlPlaneNodes)+len(rep.OtherNodes) == 0:
	case rep.WorkersFirst:
		fmt.Fprintf(w, "Node order: %s, then control plane %s one at a time (a rollback: no kubelet newer than the API server)\n",
			listOrNone(rep.OtherNodes), listOrNone(rep.ControlPlaneNodes))
	default:
		fmt.Fprintf(w, "Node order: control plane %s one at a time, then %s\n",
			listOrNone(rep.ControlPlaneNodes), listOrNone(rep.OtherNodes))
	}
	if slices.ContainsFunc(rep.Batches, func(b []string) bool { return len(b) > 1 }) {
		fmt.Fprintln(w, "Worker batches (upgraded together; no two of one zone, nor two whose pods one PodDisruptionBudget needs):")
		for i, b := range rep.Batches {
			fmt.Fprintf(w, "  %d. %s\n", i+1, strings.Join(b, ", "))
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "Note: %s\n", n)
	}
	fmt.Fprintln(w)
	if rep.Allowed {
		_, err := fmt.Fprintln(w, "The upgrade is allowed.")
		return err
	}
	_, err := fmt.Fprintf(w, "The upgrade is not allowed: %s failed.\n", strings.Join(rep.Failed(), ", "))
	return err
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, ", ")
}

// writeImages writes the images section of the plan.
func writeImages(w io.Writer, im *ImageReport) {
	tw := NewTable(w)
	fmt.Fprintln(tw, "ARCHIVE\tGROUP\tIMAGES\tSIZE\tNEW")
	for _, a := range im.Archives {
		n := "-"
		if im.Compared {
			n = fmt.Sprint(a.New)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", a.Archive, a.Group, a.Images, forecast.Bytes(a.Size), n)
	}
	_ = tw.Flush()
	if !im.Compared {
		fmt.Fprintln(w, "Images against the installed release: unknown (give --current-release with its ISO to compare)")
		return
	}
	fmt.Fprintf(w, "Images against the installed release: %d new, %d removed, %d unchanged\n", len(im.New), len(im.Removed), im.Unchanged)
	for _, ref := range im.New {
		fmt.Fprintf(w, "  + %s\n", ref)
	}
	for _, ref := range im.Removed {
		fmt.Fprintf(w, "  - %s\n", ref)
	}
}

// writeDisk writes each node's disk forecast: what the plan adds, on which file system, and its
// use after, against the kubelet's image GC threshold where images land; then what the previous
// release's cleanup frees and when, which is never room for the plan.
func writeDisk(w io.Writer, disk []forecast.NodeDisk) {
	fmt.Fprintln(w, "Disk, predicted per node (ISO; the release's images it lacks, stored and unpacked):")
	tw := NewTable(w)
	fmt.Fprintln(tw, "NODE\tADDS\tFILE SYSTEM\tFREE\tUSED AFTER\tGC AT\tRESULT")
	estimated := false
	var cleanups []string
	basis := map[string][]string{}
	for _, d := range disk {
		estimated = estimated || d.Estimated
		if d.Basis != "" {
			basis[d.Basis] = append(basis[d.Basis], d.Node)
		}
		if d.CleanupBytes > 0 {
			cleanups = append(cleanups, fmt.Sprintf("%s frees %s %s", d.Node, forecast.Bytes(d.CleanupBytes), d.CleanupAfter))
		}
		if len(d.Filesystems) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t(not reported)\t\t\t\t\n", d.Node, forecast.Bytes(d.AddedBytes()))
			continue
		}
		for _, u := range d.Filesystems {
			gc, result := "-", "fits"
			if u.ImageGCHighPercent > 0 {
				gc = fmt.Sprintf("%d%%", u.ImageGCHighPercent)
			}
			if u.Problem() != "" {
				result = "does not fit"
			}
			fmt.Fprintf(tw, "%s\t%s (%s)\t%s\t%s\t%.0f%%\t%s\t%s\n", d.Node, forecast.Bytes(u.AddedBytes), u.What, u.Path,
				forecast.Bytes(u.FreeBytes), u.UsedPercentAfter, gc, result)
		}
	}
	_ = tw.Flush()
	var counted []string
	for _, b := range []struct{ basis, words string }{
		{forecast.BasisMeasured, "measured by the node's agent against its containerd"},
		{forecast.BasisBlobs, "from the release's blob index"},
		{forecast.BasisImages, "from the archives' sizes"},
	} {
		if nodes := basis[b.basis]; len(nodes) > 0 {
			counted = append(counted, b.words+" on "+strings.Join(nodes, ", "))
		}
	}
	if len(counted) > 0 {
		fmt.Fprintf(w, "Images counted %s\n", strings.Join(counted, "; "))
	}
	if estimated {
		fmt.Fprintln(w, "(estimated: the ISO does not record its images' blobs, so each archive counts in proportion to the images a node lacks, shared layers as often as archives hold them)")
	}
	if len(cleanups) > 0 {
		fmt.Fprintf(w, "The previous release's cleanup, not counted as room for this plan: %s\n", strings.Join(cleanups, "; "))
	}
}

// WriteVersions writes the cluster's Versions as `upgrade-repo plan` without a target lists
// them: each one's verdict, whether its URL was reachable, and the policies that refuse it.
func WriteVersions(w io.Writer, out []Version) error {
	tw := NewTable(w)
	fmt.Fprintln(tw, "VERSION\tUPGRADE\tURL\tREFUSED BY")
	for _, v := range out {
		verdict := "allowed"
		switch {
		case v.Installed:
			verdict = "installed"
		case !v.Allowed:
			verdict = "refused"
		}
		reach := map[string]string{"True": "reachable", "False": "unreachable"}[v.Reachable]
		if reach == "" {
			reach = "not checked"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Name, verdict, reach, listOrDash(v.Failed))
	}
	if len(out) == 0 {
		fmt.Fprintln(tw, "(no Version in the cluster)\t\t\t")
	}
	return tw.Flush()
}

func listOrDash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ")
}
