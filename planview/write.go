package planview

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/internal/printable"
)

// MessageWidth is how many characters of a node's reason and message the table shows; the JSON
// has them whole.
const MessageWidth = 60

// WriteJSON writes p as one indented JSON object followed by a newline.
func WriteJSON(w io.Writer, p *Plan) error {
	if err := Encode(w, p); err != nil {
		return fmt.Errorf("write plan %s: %w", p.Name, err)
	}
	return nil
}

// WriteText writes p as the operator reads it: a header of "Key: value" lines, a blank line and
// a table with the columns NODE, STATE, SINCE, KUBELET, TARGET, PRELOAD and MESSAGE, aligned
// as kubectl aligns its tables. Ages are kubectl's (3m10s, 5h, 2d).
func WriteText(w io.Writer, p *Plan) error {
	var b bytes.Buffer
	tw := NewTable(&b)
	fmt.Fprintf(tw, "Plan:\t%s\n", p.Name)
	fmt.Fprintf(tw, "Version:\t%s -> %s\n", orUnknown(p.PreviousVersion), orUnknown(p.Version))
	if p.Installed != "" {
		fmt.Fprintf(tw, "Installed:\t%s\n", p.Installed)
	}
	if r := releaseLine(p.Release); r != "" {
		fmt.Fprintf(tw, "Release:\t%s\n", r)
	}
	fmt.Fprintf(tw, "Phase:\t%s\n", phaseLine(p))
	if e := p.Estimate; e != nil {
		fmt.Fprintf(tw, "Ends:\t%s\n", e.Line())
	}
	if d := p.Degraded; d != nil {
		fmt.Fprintf(tw, "Degraded:\t%s\n", oneLine(joinReason(d.Reason, d.Message)))
	}
	if h := p.Held; h != nil {
		fmt.Fprintf(tw, "Held:\t%s in spec.nodeUpgradeOption.pauseNodes: no new node starts until %s\n", strings.Join(h.Nodes, ", "), h.Command)
	}
	if len(p.SkipNodes) > 0 {
		fmt.Fprintf(tw, "Skipping:\t%s (spec.nodeUpgradeOption.skipNodes): the plan finishes without them, at their version\n", strings.Join(p.SkipNodes, ", "))
	}
	if len(p.OnlyNodes) > 0 {
		fmt.Fprintf(tw, "Only:\t%s (spec.nodeUpgradeOption.nodes): the other nodes are left as they are\n", strings.Join(p.OnlyNodes, ", "))
	}
	for i, warn := range p.Warnings {
		key := ""
		if i == 0 {
			key = "Warnings:"
		}
		fmt.Fprintf(tw, "%s\t%s\n", key, oneLine(warn))
	}
	if p.Retries > 0 {
		fmt.Fprintf(tw, "Retries:\t%d\n", p.Retries)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write plan %s: %w", p.Name, err)
	}
	b.WriteString("\n")
	tw = NewTable(&b)
	fmt.Fprintln(tw, "NODE\tSTATE\tSINCE\tKUBELET\tTARGET\tPRELOAD\tMESSAGE")
	for _, n := range p.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, orDash(n.State), age(p.Time, n.StateTime),
			kubelet(n.KubeletVersionBefore, n.KubeletVersion), orDash(n.TargetKubeletVersion), preload(n),
			truncate(oneLine(joinReason(n.Reason, n.Message)), MessageWidth))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write plan %s: %w", p.Name, err)
	}
	if len(p.Nodes) == 0 {
		b.WriteString("(no nodes yet)\n")
	}
	writeControlPlanes(&b, p.Nodes)
	// tabwriter pads a row whose last cells are empty; kubectl's tables keep those spaces, a
	// golden file or a diff of two watches is better without them.
	lines := strings.SplitAfter(b.String(), "\n")
	for i, l := range lines {
		if t := strings.TrimRight(l, " \n"); len(t) < len(l) && strings.HasSuffix(l, "\n") {
			lines[i] = t + "\n"
		}
	}
	if _, err := io.WriteString(w, strings.Join(lines, "")); err != nil {
		return fmt.Errorf("write plan %s: %w", p.Name, err)
	}
	return nil
}

// writeControlPlanes writes, when any node reports its control-plane components, a table of
// their versions: CONTROL PLANE, APISERVER, CONTROLLER-MANAGER, SCHEDULER and ETCD.
func writeControlPlanes(b *bytes.Buffer, nodes []NodeStatus) {
	var cps []NodeStatus
	for _, n := range nodes {
		if n.ControlPlane != nil {
			cps = append(cps, n)
		}
	}
	if len(cps) == 0 {
		return
	}
	b.WriteString("\n")
	tw := NewTable(b)
	fmt.Fprintln(tw, "CONTROL PLANE\tAPISERVER\tCONTROLLER-MANAGER\tSCHEDULER\tETCD")
	for _, n := range cps {
		c := n.ControlPlane
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Name, orDash(c.APIServer), orDash(c.ControllerManager), orDash(c.Scheduler), orDash(c.Etcd))
	}
	_ = tw.Flush() // writes to a bytes.Buffer, which does not fail
}

// SameText reports whether a and b print the same text but for the ages and elapsed times,
// which move with the clock alone: a watch prints the table again only when it is false.
func SameText(a, b *Plan) bool {
	if a == nil || b == nil {
		return a == b
	}
	var ta, tb bytes.Buffer
	ac, bc := *a, *b
	ac.Time, ac.ElapsedSeconds, ac.PhaseElapsedSeconds = time.Time{}, 0, 0
	bc.Time, bc.ElapsedSeconds, bc.PhaseElapsedSeconds = time.Time{}, 0, 0
	// Writing to a buffer does not fail.
	_ = WriteText(&ta, &ac)
	_ = WriteText(&tb, &bc)
	return bytes.Equal(ta.Bytes(), tb.Bytes())
}

func phaseLine(p *Plan) string {
	if p.Phase == "" {
		return "(" + p.Phase.Name() + ")"
	}
	switch p.Phase {
	case v1beta1.PhaseFailed:
		s := "Failed"
		if p.FailedPhase != "" {
			s += " in " + string(p.FailedPhase)
		}
		return s + ended(p, "after")
	case v1beta1.PhaseSucceeded:
		return "Succeeded" + ended(p, "took")
	}
	s := string(p.Phase)
	if p.PhaseTime != nil {
		s += " for " + human(time.Duration(p.PhaseElapsedSeconds)*time.Second)
	}
	if p.StartTime != nil {
		s += ", " + human(time.Duration(p.ElapsedSeconds)*time.Second) + " since the plan started"
	}
	return s
}

// ended says when a finished plan ended and how long it ran: " 3m ago, took 15m".
func ended(p *Plan, verb string) string {
	s := ""
	if p.PhaseTime != nil {
		s += " " + human(time.Duration(p.PhaseElapsedSeconds)*time.Second) + " ago"
	}
	if p.StartTime != nil {
		if s != "" {
			s += ","
		}
		s += " " + verb + " " + human(time.Duration(p.ElapsedSeconds)*time.Second)
	}
	return s
}

func human(d time.Duration) string { return duration.HumanDuration(d) }

// age is kubectl's AGE of t at now; "-" when t is unknown.
func age(now time.Time, t *time.Time) string {
	if t == nil {
		return "-"
	}
	return human(max(now.Sub(*t), 0))
}

// releaseLine names the components of the release that the nodes run.
func releaseLine(r *v1beta1.ReleaseMetadata) string {
	if r == nil {
		return ""
	}
	var parts []string
	for _, c := range []struct{ name, v string }{
		{"kubernetes", r.Kubernetes}, {"etcd", r.Etcd}, {"coredns", r.CoreDNS}, {"os", r.OS},
	} {
		if c.v != "" {
			parts = append(parts, c.name+" "+c.v)
		}
	}
	return strings.Join(parts, ", ")
}

// kubelet is "before -> now", or the one version when both are the same or one is unknown.
func kubelet(before, now string) string {
	switch {
	case before == "" && now == "":
		return "-"
	case before == "" || before == now:
		return orDash(now)
	case now == "":
		return before
	}
	return before + " -> " + now
}

// preload is "done/total pct%", images counted, the share by bytes when known.
func preload(n NodeStatus) string {
	if n.PreloadPercent == nil {
		return "-"
	}
	if n.ImagesTotal == 0 {
		return fmt.Sprintf("%d%%", *n.PreloadPercent)
	}
	return fmt.Sprintf("%d/%d %d%%", n.ImagesDone, n.ImagesTotal, *n.PreloadPercent)
}

func joinReason(reason, message string) string {
	switch {
	case reason == "":
		return message
	case message == "":
		return reason
	}
	return reason + ": " + message
}

// oneLine folds runs of white space (newlines, tabs: a tab would break the table) into one
// space, and escapes what else would not print (package printable): every message, reason and
// warning of a status reaches the operator's terminal through it.
func oneLine(s string) string { return printable.String(strings.Join(strings.Fields(s), " ")) }

// truncate cuts s to width characters, the last three of them "...".
func truncate(s string, width int) string {
	r := []rune(s)
	if len(r) <= width {
		return s
	}
	return string(r[:width-3]) + "..."
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
