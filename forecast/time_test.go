package forecast

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTime(t *testing.T) {
	t.Parallel()
	const (
		m   = time.Minute
		mib = int64(1) << 20
	)
	// steps are node steps of class c.
	steps := func(c NodeClass, ds ...time.Duration) []NodeStep {
		var out []NodeStep
		for _, d := range ds {
			out = append(out, NodeStep{Class: c, Took: d})
		}
		return out
	}
	worker, cp := NodeClass{}, NodeClass{ControlPlane: true}
	past := []PastPlan{
		{Phases: map[string]time.Duration{"Download": 10 * m, "Preload": 6 * m, "Cleanup": 1 * m}, NodeSteps: steps(worker, 5*m, 7*m)},
		{Phases: map[string]time.Duration{"Download": 20 * m, "Preload": 4 * m}, NodeSteps: append(steps(worker, 9*m), steps(cp, 8*m)...)},
	}
	assumed := DefaultAssumptions.Steps()
	all := []string{"Download", "Preload", "Nodes", "Cleanup"}
	unknown := func(ph string) PhaseTime { return PhaseTime{Phase: ph, Basis: BasisUnknown} }
	history := func(ph string, d time.Duration, n int) PhaseTime {
		return PhaseTime{Phase: ph, Remaining: d, Basis: BasisHistory, Samples: n}
	}
	// Before anything moved on a first plan: 600 MiB of ISO for 3 nodes at 20 MiB/s a node, 100 MiB
	// of archives one node at a time at 50 MiB/s.
	sized := map[string]Progress{
		"Download": {TotalBytes: 600 * mib, AssumedBytesPerSecond: 20 * float64(mib), Parallel: 3},
		"Preload":  {TotalBytes: 100 * mib, AssumedBytesPerSecond: 50 * float64(mib), Parallel: 1},
	}
	tests := []struct {
		name    string
		in      TimeInput
		want    []PhaseTime
		nodes   []NodeTime
		total   time.Duration
		first   bool
		partly  bool
		assumed bool
	}{
		{name: "first plan, nothing measured, nothing assumed", in: TimeInput{Phases: all, NodePhase: "Nodes", ControlPlaneLeft: []string{"cp"}},
			want: []PhaseTime{unknown("Download"), unknown("Preload"),
				{Phase: "Nodes", Basis: BasisUnknown, Classes: []ClassTime{{NodeClass: cp, Nodes: 1, Basis: BasisUnknown}}}, unknown("Cleanup")},
			first: true, partly: true},
		{name: "first plan, download rate measured", in: TimeInput{Phases: all, NodePhase: "Nodes",
			Rated: map[string]Progress{"Download": {DoneBytes: 100, TotalBytes: 400, Elapsed: 1 * m}}},
			want: []PhaseTime{{Phase: "Download", Remaining: 3 * m, Basis: BasisRate, BytesLeft: 300, BytesPerSecond: 100.0 / 60},
				unknown("Preload"), unknown("Nodes"), unknown("Cleanup")},
			total: 3 * m, first: true, partly: true},
		{name: "first plan before the first byte: the bytes and the nodes at the rates and step assumed", in: TimeInput{Phases: all, NodePhase: "Nodes",
			Rated: sized, Elapsed: 1 * m, ControlPlaneLeft: []string{"cp"}, OthersLeft: []string{"w1", "w2", "w3"}, Concurrency: 2, AssumedNodeSteps: assumed},
			// Download 600 MiB at 3 × 20 MiB/s: 10s, the minute without a byte not taken off; preload 100 MiB at 50 MiB/s: 2s;
			// nodes: the control plane 4m, then two rounds of workers, 1m each.
			want: []PhaseTime{
				{Phase: "Download", Remaining: 10 * time.Second, Basis: BasisAssumed, BytesLeft: 600 * mib, BytesPerSecond: 60 * float64(mib),
					Assumption: "20.0 MiB/s a node, 3 at a time, for 600.0 MiB"},
				{Phase: "Preload", Remaining: 2 * time.Second, Basis: BasisAssumed, BytesLeft: 100 * mib, BytesPerSecond: 50 * float64(mib),
					Assumption: "50.0 MiB/s a node, 1 at a time, for 100.0 MiB"},
				{Phase: "Nodes", Remaining: 6 * m, Basis: BasisAssumed, NodeStep: 4 * m,
					Classes:    []ClassTime{{NodeClass: cp, Nodes: 1, Step: 4 * m, Basis: BasisAssumed}, {NodeClass: worker, Nodes: 3, Step: 1 * m, Basis: BasisAssumed}},
					Assumption: "4m0s for each control plane, 1m0s for each other node; control planes one at a time, the others 2 at a time"},
				unknown("Cleanup")},
			nodes: []NodeTime{{"cp", 4*m + 12*time.Second}, {"w1", 5*m + 12*time.Second}, {"w2", 5*m + 12*time.Second}, {"w3", 6*m + 12*time.Second}},
			total: 6*m + 12*time.Second, first: true, partly: true, assumed: true},
		{name: "a measured rate wins over the rate assumed", in: TimeInput{Phases: []string{"Preload"},
			Rated: map[string]Progress{"Preload": {DoneBytes: 50 * mib, TotalBytes: 100 * mib, Elapsed: 10 * time.Second, AssumedBytesPerSecond: 50 * float64(mib)}}},
			want:  []PhaseTime{{Phase: "Preload", Remaining: 10 * time.Second, Basis: BasisRate, BytesLeft: 50 * mib, BytesPerSecond: 5 * float64(mib)}},
			total: 10 * time.Second, first: true},
		{name: "history wins over the rates and step assumed", in: TimeInput{Phases: all, NodePhase: "Nodes", History: past,
			Rated: sized, OthersLeft: []string{"w1"}, AssumedNodeSteps: assumed},
			want: []PhaseTime{history("Download", 10*m, 2), history("Preload", 4*m, 2), {Phase: "Nodes", Remaining: 7 * m, Basis: BasisHistory, Samples: 3, NodeStep: 7 * m,
				Classes: []ClassTime{{NodeClass: worker, Nodes: 1, Step: 7 * m, Basis: BasisHistory, Samples: 3}}}, history("Cleanup", 1*m, 1)},
			nodes: []NodeTime{{"w1", 21 * m}},
			total: 22 * m},
		{name: "history: medians by class, elapsed taken off the current phase", in: TimeInput{Phases: all, NodePhase: "Nodes", History: past,
			Elapsed: 4 * m, ControlPlaneLeft: []string{"cp1", "cp2"}, OthersLeft: []string{"w1", "w2", "w3"}, Concurrency: 2},
			// Download: median(10, 20) = 10 less 4; control planes 8m (one sample), the others median(5, 7, 9) = 7:
			// 2 control planes then 2 rounds.
			want: []PhaseTime{history("Download", 6*m, 2), history("Preload", 4*m, 2),
				{Phase: "Nodes", Remaining: 30 * m, Basis: BasisHistory, Samples: 4, NodeStep: 8 * m,
					Classes: []ClassTime{{NodeClass: cp, Nodes: 2, Step: 8 * m, Basis: BasisHistory, Samples: 1}, {NodeClass: worker, Nodes: 3, Step: 7 * m, Basis: BasisHistory, Samples: 3}}},
				history("Cleanup", 1*m, 1)},
			nodes: []NodeTime{{"cp1", 18 * m}, {"cp2", 26 * m}, {"w1", 33 * m}, {"w2", 33 * m}, {"w3", 40 * m}},
			total: 41 * m},
		{name: "a class without a step of its own is not estimated from another class's", in: TimeInput{Phases: []string{"Nodes"}, NodePhase: "Nodes",
			NodeSteps: steps(worker, 1*m), ControlPlaneLeft: []string{"cp1"}, OthersLeft: []string{"w1"}},
			want: []PhaseTime{{Phase: "Nodes", Basis: BasisUnknown,
				Classes: []ClassTime{{NodeClass: cp, Nodes: 1, Basis: BasisUnknown}, {NodeClass: worker, Nodes: 1, Step: 1 * m, Basis: BasisThisPlan, Samples: 1}}}},
			first: true, partly: true},
		{name: "nodes at the target: not from the steps of nodes that changed", in: TimeInput{Phases: []string{"Nodes"}, NodePhase: "Nodes", History: past,
			NodeSteps: steps(NodeClass{ControlPlane: true, Unchanged: true}, 15*time.Second), ControlPlaneLeft: []string{"cp2"},
			OthersLeft: []string{"w1", "w2"}, Unchanged: map[string]bool{"cp2": true, "w1": true, "w2": true}, AssumedNodeSteps: assumed},
			// The control plane as the one this plan did, 15s; the others, never upgraded at the
			// target before, at the 20s assumed, not the history's 7m of nodes that changed.
			want: []PhaseTime{{Phase: "Nodes", Remaining: 55 * time.Second, Basis: BasisAssumed, Samples: 1, NodeStep: 15 * time.Second,
				Classes: []ClassTime{{NodeClass: NodeClass{ControlPlane: true, Unchanged: true}, Nodes: 1, Step: 15 * time.Second, Basis: BasisThisPlan, Samples: 1},
					{NodeClass: NodeClass{Unchanged: true}, Nodes: 2, Step: 20 * time.Second, Basis: BasisAssumed}},
				Assumption: "20s for each other node at the target (control planes at the target: 15s from this plan); control planes one at a time, the others 1 at a time"}},
			nodes: []NodeTime{{"cp2", 15 * time.Second}, {"w1", 35 * time.Second}, {"w2", 55 * time.Second}},
			total: 55 * time.Second, assumed: true},
		{name: "a phase with nothing to do: not from the history of phases that moved bytes", in: TimeInput{Phases: []string{"Preload", "Cleanup"}, History: past,
			Rated: map[string]Progress{"Preload": {AssumedBytesPerSecond: 50 * float64(mib)}}, Idle: map[string]string{"Preload": "every image present"},
			AssumedIdle: 10 * time.Second, Elapsed: 4 * time.Second},
			want:  []PhaseTime{{Phase: "Preload", Remaining: 6 * time.Second, Basis: BasisIdle, Assumption: "nothing to do (every image present): 10s"}, history("Cleanup", 1*m, 1)},
			total: 66 * time.Second},
		{name: "a phase with nothing to do, from the history of phases that had nothing to do", in: TimeInput{Phases: []string{"Preload", "Download"},
			History: append([]PastPlan{{Phases: map[string]time.Duration{"Preload": 20 * time.Second, "Download": 3 * time.Second},
				Idle: map[string]bool{"Preload": true, "Download": true}}}, past...),
			Idle: map[string]string{"Preload": "every image present"}, AssumedIdle: 10 * time.Second},
			// The download has bytes to move: the history of downloads that moved some, not the 3s of the idle one.
			want:  []PhaseTime{history("Preload", 20*time.Second, 1), history("Download", 10*m, 2)},
			total: 10*m + 20*time.Second},
		{name: "a phase past its median has nothing left", in: TimeInput{Phases: []string{"Preload"}, History: past, Elapsed: 30 * m},
			want: []PhaseTime{history("Preload", 0, 2)}},
		{name: "the rate wins over history while the phase runs", in: TimeInput{Phases: []string{"Preload", "Cleanup"}, History: past,
			Rated: map[string]Progress{"Preload": {DoneBytes: 50, TotalBytes: 100, Elapsed: 2 * m}}},
			want:  []PhaseTime{{Phase: "Preload", Remaining: 2 * m, Basis: BasisRate, BytesLeft: 50, BytesPerSecond: 50.0 / 120}, history("Cleanup", 1*m, 1)},
			total: 3 * m},
		{name: "node steps of this plan, running nodes' time taken off", in: TimeInput{Phases: []string{"Nodes", "Cleanup"}, NodePhase: "Nodes", History: past,
			NodeSteps: steps(worker, 2*m, 4*m, 3*m), OthersLeft: []string{"w1", "w2"}, Concurrency: 2,
			NodeElapsed: map[string]time.Duration{"w1": 1 * m}},
			want: []PhaseTime{{Phase: "Nodes", Remaining: 3 * m, Basis: BasisThisPlan, Samples: 3, NodeStep: 3 * m,
				Classes: []ClassTime{{NodeClass: worker, Nodes: 2, Step: 3 * m, Basis: BasisThisPlan, Samples: 3}}}, history("Cleanup", 1*m, 1)},
			nodes: []NodeTime{{"w1", 3 * m}, {"w2", 3 * m}},
			total: 4 * m},
		{name: "node steps of this plan win over the step assumed, on a first plan", in: TimeInput{Phases: []string{"Nodes"}, NodePhase: "Nodes",
			NodeSteps: steps(worker, 2*m), OthersLeft: []string{"w1", "w2", "w3"}, Concurrency: 2, AssumedNodeSteps: assumed},
			// One node finished in 2m: three left, two at a time, is two rounds of 2m.
			want: []PhaseTime{{Phase: "Nodes", Remaining: 4 * m, Basis: BasisThisPlan, Samples: 1, NodeStep: 2 * m,
				Classes: []ClassTime{{NodeClass: worker, Nodes: 3, Step: 2 * m, Basis: BasisThisPlan, Samples: 1}}}},
			nodes: []NodeTime{{"w1", 2 * m}, {"w2", 2 * m}, {"w3", 4 * m}},
			total: 4 * m, first: true},
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
			require.Equal(t, tt.assumed, got.Assumed)
		})
	}
}
