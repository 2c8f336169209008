package planview

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// liveViews is one plan followed through six changes: two nodes download the ISO (one from
// the start, at 16 MiB/s, the other later), the plan goes on to ImagePreloading, node-c's
// preload moves, a warning and Degraded appear, Degraded clears and node-c's message changes.
func liveViews() []*Plan {
	const mib = 1 << 20
	type step struct {
		at       time.Duration
		phase    v1beta1.Phase
		iso      map[string]int64
		nodes    map[string]v1beta1.NodeUpgradeStatus
		degraded bool
		warnings []string
	}
	steps := []step{
		{at: 60 * time.Second, phase: v1beta1.PhaseISODownloading, iso: map[string]int64{"node-b": 0, "node-c": 0},
			nodes: map[string]v1beta1.NodeUpgradeStatus{"node-b": {Message: "ISO Downloading 0%"}, "node-c": {Message: "ISO Downloading 0%"}}},
		{at: 70 * time.Second, phase: v1beta1.PhaseISODownloading, iso: map[string]int64{"node-b": 160 * mib, "node-c": 0},
			nodes: map[string]v1beta1.NodeUpgradeStatus{"node-b": {Message: "ISO Downloading 15%"}, "node-c": {Message: "ISO Downloading 0%"}}},
		{at: 80 * time.Second, phase: v1beta1.PhaseISODownloading, iso: map[string]int64{"node-b": 320 * mib, "node-c": 100 * mib},
			nodes: map[string]v1beta1.NodeUpgradeStatus{"node-b": {Message: "ISO Downloading 31%"}, "node-c": {Message: "ISO Downloading 9%"}}},
		{at: 150 * time.Second, phase: v1beta1.PhaseImagePreloading, iso: map[string]int64{"node-b": 1024 * mib, "node-c": 1024 * mib},
			nodes: map[string]v1beta1.NodeUpgradeStatus{
				"node-b": {State: v1beta1.NodeImagePreloaded, ImagesDone: 4, ImagesTotal: 4, BytesDone: 400 * mib, BytesTotal: 400 * mib},
				"node-c": {State: v1beta1.NodeImagePreloading, ImagesDone: 1, ImagesTotal: 4, BytesDone: 100 * mib, BytesTotal: 400 * mib},
			}},
		{at: 170 * time.Second, phase: v1beta1.PhaseImagePreloading, iso: map[string]int64{"node-b": 1024 * mib, "node-c": 1024 * mib}, degraded: true,
			warnings: []string{"node node-c: 2.0 GiB free in /var/lib/upgrade-repo"},
			nodes: map[string]v1beta1.NodeUpgradeStatus{
				"node-b": {State: v1beta1.NodeImagePreloaded, ImagesDone: 4, ImagesTotal: 4, BytesDone: 400 * mib, BytesTotal: 400 * mib},
				"node-c": {State: v1beta1.NodeImagePreloading, ImagesDone: 2, ImagesTotal: 4, BytesDone: 200 * mib, BytesTotal: 400 * mib},
			}},
		{at: 180 * time.Second, phase: v1beta1.PhaseImagePreloading, iso: map[string]int64{"node-b": 1024 * mib, "node-c": 1024 * mib},
			warnings: []string{"node node-c: 2.0 GiB free in /var/lib/upgrade-repo"},
			nodes: map[string]v1beta1.NodeUpgradeStatus{
				"node-b": {State: v1beta1.NodeImagePreloaded, ImagesDone: 4, ImagesTotal: 4, BytesDone: 400 * mib, BytesTotal: 400 * mib},
				"node-c": {State: v1beta1.NodeImagePreloading, Message: "importing harvester-images", ImagesDone: 2, ImagesTotal: 4, BytesDone: 200 * mib, BytesTotal: 400 * mib},
			}},
	}
	var out []*Plan
	for _, s := range steps {
		phases := upTo(s.phase)
		st := v1beta1.UpgradePlanStatus{
			Phase: s.phase, PhaseTransitionTimestamps: transitions(50*time.Second*time.Duration(len(phases))/2, phases...),
			Conditions:      conditions(true, s.degraded, "AgentNotReporting", "node-c: the agent has not reported since 2025-06-01T10:02:40Z", 170*time.Second),
			PreviousVersion: "v1.5.2", Warnings: s.warnings, NodeUpgradeStatuses: s.nodes,
		}
		if !s.degraded {
			st.Conditions = conditions(true, false, "Upgrading", "", 0)
		}
		nodes := []Node{}
		for _, n := range []string{"node-b", "node-c"} {
			nodes = append(nodes, Node{Name: n, KubeletVersion: "v1.32.7", ISOBytesDone: s.iso[n], ISOBytesTotal: 1024 * mib})
		}
		p := New(plan(st), nodes, t0.Add(s.at))
		p.Installed = "v1.5.2"
		out = append(out, p)
	}
	return out
}

func TestLiveGolden(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"lines", "terminal"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var l Live
			var b bytes.Buffer
			for _, p := range liveViews() {
				if mode == "lines" {
					for _, line := range l.Lines(p) {
						b.WriteString(line + "\n")
					}
					continue
				}
				require.NoError(t, l.Redraw(&b, p))
			}
			path := filepath.Join("testdata", "live-"+mode+".golden")
			if *update {
				require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test ./planview -update to write it")
			require.Equal(t, string(want), b.String())
		})
	}
}

// TestLiveLinesOnlyChanges: a view that changes nothing writes nothing; each change is one line.
func TestLiveLinesOnlyChanges(t *testing.T) {
	t.Parallel()
	views := liveViews()
	var l Live
	first := l.Lines(views[0])
	require.Len(t, first, 3, "the plan and its two nodes")
	require.Empty(t, l.Lines(views[0]), "nothing changed")
	got := l.Lines(views[1])
	require.Equal(t, []string{"10:01:10 node node-b: download 160.0 MiB/1.0 GiB 15%, 16.0 MiB/s, ETA 54s"}, got)
}

// TestLiveRedrawInPlace: each redraw moves the cursor up over exactly what the one before drew.
func TestLiveRedrawInPlace(t *testing.T) {
	t.Parallel()
	var l Live
	var prev string
	for i, p := range liveViews() {
		var b bytes.Buffer
		require.NoError(t, l.Redraw(&b, p))
		out := b.String()
		if i == 0 {
			require.NotContains(t, out, "\x1b[")
		} else {
			require.True(t, strings.HasPrefix(out, "\x1b["+strconv.Itoa(strings.Count(prev, "\n"))+"A\x1b[J"), "redraw %d: %q", i, out[:12])
		}
		prev = strings.TrimPrefix(out, out[:strings.Index(out, "Plan:")])
	}
}
