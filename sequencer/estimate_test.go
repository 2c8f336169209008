package sequencer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/forecast"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

func TestEstimateTime(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	atp := func(d time.Duration) *metav1.Time { m := at(d); return &m }
	const m = time.Minute
	// An earlier plan: download 10m, repo 1m, metadata 1m, preload 5m, cluster 2m, nodes 12m (4m a node), cleanup 1m.
	past := v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "past"}, Status: v1beta1.UpgradePlanStatus{Phase: v1beta1.PhaseSucceeded,
		PhaseTransitionTimestamps: []v1beta1.PhaseTransitionTimestamp{
			{Phase: v1beta1.PhaseInitializing, PhaseTransitionTimestamp: at(0)},
			{Phase: v1beta1.PhaseISODownloading, PhaseTransitionTimestamp: at(1 * m)},
			{Phase: v1beta1.PhaseRepoCreating, PhaseTransitionTimestamp: at(11 * m)},
			{Phase: v1beta1.PhaseMetadataPopulating, PhaseTransitionTimestamp: at(12 * m)},
			{Phase: v1beta1.PhaseImagePreloading, PhaseTransitionTimestamp: at(13 * m)},
			{Phase: v1beta1.PhaseClusterUpgrading, PhaseTransitionTimestamp: at(18 * m)},
			{Phase: v1beta1.PhaseNodeUpgrading, PhaseTransitionTimestamp: at(20 * m)},
			{Phase: v1beta1.PhaseCleaningUp, PhaseTransitionTimestamp: at(32 * m)},
			{Phase: v1beta1.PhaseSucceeded, PhaseTransitionTimestamp: at(33 * m)},
		},
		NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
			"cp-1": {State: v1beta1.NodeUpgraded, UpgradeStartTime: atp(20 * m), StateTime: atp(24 * m)},
			"w-1":  {State: v1beta1.NodeUpgraded, UpgradeStartTime: atp(24 * m), StateTime: atp(28 * m)},
			"w-2":  {State: v1beta1.NodeUpgraded, UpgradeStartTime: atp(28 * m), StateTime: atp(32 * m)},
		}}}
	nodes := []sequencer.NodeInfo{{Name: "cp-1", ControlPlane: true, Ready: true}, {Name: "w-1", Ready: true}, {Name: "w-2", Ready: true}}
	plan := func(phase v1beta1.Phase, since time.Duration, mut func(*v1beta1.UpgradePlanStatus)) *v1beta1.UpgradePlan {
		p := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "now"}}
		p.Status.Phase = phase
		p.Status.Agents = &v1beta1.AgentInstructions{ISOChecksum: testChecksum}
		p.Status.PhaseTransitionTimestamps = []v1beta1.PhaseTransitionTimestamp{{Phase: phase, PhaseTransitionTimestamp: at(100*m - since)}}
		p.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{"cp-1": {}, "w-1": {}, "w-2": {}}
		if mut != nil {
			mut(&p.Status)
		}
		return p
	}
	now := t0.Add(100 * m)
	tests := []struct {
		name      string
		p         *v1beta1.UpgradePlan
		history   bool
		repoNodes map[string]*v1beta1.RepoNodeStatus
		remaining time.Duration
		first     bool
		partial   bool
		basis     map[string]forecast.Basis
	}{
		{name: "first plan, downloading at a measured rate", p: plan(v1beta1.PhaseISODownloading, 2*m, nil),
			repoNodes: map[string]*v1beta1.RepoNodeStatus{
				"cp-1": {ISO: v1beta1.RepoNodeISO{Checksum: testChecksum, BytesDone: 300, BytesTotal: 600}},
				"w-1":  {ISO: v1beta1.RepoNodeISO{Checksum: testChecksum, BytesDone: 100, BytesTotal: 600}},
				"w-2":  {ISO: v1beta1.RepoNodeISO{Checksum: "sha512:other", BytesDone: 600, BytesTotal: 600}},
			},
			// 400 of 1200 bytes in 2m: 4m left; nothing else known.
			remaining: 4 * m, first: true, partial: true,
			basis: map[string]forecast.Basis{"ISODownloading": forecast.BasisRate, "NodeUpgrading": forecast.BasisUnknown}},
		{name: "from history, in ImagePreloading with no bytes yet", p: plan(v1beta1.PhaseImagePreloading, 1*m, nil), history: true,
			// preload 5m-1m, cluster 2m, nodes 3×4m, cleanup 1m.
			remaining: 19 * m,
			basis:     map[string]forecast.Basis{"ImagePreloading": forecast.BasisHistory, "NodeUpgrading": forecast.BasisHistory}},
		{name: "after a phase is done, the next counts whole", p: plan(v1beta1.PhaseClusterUpgraded, 0, nil), history: true,
			remaining: 13 * m},
		{name: "node upgrades of this plan, one upgraded, one running", history: true,
			p: plan(v1beta1.PhaseNodeUpgrading, 10*m, func(st *v1beta1.UpgradePlanStatus) {
				st.NodeUpgradeStatuses["cp-1"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgraded, UpgradeStartTime: atp(90 * m), StateTime: atp(96 * m)}
				st.NodeUpgradeStatuses["w-1"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgrading, UpgradeStartTime: atp(96 * m)}
			}),
			// This plan's step is 6m: w-1 has 2m left, then w-2 6m; cleanup 1m.
			remaining: 9 * m,
			basis:     map[string]forecast.Basis{"NodeUpgrading": forecast.BasisThisPlan}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var plans []v1beta1.UpgradePlan
			if tt.history {
				plans = append(plans, past)
			}
			plans = append(plans, *tt.p)
			est := sequencer.EstimateTime(tt.p, plans, nodes, tt.repoNodes, now)
			require.NotNil(t, est)
			require.Equal(t, tt.remaining, est.Remaining)
			require.Equal(t, tt.first, est.First)
			require.Equal(t, tt.partial, est.Partial)
			for _, ph := range est.Phases {
				if want, ok := tt.basis[ph.Phase]; ok {
					require.Equal(t, want, ph.Basis, "phase %s", ph.Phase)
				}
			}
		})
	}
	done := plan(v1beta1.PhaseSucceeded, 0, nil)
	require.Nil(t, sequencer.EstimateTime(done, nil, nodes, nil, now))
}
