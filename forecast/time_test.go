package forecast

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTime(t *testing.T) {
	t.Parallel()
	const m = time.Minute
	past := []PastPlan{
		{Phases: map[string]time.Duration{"Download": 10 * m, "Preload": 6 * m, "Cleanup": 1 * m}, NodeSteps: []time.Duration{5 * m, 7 * m}},
		{Phases: map[string]time.Duration{"Download": 20 * m, "Preload": 4 * m}, NodeSteps: []time.Duration{9 * m}},
	}
	all := []string{"Download", "Preload", "Nodes", "Cleanup"}
	tests := []struct {
		name   string
		in     TimeInput
		want   []PhaseTime
		nodes  []NodeTime
		total  time.Duration
		first  bool
		partly bool
	}{
		{name: "first plan, nothing measured", in: TimeInput{Phases: all, NodePhase: "Nodes", ControlPlaneLeft: []string{"cp"}},
			want:  []PhaseTime{{"Download", 0, BasisUnknown, 0}, {"Preload", 0, BasisUnknown, 0}, {"Nodes", 0, BasisUnknown, 0}, {"Cleanup", 0, BasisUnknown, 0}},
			first: true, partly: true},
		{name: "first plan, download rate measured", in: TimeInput{Phases: all, NodePhase: "Nodes",
			Rated: map[string]Progress{"Download": {DoneBytes: 100, TotalBytes: 400, Elapsed: 1 * m}}},
			want:  []PhaseTime{{"Download", 3 * m, BasisRate, 0}, {"Preload", 0, BasisUnknown, 0}, {"Nodes", 0, BasisUnknown, 0}, {"Cleanup", 0, BasisUnknown, 0}},
			total: 3 * m, first: true, partly: true},
		{name: "history: medians, elapsed taken off the current phase", in: TimeInput{Phases: all, NodePhase: "Nodes", History: past,
			Elapsed: 4 * m, ControlPlaneLeft: []string{"cp1", "cp2"}, OthersLeft: []string{"w1", "w2", "w3"}, Concurrency: 2},
			// Download: median(10, 20) = 10 less 4; node step median(5, 7, 9) = 7: 2 control planes then 2 rounds.
			want:  []PhaseTime{{"Download", 6 * m, BasisHistory, 2}, {"Preload", 4 * m, BasisHistory, 2}, {"Nodes", 28 * m, BasisHistory, 3}, {"Cleanup", 1 * m, BasisHistory, 1}},
			nodes: []NodeTime{{"cp1", 17 * m}, {"cp2", 24 * m}, {"w1", 31 * m}, {"w2", 31 * m}, {"w3", 38 * m}},
			total: 39 * m},
		{name: "a phase past its median has nothing left", in: TimeInput{Phases: []string{"Preload"}, History: past, Elapsed: 30 * m},
			want: []PhaseTime{{"Preload", 0, BasisHistory, 2}}},
		{name: "the rate wins over history while the phase runs", in: TimeInput{Phases: []string{"Preload", "Cleanup"}, History: past,
			Rated: map[string]Progress{"Preload": {DoneBytes: 50, TotalBytes: 100, Elapsed: 2 * m}}},
			want:  []PhaseTime{{"Preload", 2 * m, BasisRate, 0}, {"Cleanup", 1 * m, BasisHistory, 1}},
			total: 3 * m},
		{name: "node steps of this plan, running nodes' time taken off", in: TimeInput{Phases: []string{"Nodes", "Cleanup"}, NodePhase: "Nodes", History: past,
			NodeSteps: []time.Duration{2 * m, 4 * m, 3 * m}, OthersLeft: []string{"w1", "w2"}, Concurrency: 2,
			NodeElapsed: map[string]time.Duration{"w1": 1 * m}},
			want:  []PhaseTime{{"Nodes", 3 * m, BasisThisPlan, 3}, {"Cleanup", 1 * m, BasisHistory, 1}},
			nodes: []NodeTime{{"w1", 3 * m}, {"w2", 3 * m}},
			total: 4 * m},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Time(tt.in)
			require.Equal(t, tt.want, got.Phases)
			require.Equal(t, tt.nodes, got.Nodes)
			require.Equal(t, tt.total, got.Remaining)
			require.Equal(t, tt.first, got.First)
			require.Equal(t, tt.partly, got.Partial)
		})
	}
}
