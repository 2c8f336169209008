package sequencer_test

import (
	"slices"
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
	const mib = int64(1) << 20
	// forecastOf is a disk forecast of iso bytes to download and archive bytes to preload on
	// every node, the ISO held already on those in held.
	forecastOf := func(iso, archive int64, held ...string) func(*v1beta1.UpgradePlanStatus) {
		return func(st *v1beta1.UpgradePlanStatus) {
			for _, n := range []string{"cp-1", "w-1", "w-2"} {
				f := v1beta1.NodeDiskForecast{Node: n, ISOBytes: iso, ImagesStoredBytes: 2 * archive, ImagesArchiveBytes: archive}
				if slices.Contains(held, n) {
					f.ISOBytes = 0
				}
				st.DiskForecast = append(st.DiskForecast, f)
			}
		}
	}
	// preloading is a plan 1m into ImagePreloading: cp-1 read its 100 MiB, w-1 20 MiB of the
	// first archive it opened (30 MiB), w-2 nothing yet.
	preloading := func(mut ...func(*v1beta1.UpgradePlanStatus)) *v1beta1.UpgradePlan {
		return plan(v1beta1.PhaseImagePreloading, 1*m, func(st *v1beta1.UpgradePlanStatus) {
			st.NodeUpgradeStatuses["cp-1"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeImagePreloaded, BytesDone: 100 * mib, BytesTotal: 100 * mib}
			st.NodeUpgradeStatuses["w-1"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeImagePreloading, BytesDone: 20 * mib, BytesTotal: 30 * mib}
			st.NodeUpgradeStatuses["w-2"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeImagePreloadPending}
			for _, f := range mut {
				f(st)
			}
		})
	}
	downloading := map[string]*v1beta1.RepoNodeStatus{
		"cp-1": {ISO: v1beta1.RepoNodeISO{Checksum: testChecksum, BytesDone: 300, BytesTotal: 600}},
		"w-1":  {ISO: v1beta1.RepoNodeISO{Checksum: testChecksum, BytesDone: 100, BytesTotal: 600}},
		"w-2":  {ISO: v1beta1.RepoNodeISO{Checksum: testChecksum, BytesDone: 600, BytesTotal: 600}},
	}
	assumedStep := forecast.DefaultAssumptions.NodeStep
	now := t0.Add(100 * m)
	tests := []struct {
		name      string
		p         *v1beta1.UpgradePlan
		history   bool
		repoNodes map[string]*v1beta1.RepoNodeStatus
		remaining time.Duration
		first     bool
		partial   bool
		assumed   bool
		basis     map[string]forecast.Basis
		// phases are the phases' times expected, where the test names them.
		phases map[string]time.Duration
	}{
		{name: "first plan, downloading at a measured rate", p: plan(v1beta1.PhaseISODownloading, 2*m, nil),
			repoNodes: map[string]*v1beta1.RepoNodeStatus{
				"cp-1": {ISO: v1beta1.RepoNodeISO{Checksum: testChecksum, BytesDone: 300, BytesTotal: 600}},
				"w-1":  {ISO: v1beta1.RepoNodeISO{Checksum: testChecksum, BytesDone: 100, BytesTotal: 600}},
				"w-2":  {ISO: v1beta1.RepoNodeISO{Checksum: "sha512:other", BytesDone: 600, BytesTotal: 600}},
			},
			// 400 of 1200 bytes in 2m: 4m left; the preload's bytes unknown without a disk
			// forecast; the nodes one at a time at the step assumed.
			remaining: 4*m + 3*assumedStep, first: true, partial: true, assumed: true,
			basis: map[string]forecast.Basis{"ISODownloading": forecast.BasisRate, "ImagePreloading": forecast.BasisUnknown,
				"NodeUpgrading": forecast.BasisAssumed, "CleaningUp": forecast.BasisUnknown},
			phases: map[string]time.Duration{"ISODownloading": 4 * m, "NodeUpgrading": 3 * assumedStep}},
		{name: "first plan, downloading: a node that held the ISO when the plan began is not part of the rate",
			p: plan(v1beta1.PhaseISODownloading, 2*m, forecastOf(600, 0, "w-2")), repoNodes: downloading,
			// cp-1 and w-1: 400 of 1200 bytes in 2m; w-2's 600 held bytes came in no second of it.
			remaining: 4*m + 3*assumedStep, first: true, partial: true, assumed: true,
			basis:  map[string]forecast.Basis{"ISODownloading": forecast.BasisRate},
			phases: map[string]time.Duration{"ISODownloading": 4 * m}},
		{name: "first plan, initialized: the download and the preload from the disk forecast at the rates assumed",
			p: plan(v1beta1.PhaseInitialized, 0, forecastOf(600*mib, 100*mib, "w-2")),
			// 1200 MiB of ISO, two nodes at 20 MiB/s each: 30s; 300 MiB of archives, three nodes at
			// 50 MiB/s each: 2s; three nodes one at a time at the step assumed.
			remaining: 32*time.Second + 3*assumedStep, first: true, partial: true, assumed: true,
			basis: map[string]forecast.Basis{"ISODownloading": forecast.BasisAssumed, "RepoCreating": forecast.BasisUnknown,
				"ImagePreloading": forecast.BasisAssumed, "NodeUpgrading": forecast.BasisAssumed},
			phases: map[string]time.Duration{"ISODownloading": 30 * time.Second, "ImagePreloading": 2 * time.Second}},
		{name: "first plan, preloading: the totals of the disk forecast, not the archives the agents opened",
			p: preloading(forecastOf(600*mib, 100*mib)),
			// 120 MiB read in 1m: 2 MiB/s; 300 MiB to read (not the 130 the agents know of yet): 90s.
			remaining: 90*time.Second + 3*assumedStep, first: true, partial: true, assumed: true,
			basis:  map[string]forecast.Basis{"ImagePreloading": forecast.BasisRate, "ClusterUpgrading": forecast.BasisUnknown},
			phases: map[string]time.Duration{"ImagePreloading": 90 * time.Second}},
		{name: "first plan, preloading without a disk forecast: the nodes left read what a finished node read",
			p:         preloading(),
			remaining: 90*time.Second + 3*assumedStep, first: true, partial: true, assumed: true,
			basis:  map[string]forecast.Basis{"ImagePreloading": forecast.BasisRate},
			phases: map[string]time.Duration{"ImagePreloading": 90 * time.Second}},
		{name: "first plan, preloading before the first byte: the forecast's bytes at the rate assumed, nodes one at a time",
			p: plan(v1beta1.PhaseImagePreloading, 0, func(st *v1beta1.UpgradePlanStatus) {
				forecastOf(0, 150*mib)(st)
			}),
			// 450 MiB at 50 MiB/s × 3 nodes: 3s.
			remaining: 3*time.Second + 3*assumedStep, first: true, partial: true, assumed: true,
			basis:  map[string]forecast.Basis{"ImagePreloading": forecast.BasisAssumed},
			phases: map[string]time.Duration{"ImagePreloading": 3 * time.Second}},
		{name: "first plan, upgrading nodes: none finished, the step assumed less the running node's time",
			p: plan(v1beta1.PhaseNodeUpgrading, 4*m, func(st *v1beta1.UpgradePlanStatus) {
				st.NodeUpgradeStatuses["cp-1"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgrading, UpgradeStartTime: atp(96 * m)}
			}),
			remaining: 3*assumedStep - 4*m, first: true, partial: true, assumed: true,
			basis: map[string]forecast.Basis{"NodeUpgrading": forecast.BasisAssumed, "CleaningUp": forecast.BasisUnknown}},
		{name: "first plan, upgrading nodes: one finished, the others at its time",
			p: plan(v1beta1.PhaseNodeUpgrading, 10*m, func(st *v1beta1.UpgradePlanStatus) {
				st.NodeUpgradeStatuses["cp-1"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgraded, UpgradeStartTime: atp(90 * m), StateTime: atp(93 * m)}
				st.NodeUpgradeStatuses["w-1"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgrading, UpgradeStartTime: atp(98 * m)}
			}),
			// A node takes 3m: w-1 has 1m left, then w-2 3m.
			remaining: 4 * m, first: true, partial: true,
			basis: map[string]forecast.Basis{"NodeUpgrading": forecast.BasisThisPlan}},
		{name: "second plan, preloading: the rate, then history", history: true, p: preloading(forecastOf(600*mib, 100*mib)),
			// 90s, cluster 2m, nodes 3×4m, cleanup 1m.
			remaining: 90*time.Second + 15*m,
			basis:     map[string]forecast.Basis{"ImagePreloading": forecast.BasisRate, "ClusterUpgrading": forecast.BasisHistory, "NodeUpgrading": forecast.BasisHistory}},
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
			require.Equal(t, tt.assumed, est.Assumed)
			seen := map[string]bool{}
			for _, ph := range est.Phases {
				seen[ph.Phase] = true
				if want, ok := tt.basis[ph.Phase]; ok {
					require.Equal(t, want, ph.Basis, "phase %s", ph.Phase)
				}
				if want, ok := tt.phases[ph.Phase]; ok {
					require.Equal(t, want, ph.Remaining, "phase %s", ph.Phase)
				}
			}
			for ph := range tt.basis {
				require.True(t, seen[ph], "phase %s estimated", ph)
			}
		})
	}
	done := plan(v1beta1.PhaseSucceeded, 0, nil)
	require.Nil(t, sequencer.EstimateTime(done, nil, nodes, nil, now))
}
