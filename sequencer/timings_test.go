package sequencer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

func TestNodeTimings(t *testing.T) {
	t.Parallel()
	t0 := decideNow
	at := func(ms int) *metav1.MicroTime {
		m := metav1.NewMicroTime(t0.Add(time.Duration(ms) * time.Millisecond))
		return &m
	}
	// times stamps a node cordoned at c, drained from d (-1: nothing to evict) to j, its step
	// from s to e, seen at e+100ms and upgraded at u, in milliseconds.
	times := func(c, d, j, s, e, u int) v1beta1.NodeUpgradeStatus {
		nt := &v1beta1.NodeTimes{Cordoned: at(c), JobCreated: at(j), StepStarted: at(s), StepCompleted: at(e), StepSeen: at(e + 100), Upgraded: at(u)}
		if d >= 0 {
			nt.DrainStarted = at(d)
		}
		return v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgraded, Times: nt}
	}
	st := &v1beta1.UpgradePlanStatus{
		PhaseTransitionTimestamps: []v1beta1.PhaseTransitionTimestamp{{Phase: v1beta1.PhaseNodeUpgrading, PhaseTransitionTimestamp: metav1.NewTime(t0)}},
		NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
			// First: 200ms after the phase began; a 3s drain; a 2s step; 1.4s of its own.
			"w-1": times(200, 300, 3300, 4000, 6000, 6600),
			// Next, 400ms after w-1's Upgraded; nothing to evict.
			"w-2": times(7000, -1, 7100, 8000, 10000, 10500),
			// Never finished: left out.
			"w-3": {State: v1beta1.NodeUpgrading, Times: &v1beta1.NodeTimes{Cordoned: at(11000)}},
		},
	}
	got := sequencer.NodeTimings(st)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	require.Equal(t, []sequencer.NodeTiming{
		{Node: "w-1", Wait: ms(200), Drain: ms(3000), Step: ms(2000), Total: ms(6400), Sequencer: ms(1600)},
		{Node: "w-2", Wait: ms(400), Step: ms(2000), Total: ms(3500), Sequencer: ms(1900)},
	}, got)
	d := sequencer.Distribute([]time.Duration{got[0].Sequencer, got[1].Sequencer})
	require.Equal(t, sequencer.Distribution{N: 2, Min: ms(1600), P50: ms(1900), P90: ms(1900), Max: ms(1900), Mean: ms(1750)}, d)
	require.Equal(t, "n=2 min=1.60s p50=1.90s p90=1.90s max=1.90s mean=1.75s", d.String())
}
