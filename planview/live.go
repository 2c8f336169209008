package planview

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/upgrade-repo/upgrade-repo/forecast"
)

// BarWidth is how many characters a progress bar of Live's terminal view has.
const BarWidth = 20

// Live follows one plan from view to view, as `upgrade status -w` and `upgrade apply` do: Lines
// says what changed since the previous view, one line per change, for a log; Redraw draws the
// table again in place on a terminal, with a progress bar, rate and ETA for every node's
// download and preload. Rates are measured between the views in which a node's bytes moved, by
// the views' times, so that the output is a function of the views. A Live is used by one
// goroutine; its zero value is ready.
type Live struct {
	prev    *Plan
	samples map[string]sample
	// drawn is how many lines the last Redraw wrote.
	drawn int
}

// sample is the last measure of one node's download or preload.
type sample struct {
	at   time.Time
	done int64
	// rate is in bytes a second between the last two measures that moved; 0 when unknown.
	rate float64
}

// progress is one node's download or preload as Live shows it.
type progress struct {
	kind        string
	done, total int64
	rate        float64
}

// measure records p's bytes and returns each node's progress, by node name.
func (l *Live) measure(p *Plan) map[string][]progress {
	if l.samples == nil {
		l.samples = map[string]sample{}
	}
	out := map[string][]progress{}
	for _, n := range p.Nodes {
		for _, pr := range []progress{{kind: "download", done: n.DownloadBytesDone, total: n.DownloadBytesTotal}, {kind: "preload", done: n.BytesDone, total: n.BytesTotal}} {
			if pr.total <= 0 {
				continue
			}
			key := n.Name + "/" + pr.kind
			s, seen := l.samples[key]
			switch {
			case !seen:
				s = sample{at: p.Time, done: pr.done}
			case pr.done != s.done:
				if dt := p.Time.Sub(s.at).Seconds(); dt > 0 && pr.done > s.done {
					s.rate = float64(pr.done-s.done) / dt
				} else {
					s.rate = 0
				}
				s.at, s.done = p.Time, pr.done
			}
			if pr.done >= pr.total {
				s.rate = 0
			}
			l.samples[key] = s
			pr.rate = s.rate
			out[n.Name] = append(out[n.Name], pr)
		}
	}
	return out
}

// Lines returns what changed in p since the previous view given to Lines, one line each, each
// starting with p's time: the first view gives the plan and every node; later ones a phase
// entered, Degraded set or cleared, a new warning, and for each node that moved one line: its
// new state, else its progress, else its new message.
func (l *Live) Lines(p *Plan) []string {
	prog := l.measure(p)
	at := p.Time.Format("15:04:05") + " "
	prev := l.prev
	l.prev = p
	if prev == nil {
		out := []string{at + fmt.Sprintf("plan %s: %s -> %s, %s", p.Name, orUnknown(p.PreviousVersion), orUnknown(p.Version), phaseLine(p))}
		if d := p.Degraded; d != nil {
			out = append(out, at+"degraded: "+oneLine(joinReason(d.Reason, d.Message)))
		}
		for _, w := range p.Warnings {
			out = append(out, at+"warning: "+oneLine(w))
		}
		for _, n := range p.Nodes {
			out = append(out, at+nodeLine(n, prog[n.Name]))
		}
		return out
	}
	var out []string
	if p.Phase != prev.Phase {
		out = append(out, at+fmt.Sprintf("phase %s -> %s", orDash(string(prev.Phase)), phaseLine(p)))
	}
	switch d, pd := p.Degraded, prev.Degraded; {
	case d != nil && (pd == nil || d.Reason != pd.Reason || d.Message != pd.Message):
		out = append(out, at+"degraded: "+oneLine(joinReason(d.Reason, d.Message)))
	case d == nil && pd != nil:
		out = append(out, at+"no longer degraded")
	}
	for _, w := range p.Warnings {
		if !slices.Contains(prev.Warnings, w) {
			out = append(out, at+"warning: "+oneLine(w))
		}
	}
	before := map[string]NodeStatus{}
	for _, n := range prev.Nodes {
		before[n.Name] = n
	}
	for _, n := range p.Nodes {
		b, seen := before[n.Name]
		switch {
		case !seen || n.State != b.State || n.Reason != b.Reason:
			out = append(out, at+nodeLine(n, prog[n.Name]))
		case n.BytesDone != b.BytesDone || n.DownloadBytesDone != b.DownloadBytesDone:
			// Only what moved: a finished download is not said again at each preload step.
			moved := slices.DeleteFunc(slices.Clone(prog[n.Name]), func(pr progress) bool {
				return pr.kind == "download" && pr.done == b.DownloadBytesDone || pr.kind == "preload" && pr.done == b.BytesDone
			})
			out = append(out, at+"node "+n.Name+": "+progressText(moved))
		case n.Message != b.Message:
			out = append(out, at+"node "+n.Name+": "+oneLine(n.Message))
		}
	}
	return out
}

// nodeLine is a node's state and what it says, with its progress while some is unfinished.
func nodeLine(n NodeStatus, prog []progress) string {
	parts := []string{}
	if n.State != "" {
		parts = append(parts, n.State)
	}
	if m := oneLine(joinReason(n.Reason, n.Message)); m != "" {
		parts = append(parts, m)
	}
	if len(parts) == 0 {
		parts = append(parts, "-")
	}
	s := "node " + n.Name + ": " + strings.Join(parts, ": ")
	if open := slices.DeleteFunc(slices.Clone(prog), func(pr progress) bool { return pr.done >= pr.total }); len(open) > 0 {
		s += " (" + progressText(open) + ")"
	}
	return s
}

// progressText is "download 2.0 GiB/4.0 GiB 50%, 12.0 MiB/s, ETA 2m50s; preload ...".
func progressText(prog []progress) string {
	parts := make([]string, 0, len(prog))
	for _, pr := range prog {
		s := fmt.Sprintf("%s %s/%s %d%%", pr.kind, forecast.Bytes(pr.done), forecast.Bytes(pr.total), *percent(pr.done, pr.total))
		if r := rateText(pr); r != "" {
			s += ", " + r
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// rateText is "12.0 MiB/s, ETA 2m50s", or "" when the rate is unknown.
func rateText(pr progress) string {
	if pr.rate <= 0 || pr.done >= pr.total {
		return ""
	}
	eta := time.Duration(float64(pr.total-pr.done) / pr.rate * float64(time.Second))
	return fmt.Sprintf("%s/s, ETA %s", forecast.Bytes(int64(pr.rate)), human(eta))
}

// Redraw writes p as WriteText does, followed by a PROGRESS table of every node's download and
// preload with a bar, bytes, rate and ETA, over what the previous Redraw drew: the cursor moves
// up that many lines and the screen below is cleared (ANSI escapes), so the view stays in place
// on a terminal.
func (l *Live) Redraw(w io.Writer, p *Plan) error {
	prog := l.measure(p)
	var b bytes.Buffer
	if l.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA\x1b[J", l.drawn)
	}
	var t bytes.Buffer
	if err := WriteText(&t, p); err != nil {
		return err
	}
	rows := 0
	for _, n := range p.Nodes {
		for _, pr := range prog[n.Name] {
			if rows == 0 {
				t.WriteString("\nPROGRESS\n")
			}
			rows++
			fmt.Fprintf(&t, "%-*s %-8s %s %3d%%  %s/%s", nameWidth(p), n.Name, pr.kind, bar(pr.done, pr.total),
				*percent(pr.done, pr.total), forecast.Bytes(pr.done), forecast.Bytes(pr.total))
			if r := rateText(pr); r != "" {
				t.WriteString("  " + r)
			}
			t.WriteString("\n")
		}
	}
	l.drawn = strings.Count(t.String(), "\n")
	b.Write(t.Bytes())
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("write plan %s: %w", p.Name, err)
	}
	return nil
}

func nameWidth(p *Plan) int {
	w := 4
	for _, n := range p.Nodes {
		w = max(w, len(n.Name))
	}
	return w
}

// bar is "[#########-----------]", BarWidth characters between the brackets.
func bar(done, total int64) string {
	filled := int(min(max(done, 0), total) * BarWidth / total)
	return "[" + strings.Repeat("#", filled) + strings.Repeat("-", BarWidth-filled) + "]"
}
