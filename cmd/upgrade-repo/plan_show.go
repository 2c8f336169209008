package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/upgrade-repo/upgrade-repo/forecast"
	"github.com/upgrade-repo/upgrade-repo/isorelease"
	"github.com/upgrade-repo/upgrade-repo/planview"
	"github.com/upgrade-repo/upgrade-repo/release"
)

// planComponents compares the component versions of two releases. Without the current release's
// metadata only the harvester version is known before.
func planComponents(current string, cur *release.Release, target string, tgt *release.Release) []planComponent {
	before := map[string]string{"harvester": current}
	if cur != nil {
		before = cur.Components()
	}
	after := map[string]string{"harvester": target}
	if tgt != nil {
		after = tgt.Components()
	}
	var names []string
	for k := range after {
		names = append(names, k)
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	// harvester first: it is the version the plan is about.
	if i := slices.Index(names, "harvester"); i > 0 {
		names = append([]string{"harvester"}, slices.Delete(names, i, i+1)...)
	}
	out := make([]planComponent, 0, len(names))
	for _, n := range names {
		b, ok := before[n]
		if !ok || b == "" {
			b = "unknown"
		}
		t := after[n]
		if t == "" {
			t = "unknown"
		}
		out = append(out, planComponent{Name: n, Current: b, Target: t, Changed: b != t})
	}
	return out
}

func printUpgradePlan(w io.Writer, rep *planReport) error {
	tw := planview.NewTable(w)
	fmt.Fprintf(tw, "Upgrade plan: %s -> %s\n", planOrUnknown(rep.Current), planOrUnknown(rep.Target))
	if rep.CurrentKubernetes != "" || rep.TargetKubernetes != "" {
		fmt.Fprintf(tw, "Kubernetes: %s -> %s\n", planOrUnknown(rep.CurrentKubernetes), planOrUnknown(rep.TargetKubernetes))
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
		printImages(w, rep.Images)
	}
	if len(rep.Disk) > 0 {
		fmt.Fprintln(w)
		printDisk(w, rep.Disk)
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
			planListOrNone(rep.OtherNodes), planListOrNone(rep.ControlPlaneNodes))
	default:
		fmt.Fprintf(w, "Node order: control plane %s one at a time, then %s\n",
			planListOrNone(rep.ControlPlaneNodes), planListOrNone(rep.OtherNodes))
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
	var failed []string
	for _, c := range rep.Checks {
		if c.Result == "fail" {
			failed = append(failed, c.Name)
		}
	}
	_, err := fmt.Fprintf(w, "The upgrade is not allowed: %s failed.\n", strings.Join(failed, ", "))
	return err
}

func planOrUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func planListOrNone(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, ", ")
}

// planImageReport is what the target ISO's image archives hold, against the current ISO's when
// it was given.
type planImageReport struct {
	Archives []planArchive `json:"archives"`
	// Compared is true when the installed release's image lists were known (--current-release
	// naming its ISO): New, Removed and Unchanged are then filled.
	Compared  bool     `json:"compared"`
	New       []string `json:"new,omitempty"`
	Removed   []string `json:"removed,omitempty"`
	Unchanged int      `json:"unchanged"`
}

// planArchive is one image archive of the target ISO.
type planArchive struct {
	Group   string `json:"group"`
	Archive string `json:"archive"`
	Images  int    `json:"images"`
	Size    int64  `json:"size"`
	// New counts its images that the installed release does not hold, when compared.
	New int `json:"new"`
}

// planImages compares the image lists of the target ISO with the current one's (nil: unknown).
func planImages(target, current *isorelease.Contents) *planImageReport {
	rep := &planImageReport{Compared: current != nil}
	before := map[string]bool{}
	if current != nil {
		for _, ref := range current.Images() {
			before[ref] = true
		}
	}
	after := map[string]bool{}
	for _, a := range target.Archives {
		pa := planArchive{Group: a.Group, Archive: a.Name(), Images: len(a.Images), Size: a.Size}
		for _, ref := range a.Images {
			if current != nil && !before[ref] {
				pa.New++
			}
		}
		rep.Archives = append(rep.Archives, pa)
	}
	for _, ref := range target.Images() {
		after[ref] = true
		switch {
		case current == nil:
		case before[ref]:
			rep.Unchanged++
		default:
			rep.New = append(rep.New, ref)
		}
	}
	if current != nil {
		for _, ref := range current.Images() {
			if !after[ref] {
				rep.Removed = append(rep.Removed, ref)
			}
		}
	}
	return rep
}

// printImages writes the images section of the plan.
func printImages(w io.Writer, im *planImageReport) {
	tw := planview.NewTable(w)
	fmt.Fprintln(tw, "ARCHIVE\tGROUP\tIMAGES\tSIZE\tNEW")
	for _, a := range im.Archives {
		n := "-"
		if im.Compared {
			n = fmt.Sprint(a.New)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", a.Archive, a.Group, a.Images, planview.Bytes(a.Size), n)
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

// printDisk writes each node's disk forecast: what the plan adds, on which file system, and its
// use after, against the kubelet's image GC threshold where images land; then what the previous
// release's cleanup frees and when, which is never room for the plan.
func printDisk(w io.Writer, disk []forecast.NodeDisk) {
	fmt.Fprintln(w, "Disk, predicted per node (ISO; the release's images it lacks, stored and unpacked):")
	tw := planview.NewTable(w)
	fmt.Fprintln(tw, "NODE\tADDS\tFILE SYSTEM\tFREE\tUSED AFTER\tGC AT\tRESULT")
	estimated := false
	var cleanups []string
	for _, d := range disk {
		estimated = estimated || d.Estimated
		if d.CleanupBytes > 0 {
			cleanups = append(cleanups, fmt.Sprintf("%s frees %s %s", d.Node, planview.Bytes(d.CleanupBytes), d.CleanupAfter))
		}
		if len(d.Filesystems) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t(not reported)\t\t\t\t\n", d.Node, planview.Bytes(d.AddedBytes()))
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
			fmt.Fprintf(tw, "%s\t%s (%s)\t%s\t%s\t%.0f%%\t%s\t%s\n", d.Node, planview.Bytes(u.AddedBytes), u.What, u.Path,
				planview.Bytes(u.FreeBytes), u.UsedPercentAfter, gc, result)
		}
	}
	_ = tw.Flush()
	if estimated {
		fmt.Fprintln(w, "(estimated: the ISO does not record its images' blobs, so each archive counts in proportion to the images a node lacks, shared layers as often as archives hold them)")
	}
	if len(cleanups) > 0 {
		fmt.Fprintf(w, "The previous release's cleanup, not counted as room for this plan: %s\n", strings.Join(cleanups, "; "))
	}
}
