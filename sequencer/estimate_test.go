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
	// assumedNodes are the node steps assumed for cp-1, w-1 and w-2 one after the other.
	a := forecast.DefaultAssumptions
	assumedNodes := a.ControlPlaneStep + 2*a.NodeStep
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
			remaining: 4*m + assumedNodes, first: true, partial: true, assumed: true,
			basis: map[string]forecast.Basis{"ISODownloading": forecast.BasisRate, "ImagePreloading": forecast.BasisUnknown,
				"NodeUpgrading": forecast.BasisAssumed, "CleaningUp": forecast.BasisUnknown},
			phases: map[string]time.Duration{"ISODownloading": 4 * m, "NodeUpgrading": assumedNodes}},
		{name: "first plan, downloading: a node that held the ISO when the plan began is not part of the rate",
			p: plan(v1beta1.PhaseISODownloading, 2*m, forecastOf(600, 0, "w-2")), repoNodes: downloading,
			// cp-1 and w-1: 400 of 1200 bytes in 2m; w-2's 600 held bytes came in no second of it.
			// The forecast has no image to preload: 10s assumed for a phase with nothing to do.
			remaining: 4*m + 10*time.Second + assumedNodes, first: true, partial: true, assumed: true,
			basis:  map[string]forecast.Basis{"ISODownloading": forecast.BasisRate, "ImagePreloading": forecast.BasisIdle},
			phases: map[string]time.Duration{"ISODownloading": 4 * m}},
		{name: "first plan, initialized: the download and the preload from the disk forecast at the rates assumed",
			p: plan(v1beta1.PhaseInitialized, 0, forecastOf(600*mib, 100*mib, "w-2")),
			// 1200 MiB of ISO, two nodes at 20 MiB/s each: 30s; 300 MiB of archives, three nodes at
			// 50 MiB/s each: 2s; three nodes one at a time at the step assumed.
			remaining: 32*time.Second + assumedNodes, first: true, partial: true, assumed: true,
			basis: map[string]forecast.Basis{"ISODownloading": forecast.BasisAssumed, "RepoCreating": forecast.BasisUnknown,
				"ImagePreloading": forecast.BasisAssumed, "NodeUpgrading": forecast.BasisAssumed},
			phases: map[string]time.Duration{"ISODownloading": 30 * time.Second, "ImagePreloading": 2 * time.Second}},
		{name: "first plan, preloading: the totals of the disk forecast, not the archives the agents opened",
			p: preloading(forecastOf(600*mib, 100*mib)),
			// 120 MiB read in 1m: 2 MiB/s; 300 MiB to read (not the 130 the agents know of yet): 90s.
			remaining: 90*time.Second + assumedNodes, first: true, partial: true, assumed: true,
			basis:  map[string]forecast.Basis{"ImagePreloading": forecast.BasisRate, "ClusterUpgrading": forecast.BasisUnknown},
			phases: map[string]time.Duration{"ImagePreloading": 90 * time.Second}},
		{name: "first plan, preloading without a disk forecast: the nodes left read what a finished node read",
			p:         preloading(),
			remaining: 90*time.Second + assumedNodes, first: true, partial: true, assumed: true,
			basis:  map[string]forecast.Basis{"ImagePreloading": forecast.BasisRate},
			phases: map[string]time.Duration{"ImagePreloading": 90 * time.Second}},
		{name: "first plan, preloading before the first byte: the forecast's bytes at the rate assumed, nodes one at a time",
			p: plan(v1beta1.PhaseImagePreloading, 0, func(st *v1beta1.UpgradePlanStatus) {
				forecastOf(0, 150*mib)(st)
			}),
			// 450 MiB at 50 MiB/s × 3 nodes: 3s.
			remaining: 3*time.Second + assumedNodes, first: true, partial: true, assumed: true,
			basis:  map[string]forecast.Basis{"ImagePreloading": forecast.BasisAssumed},
			phases: map[string]time.Duration{"ImagePreloading": 3 * time.Second}},
		{name: "first plan, upgrading nodes: none finished, the step assumed less the running node's time",
			p: plan(v1beta1.PhaseNodeUpgrading, 4*m, func(st *v1beta1.UpgradePlanStatus) {
				st.NodeUpgradeStatuses["cp-1"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgrading, UpgradeStartTime: atp(96 * m)}
			}),
			remaining: assumedNodes - 4*m, first: true, partial: true, assumed: true,
			basis: map[string]forecast.Basis{"NodeUpgrading": forecast.BasisAssumed, "CleaningUp": forecast.BasisUnknown}},
		{name: "first plan, upgrading nodes: one finished, the others at its time",
			p: plan(v1beta1.PhaseNodeUpgrading, 10*m, func(st *v1beta1.UpgradePlanStatus) {
				st.NodeUpgradeStatuses["cp-1"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgraded, UpgradeStartTime: atp(90 * m), StateTime: atp(93 * m)}
				st.NodeUpgradeStatuses["w-1"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgrading, UpgradeStartTime: atp(98 * m)}
			}),
			// The control plane took 3m, which says nothing of the others: w-1, 2m in, has none
			// of its assumed 1m left, then w-2 1m.
			remaining: a.NodeStep, first: true, partial: true, assumed: true,
			basis: map[string]forecast.Basis{"NodeUpgrading": forecast.BasisAssumed}},
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
			// This plan's control plane took 6m, which says nothing of the others: the history's
			// 4m a worker, w-1 4m in has none left, then w-2 4m; cleanup 1m.
			remaining: 5 * m,
			basis:     map[string]forecast.Basis{"NodeUpgrading": forecast.BasisHistory}},
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

// TestEstimateTimeKind replays two plans measured on kind: a second plan to the release the
// cluster runs already (it took 34 s from ImagePreloading on, estimated then at 11m55s), and a
// cluster's first kubeadm plan of three nodes (it took 4m55s, estimated at 20 minutes).
func TestEstimateTimeKind(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	atp := func(d time.Duration) *metav1.Time { m := at(d); return &m }
	const (
		s      = time.Second
		mib    = int64(1) << 20
		before = "v1.33.4"
		target = "v1.34.1"
	)
	cpAt := func(v string) *v1beta1.ControlPlaneVersions {
		return &v1beta1.ControlPlaneVersions{APIServer: v, ControllerManager: v, Scheduler: v, Etcd: "3.6.4-0"}
	}
	// transitions are phases entered one after the other, each lasting its duration.
	transitions := func(start time.Duration, phases ...any) []v1beta1.PhaseTransitionTimestamp {
		var out []v1beta1.PhaseTransitionTimestamp
		for i := 0; i < len(phases); i += 2 {
			out = append(out, v1beta1.PhaseTransitionTimestamp{Phase: phases[i].(v1beta1.Phase), PhaseTransitionTimestamp: at(start)})
			start += phases[i+1].(time.Duration)
		}
		return out
	}
	// The first plan of a cluster of three control planes and a worker, as measured: each
	// control plane 3-4.5 minutes from cordon to Upgraded, the worker 13 s.
	ha := []sequencer.NodeInfo{{Name: "cp-1", ControlPlane: true, Ready: true, KubeletVersion: target},
		{Name: "cp-2", ControlPlane: true, Ready: true, KubeletVersion: target},
		{Name: "cp-3", ControlPlane: true, Ready: true, KubeletVersion: target}, {Name: "w-1", Ready: true, KubeletVersion: target}}
	upgraded := func(from, took time.Duration, cp bool) v1beta1.NodeUpgradeStatus {
		ns := v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgraded, UpgradeStartTime: atp(from), StateTime: atp(from + took),
			KubeletVersionBefore: before, KubeletVersion: target, TargetKubeletVersion: target}
		if cp {
			ns.ControlPlane = cpAt(target)
		}
		return ns
	}
	first := v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "first"}, Status: v1beta1.UpgradePlanStatus{Phase: v1beta1.PhaseSucceeded,
		PhaseTransitionTimestamps: transitions(0, v1beta1.PhaseInitializing, 5*s, v1beta1.PhaseISODownloading, 20*s,
			v1beta1.PhaseRepoCreating, 5*s, v1beta1.PhaseMetadataPopulating, 5*s, v1beta1.PhaseImagePreloading, 40*s,
			v1beta1.PhaseClusterUpgrading, 15*s, v1beta1.PhaseNodeUpgrading, 732*s, v1beta1.PhaseCleaningUp, 5*s, v1beta1.PhaseSucceeded, 0*s),
		NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
			"cp-1": upgraded(90*s, 204*s, true), "cp-2": upgraded(294*s, 245*s, true),
			"cp-3": upgraded(539*s, 270*s, true), "w-1": upgraded(809*s, 13*s, false)}}}
	for _, n := range ha {
		first.Status.DiskForecast = append(first.Status.DiskForecast, v1beta1.NodeDiskForecast{Node: n.Name, ISOBytes: 65 * mib,
			ImagesStoredBytes: 120 * mib, ImagesArchiveBytes: 60 * mib, ImagesMissing: 9})
	}
	// The second plan to the same release, entering ImagePreloading: every node holds the ISO
	// and the images, runs the release's kubelet and control plane.
	second := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "second"}, Status: v1beta1.UpgradePlanStatus{Phase: v1beta1.PhaseImagePreloading,
		ReleaseMetadata:           &v1beta1.ReleaseMetadata{Kubernetes: target},
		PhaseTransitionTimestamps: transitions(time.Hour, v1beta1.PhaseImagePreloading, 0*s),
		NodeUpgradeStatuses:       map[string]v1beta1.NodeUpgradeStatus{}}}
	for _, n := range ha {
		ns := v1beta1.NodeUpgradeStatus{State: v1beta1.NodeImagePreloadPending, KubeletVersionBefore: target, KubeletVersion: target, TargetKubeletVersion: target}
		if n.ControlPlane {
			ns.ControlPlane = cpAt(target)
		}
		second.Status.NodeUpgradeStatuses[n.Name] = ns
		second.Status.DiskForecast = append(second.Status.DiskForecast, v1beta1.NodeDiskForecast{Node: n.Name})
	}
	// The same, as the rows are before NodeUpgrading: the control planes' components not read
	// yet, the kubelet alone tells.
	unread := second.DeepCopy()
	for n, ns := range unread.Status.NodeUpgradeStatuses {
		ns.ControlPlane = nil
		unread.Status.NodeUpgradeStatuses[n] = ns
	}
	// A cluster's first kubeadm plan of three nodes, one a control plane, as it is initialized:
	// the ISO (65 MiB) to download on each node, 60 MiB of archives to preload on each.
	three := []sequencer.NodeInfo{{Name: "cp-1", ControlPlane: true, Ready: true, KubeletVersion: before},
		{Name: "w-1", Ready: true, KubeletVersion: before}, {Name: "w-2", Ready: true, KubeletVersion: before}}
	fresh := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}, Status: v1beta1.UpgradePlanStatus{Phase: v1beta1.PhaseInitialized,
		PhaseTransitionTimestamps: transitions(time.Hour, v1beta1.PhaseInitialized, 0*s),
		NodeUpgradeStatuses:       map[string]v1beta1.NodeUpgradeStatus{"cp-1": {}, "w-1": {}, "w-2": {}}}}
	for _, n := range three {
		fresh.Status.DiskForecast = append(fresh.Status.DiskForecast, v1beta1.NodeDiskForecast{Node: n.Name, ISOBytes: 65 * mib,
			ImagesStoredBytes: 120 * mib, ImagesArchiveBytes: 60 * mib, ImagesMissing: 9})
	}
	tests := []struct {
		name      string
		p         *v1beta1.UpgradePlan
		plans     []v1beta1.UpgradePlan
		nodes     []sequencer.NodeInfo
		remaining time.Duration
		phases    map[string]time.Duration
		basis     map[string]forecast.Basis
	}{
		{name: "a second plan to the release the cluster runs, entering ImagePreloading", p: second,
			plans: []v1beta1.UpgradePlan{first, *second}, nodes: ha,
			// Nothing to preload, no cluster step to make: 10 s each, not the 40 s and 15 s of
			// the plan that did; four nodes at the target, 20 s each, not the 3-4.5 minutes of the
			// nodes that changed; the cleanup as the first plan's. It took 34 s.
			remaining: 10*s + 10*s + 80*s + 5*s,
			phases: map[string]time.Duration{"ImagePreloading": 10 * s, "ClusterUpgrading": 10 * s,
				"NodeUpgrading": 80 * s, "CleaningUp": 5 * s},
			basis: map[string]forecast.Basis{"ImagePreloading": forecast.BasisIdle, "ClusterUpgrading": forecast.BasisIdle,
				"NodeUpgrading": forecast.BasisAssumed, "CleaningUp": forecast.BasisHistory}},
		{name: "a second plan, its control planes' components not read yet", p: unread,
			plans: []v1beta1.UpgradePlan{first, *unread}, nodes: ha,
			remaining: 10*s + 10*s + 80*s + 5*s,
			phases:    map[string]time.Duration{"NodeUpgrading": 80 * s},
			basis:     map[string]forecast.Basis{"NodeUpgrading": forecast.BasisAssumed}},
		{name: "a cluster's first kubeadm plan of three nodes, initialized", p: fresh, nodes: three,
			// 195 MiB of ISO at 3 × 20 MiB/s: 3 s; 180 MiB of archives at 3 × 50 MiB/s: 1 s; the
			// control plane 4m, the workers 1m each. It took 4m55s.
			remaining: 3*s + 1*s + 4*time.Minute + 2*time.Minute,
			phases:    map[string]time.Duration{"ISODownloading": 3 * s, "ImagePreloading": 1 * s, "NodeUpgrading": 6 * time.Minute},
			basis: map[string]forecast.Basis{"ISODownloading": forecast.BasisAssumed, "ImagePreloading": forecast.BasisAssumed,
				"ClusterUpgrading": forecast.BasisUnknown, "NodeUpgrading": forecast.BasisAssumed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			est := sequencer.EstimateTime(tt.p, tt.plans, tt.nodes, nil, t0.Add(time.Hour))
			require.NotNil(t, est)
			for _, ph := range est.Phases {
				if want, ok := tt.phases[ph.Phase]; ok {
					require.Equal(t, want, ph.Remaining, "phase %s", ph.Phase)
				}
				if want, ok := tt.basis[ph.Phase]; ok {
					require.Equal(t, want, ph.Basis, "phase %s", ph.Phase)
				}
			}
			require.Equal(t, tt.remaining, est.Remaining)
		})
	}
}
