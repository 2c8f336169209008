package sequencer_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/forecast"
	"github.com/upgrade-repo/upgrade-repo/isorelease"
	"github.com/upgrade-repo/upgrade-repo/release"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

var decideNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// decideNowMeta is decideNow as the status records it.
var decideNowMeta = metav1.NewTime(decideNow)

var decideCfg = sequencer.Config{StallAfter: 10 * time.Minute, HeartbeatTimeout: 2 * time.Minute, Poll: 5 * time.Second, StepStallAfter: 20 * time.Minute}

// since returns decideNow minus d as the status records times.
func since(d time.Duration) *metav1.Time {
	t := metav1.NewTime(decideNow.Add(-d))
	return &t
}

// initializing is a plan in Initializing whose agents report a cache with free bytes each, for
// an ISO of isoSize bytes.
func initializing(free, isoSize int64, mut ...func(*sequencer.Observation)) sequencer.Observation {
	return obs(v1beta1.PhaseInitializing, append([]func(*sequencer.Observation){func(o *sequencer.Observation) {
		o.Plan.Status.Agents, o.Plan.Status.PreviousVersion = nil, ""
		o.ISOSize = isoSize
		for _, rn := range o.RepoNodes {
			rn.ISO = v1beta1.RepoNodeISO{}
			rn.Cache = v1beta1.RepoNodeCache{Path: "/var/lib/upgrade-repo", FreeBytes: free, TotalBytes: 100 << 30}
		}
	}}, mut...)...)
}

// obs builds an observation of a 2+2 node cluster with plan in phase, entered a minute ago.
func obs(phase v1beta1.Phase, mut ...func(*sequencer.Observation)) sequencer.Observation {
	p := newPlan("up", nil)
	p.Status.Phase = phase
	if phase != "" {
		p.Status.PhaseTransitionTimestamps = []v1beta1.PhaseTransitionTimestamp{{Phase: phase, PhaseTransitionTimestamp: metav1.NewTime(decideNow.Add(-time.Minute))}}
		p.Status.Agents = &v1beta1.AgentInstructions{ISOURL: "http://o/iso", ISOChecksum: testChecksum, Hold: true}
		p.Status.PreviousVersion = "v1.5.2"
	}
	o := sequencer.Observation{
		Now:       decideNow,
		Plan:      p,
		Version:   &v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: "v1.6.0"}, Spec: v1beta1.VersionSpec{ISOURL: "http://o/iso", ISOChecksum: testChecksum}},
		Installed: sequencer.Installed{Version: "v1.5.2"},
		Nodes: []sequencer.NodeInfo{
			{Name: "cp-1", ControlPlane: true, Ready: true}, {Name: "cp-2", ControlPlane: true, Ready: true},
			{Name: "w-1", Ready: true}, {Name: "w-2", Ready: true},
		},
		RepoNodes:    map[string]*v1beta1.RepoNodeStatus{},
		NodeJobs:     map[string]sequencer.JobState{},
		UpgradeImage: "upgrade:v1.6.0",
	}
	for _, n := range o.Nodes {
		o.RepoNodes[n.Name] = &v1beta1.RepoNodeStatus{
			ISO:           v1beta1.RepoNodeISO{Checksum: testChecksum, State: v1beta1.ISOReady},
			Repo:          v1beta1.RepoNodeRepo{Ready: true},
			HeartbeatTime: metav1.NewTime(decideNow.Add(-10 * time.Second)),
		}
	}
	for _, m := range mut {
		m(&o)
	}
	return o
}

func nodeStates(o *sequencer.Observation, states map[string]v1beta1.NodeState) {
	o.Plan.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
	for n, s := range states {
		o.Plan.Status.NodeUpgradeStatuses[n] = v1beta1.NodeUpgradeStatus{State: s}
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	type want struct {
		phase       v1beta1.Phase
		failedPhase v1beta1.Phase
		degraded    string // reason of a True Degraded condition; "" means not degraded
		progressing string // reason of the Progressing condition, when checked
		actions     []sequencer.Action
		check       func(*testing.T, sequencer.Decision)
	}
	tests := []struct {
		name string
		o    sequencer.Observation
		want want
	}{
		{name: "new plan starts", o: obs(""), want: want{phase: v1beta1.PhaseInitializing}},
		{
			name: "initializing snapshots the version", o: obs(v1beta1.PhaseInitializing, func(o *sequencer.Observation) { o.Plan.Status.Agents = nil; o.Plan.Status.PreviousVersion = "" }),
			want: want{phase: v1beta1.PhaseInitialized, check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, "v1.5.2", d.Status.PreviousVersion)
				require.Equal(t, testChecksum, d.Status.ISOImageID)
				require.Equal(t, &v1beta1.AgentInstructions{ISOURL: "http://o/iso", ISOChecksum: testChecksum, Hold: true}, d.Status.Agents)
				require.Len(t, d.Status.NodeUpgradeStatuses, 4)
			}},
		},
		{
			name: "the ISO read from its URL holds another release: failed before any download", o: initializing(100<<30, 6<<30, func(o *sequencer.Observation) {
				o.EarlyRelease = &release.Release{Harvester: "v1.5.9", MinUpgradableVersion: "v1.5.0"}
			}),
			want: want{phase: v1beta1.PhaseFailed, failedPhase: v1beta1.PhaseInitializing, degraded: "ReleaseMismatch", check: func(t *testing.T, d sequencer.Decision) {
				require.Contains(t, meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionDegraded).Message, "the ISO holds release v1.5.9, the plan wants v1.6.0 (read from the ISO's URL, before any download)")
				require.True(t, d.Status.Agents == nil || !d.Status.Agents.Hold, "no agent is told to hold the ISO")
			}},
		},
		{
			name: "the ISO read from its URL refuses the installed version: failed before any download", o: initializing(100<<30, 6<<30, func(o *sequencer.Observation) {
				o.EarlyRelease = &release.Release{Harvester: "v1.6.0", MinUpgradableVersion: "v1.5.3"}
			}),
			want: want{phase: v1beta1.PhaseFailed, failedPhase: v1beta1.PhaseInitializing, degraded: "PolicyCheckFailed", check: func(t *testing.T, d sequencer.Decision) {
				require.Contains(t, meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionDegraded).Message, "v1.5.3")
				require.True(t, d.Status.Agents == nil || !d.Status.Agents.Hold, "no agent is told to hold the ISO")
			}},
		},
		{
			name: "a plan its policies refuse for good fails at once: the agents are never asked to measure", o: initializing(100<<30, 6<<30, func(o *sequencer.Observation) {
				o.EarlyRelease = &release.Release{Harvester: "v1.6.0", MinUpgradableVersion: "v1.5.3"}
				o.EarlyArchives = layeredArchives()
				o.Plan.Status.PhaseTransitionTimestamps[0].PhaseTransitionTimestamp = metav1.NewTime(decideNow.Add(-time.Second))
			}),
			want: want{phase: v1beta1.PhaseFailed, failedPhase: v1beta1.PhaseInitializing, degraded: "PolicyCheckFailed", check: func(t *testing.T, d sequencer.Decision) {
				require.Contains(t, meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionDegraded).Message, "v1.5.3")
				require.NotEqual(t, v1beta1.ReasonAwaitingNodeMeasures, meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionProgressing).Reason)
			}},
		},
		{
			name: "the ISO read from its URL is accepted: judged again after the download", o: initializing(100<<30, 6<<30, func(o *sequencer.Observation) {
				o.EarlyRelease = &release.Release{Harvester: "v1.6.0", MinUpgradableVersion: "v1.5.0"}
			}),
			want: want{phase: v1beta1.PhaseInitialized, check: func(t *testing.T, d sequencer.Decision) {
				c := meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionReleaseJudged)
				require.Equal(t, metav1.ConditionTrue, c.Status)
				require.Equal(t, "BeforeDownload", c.Reason)
			}},
		},
		{
			name: "an origin without ranges: judged after the download", o: initializing(100<<30, 6<<30, func(o *sequencer.Observation) {
				o.EarlyReleaseErr = errors.New("ISO http://o/iso: the origin does not serve ranges")
			}),
			want: want{phase: v1beta1.PhaseInitialized, check: func(t *testing.T, d sequencer.Decision) {
				c := meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionReleaseJudged)
				require.Equal(t, metav1.ConditionFalse, c.Status)
				require.Equal(t, "the release is judged after the download: ISO http://o/iso: the origin does not serve ranges", c.Message)
			}},
		},
		{
			name: "missing version waits", o: obs(v1beta1.PhaseInitializing, func(o *sequencer.Observation) { o.Version = nil }),
			want: want{phase: v1beta1.PhaseInitializing, degraded: "PolicyCheckPending"},
		},
		{
			name: "unknown installed version waits", o: obs(v1beta1.PhaseInitializing, func(o *sequencer.Observation) {
				o.Installed = sequencer.Installed{}
				o.Plan.Status.PreviousVersion = ""
			}),
			want: want{phase: v1beta1.PhaseInitializing, degraded: "PolicyCheckPending"},
		},
		{
			name: "downgrade fails", o: obs(v1beta1.PhaseInitializing, func(o *sequencer.Observation) { o.Installed.Version = "v1.6.1"; o.Plan.Status.PreviousVersion = "" }),
			want: want{phase: v1beta1.PhaseFailed, failedPhase: v1beta1.PhaseInitializing, degraded: "PolicyCheckFailed", check: func(t *testing.T, d sequencer.Decision) {
				require.False(t, d.Status.Agents.Hold)
			}},
		},
		{
			name: "forced downgrade goes on with a warning", o: obs(v1beta1.PhaseInitializing, func(o *sequencer.Observation) {
				o.Installed.Version = "v1.6.1"
				o.Plan.Status.PreviousVersion = ""
				o.Plan.Spec.Force = true
			}),
			want: want{phase: v1beta1.PhaseInitialized, check: func(t *testing.T, d sequencer.Decision) {
				require.Contains(t, d.Events, sequencer.Event{Warning: true, Reason: "PolicyForced", Message: "NoDowngrade: v1.6.0 is older than the installed v1.6.1 (forced)"})
			}},
		},
		{name: "done phase moves on", o: obs(v1beta1.PhaseInitialized), want: want{phase: v1beta1.PhaseISODownloading}},
		{name: "all ISOs ready", o: obs(v1beta1.PhaseISODownloading), want: want{phase: v1beta1.PhaseISODownloaded, actions: []sequencer.Action{{Kind: sequencer.ActionRecordDownloaded}}}},
		{
			name: "an ISO downloading waits", o: obs(v1beta1.PhaseISODownloading, func(o *sequencer.Observation) {
				o.RepoNodes["w-1"].ISO = v1beta1.RepoNodeISO{Checksum: testChecksum, State: v1beta1.ISODownloading, BytesDone: 25, BytesTotal: 100}
			}),
			want: want{phase: v1beta1.PhaseISODownloading, progressing: "ISODownloading", check: func(t *testing.T, d sequencer.Decision) {
				require.Contains(t, meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionProgressing).Message, "w-1: Downloading 25%")
				require.Equal(t, decideCfg.Poll, d.RequeueAfter)
			}},
		},
		{
			name: "a long download with a live agent is not a stall", o: obs(v1beta1.PhaseISODownloading, func(o *sequencer.Observation) {
				o.RepoNodes["w-1"].ISO.State = v1beta1.ISODownloading
				o.Now = o.Now.Add(time.Hour)
				for _, r := range o.RepoNodes {
					r.HeartbeatTime = metav1.NewTime(o.Now)
				}
			}),
			want: want{phase: v1beta1.PhaseISODownloading, progressing: "ISODownloading"},
		},
		{
			name: "an agent that never picks the ISO up becomes degraded", o: obs(v1beta1.PhaseISODownloading, func(o *sequencer.Observation) {
				delete(o.RepoNodes, "w-1")
				o.Now = o.Now.Add(time.Hour)
				for _, r := range o.RepoNodes {
					r.HeartbeatTime = metav1.NewTime(o.Now)
				}
			}),
			want: want{phase: v1beta1.PhaseISODownloading, degraded: "ISODownloading"},
		},
		{
			name: "a failed download is degraded", o: obs(v1beta1.PhaseISODownloading, func(o *sequencer.Observation) {
				o.RepoNodes["w-2"].ISO = v1beta1.RepoNodeISO{Checksum: testChecksum, State: v1beta1.ISOFailed, Message: "sha512 mismatch"}
			}),
			want: want{phase: v1beta1.PhaseISODownloading, degraded: "ISODownloadStalled"},
		},
		{
			name: "a silent agent is degraded", o: obs(v1beta1.PhaseISODownloading, func(o *sequencer.Observation) {
				o.RepoNodes["cp-2"].HeartbeatTime = metav1.NewTime(decideNow.Add(-time.Hour))
			}),
			want: want{phase: v1beta1.PhaseISODownloading, degraded: "ISODownloadStalled"},
		},
		{
			name: "an agent on another ISO is waited for", o: obs(v1beta1.PhaseISODownloading, func(o *sequencer.Observation) {
				o.RepoNodes["cp-2"].ISO.Checksum = "old"
			}),
			want: want{phase: v1beta1.PhaseISODownloading, progressing: "ISODownloading"},
		},
		{
			// The agents may write the plan's checksum as its bare hex, in either case: it is the
			// same ISO, compared as a checksum and not as text.
			name: "an agent that spells the ISO's checksum otherwise is on the same ISO", o: obs(v1beta1.PhaseISODownloading, func(o *sequencer.Observation) {
				o.RepoNodes["cp-2"].ISO.Checksum = strings.TrimPrefix(testChecksum, "sha512:")
				o.RepoNodes["w-1"].ISO.Checksum = strings.ToUpper(strings.TrimPrefix(testChecksum, "sha512:"))
				o.RepoNodes["w-2"].ISO.Checksum = "SHA512:" + strings.ToUpper(strings.TrimPrefix(testChecksum, "sha512:"))
			}),
			want: want{phase: v1beta1.PhaseISODownloaded, actions: []sequencer.Action{{Kind: sequencer.ActionRecordDownloaded}}},
		},
		{name: "repo without endpoints waits", o: obs(v1beta1.PhaseRepoCreating), want: want{phase: v1beta1.PhaseRepoCreating, progressing: "RepoNotReady"}},
		{name: "repo ready", o: obs(v1beta1.PhaseRepoCreating, func(o *sequencer.Observation) { o.ReadyEndpoints = 2 }), want: want{phase: v1beta1.PhaseRepoCreated}},
		{
			name: "metadata unreadable waits", o: obs(v1beta1.PhaseMetadataPopulating, func(o *sequencer.Observation) { o.ReleaseErr = errors.New("connection refused") }),
			want: want{phase: v1beta1.PhaseMetadataPopulating, progressing: "MetadataUnavailable"},
		},
		{
			name: "metadata of another release fails", o: obs(v1beta1.PhaseMetadataPopulating, func(o *sequencer.Observation) { o.Release = &release.Release{Harvester: "v1.5.3"} }),
			want: want{phase: v1beta1.PhaseFailed, failedPhase: v1beta1.PhaseMetadataPopulating, degraded: "ReleaseMismatch"},
		},
		{
			name: "installed below the release's minimum fails", o: obs(v1beta1.PhaseMetadataPopulating, func(o *sequencer.Observation) {
				o.Release = &release.Release{Harvester: "v1.6.0", MinUpgradableVersion: "v1.5.3"}
			}),
			want: want{phase: v1beta1.PhaseFailed, failedPhase: v1beta1.PhaseMetadataPopulating, degraded: "PolicyCheckFailed"},
		},
		{
			name: "metadata populated", o: obs(v1beta1.PhaseMetadataPopulating, func(o *sequencer.Observation) {
				o.Release = &release.Release{Harvester: "v1.6.0", Kubernetes: "v1.33.3+rke2r1", MinUpgradableVersion: "v1.5.0"}
			}),
			want: want{phase: v1beta1.PhaseMetadataPopulated, actions: []sequencer.Action{{Kind: sequencer.ActionRecordImages}}, check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, "v1.33.3+rke2r1", d.Status.ReleaseMetadata.Kubernetes)
			}},
		},
		{
			name: "preload starts as many nodes as the concurrency", o: obs(v1beta1.PhaseImagePreloading),
			want: want{phase: v1beta1.PhaseImagePreloading, check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, []string{"cp-1", "cp-2"}, d.Status.Agents.PreloadNodes)
				require.Equal(t, v1beta1.NodeImagePreloadPending, d.Status.NodeUpgradeStatuses["w-1"].State)
			}},
		},
		{
			name: "a finished preload frees a slot", o: obs(v1beta1.PhaseImagePreloading, func(o *sequencer.Observation) {
				o.Plan.Status.Agents.PreloadNodes = []string{"cp-1", "cp-2"}
				o.RepoNodes["cp-1"].Preload = v1beta1.RepoNodePreload{State: v1beta1.PreloadDone, ImagesDone: 3, ImagesTotal: 3}
				o.RepoNodes["cp-2"].Preload = v1beta1.RepoNodePreload{State: v1beta1.PreloadRunning, ImagesDone: 1, ImagesTotal: 3, BytesDone: 5, BytesTotal: 9}
			}),
			want: want{phase: v1beta1.PhaseImagePreloading, check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, []string{"cp-1", "cp-2", "w-1"}, d.Status.Agents.PreloadNodes)
				require.Equal(t, v1beta1.NodeUpgradeStatus{State: v1beta1.NodeImagePreloading, ImagesDone: 1, ImagesTotal: 3, BytesDone: 5, BytesTotal: 9, StateTime: &decideNowMeta, LastProgressTime: &decideNowMeta}, d.Status.NodeUpgradeStatuses["cp-2"])
				require.Equal(t, v1beta1.NodeImagePreloaded, d.Status.NodeUpgradeStatuses["cp-1"].State)
			}},
		},
		{
			name: "concurrency 0 preloads everywhere", o: obs(v1beta1.PhaseImagePreloading, func(o *sequencer.Observation) { o.Plan.Spec.ImagePreloadOption = nil }),
			want: want{phase: v1beta1.PhaseImagePreloading, check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, []string{"cp-1", "cp-2", "w-1", "w-2"}, d.Status.Agents.PreloadNodes)
			}},
		},
		{
			name: "a failed preload fails the plan", o: obs(v1beta1.PhaseImagePreloading, func(o *sequencer.Observation) {
				o.RepoNodes["w-2"].Preload = v1beta1.RepoNodePreload{State: v1beta1.PreloadFailed, Reason: "ImportFailed", Message: "disk full"}
			}),
			want: want{phase: v1beta1.PhaseFailed, failedPhase: v1beta1.PhaseImagePreloading, degraded: "ImagePreloadFailed"},
		},
		{
			name: "all preloaded", o: obs(v1beta1.PhaseImagePreloading, func(o *sequencer.Observation) {
				for _, r := range o.RepoNodes {
					r.Preload.State = v1beta1.PreloadDone
				}
			}),
			want: want{phase: v1beta1.PhaseImagePreloaded},
		},
		{
			name: "interactive waits before the cluster upgrade", o: obs(v1beta1.PhaseImagePreloaded, func(o *sequencer.Observation) { o.Plan.Spec.Mode = v1beta1.ModeInteractive }),
			want: want{phase: v1beta1.PhaseImagePreloaded, progressing: "AwaitingApproval"},
		},
		{
			name: "interactive approved", o: obs(v1beta1.PhaseImagePreloaded, func(o *sequencer.Observation) {
				o.Plan.Spec.Mode = v1beta1.ModeInteractive
				o.Plan.Annotations = map[string]string{v1beta1.ApproveAnnotation: "w-1, cluster"}
			}),
			want: want{phase: v1beta1.PhaseClusterUpgrading},
		},
		{
			name: "cluster job created", o: obs(v1beta1.PhaseClusterUpgrading),
			want: want{phase: v1beta1.PhaseClusterUpgrading, actions: []sequencer.Action{{Kind: sequencer.ActionCreateClusterJob}}},
		},
		{
			name: "cluster job running", o: obs(v1beta1.PhaseClusterUpgrading, func(o *sequencer.Observation) { o.ClusterJob = sequencer.JobState{Exists: true} }),
			want: want{phase: v1beta1.PhaseClusterUpgrading, progressing: "ClusterJobRunning"},
		},
		{
			name: "cluster job stuck", o: obs(v1beta1.PhaseClusterUpgrading, func(o *sequencer.Observation) {
				o.ClusterJob = sequencer.JobState{Exists: true, Stuck: "pod x: ImagePullBackOff"}
			}),
			want: want{phase: v1beta1.PhaseClusterUpgrading, degraded: "ClusterJobStuck"},
		},
		{
			name: "node job stuck", o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				nodeStates(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgrading})
				o.NodeJobs["cp-1"] = sequencer.JobState{Exists: true, Stuck: "pod y: CrashLoopBackOff"}
			}),
			want: want{phase: v1beta1.PhaseNodeUpgrading, degraded: "NodeJobStuck"},
		},
		{
			name: "a preloading node whose agent never reports becomes degraded", o: obs(v1beta1.PhaseImagePreloading, func(o *sequencer.Observation) {
				o.Plan.Status.Agents.PreloadNodes = []string{"cp-1", "cp-2"}
				delete(o.RepoNodes, "cp-1")
				o.Now = o.Now.Add(time.Hour)
				for _, r := range o.RepoNodes {
					r.HeartbeatTime = metav1.NewTime(o.Now)
				}
			}),
			want: want{phase: v1beta1.PhaseImagePreloading, degraded: "AgentNotReporting"},
		},
		{
			name: "cluster job done", o: obs(v1beta1.PhaseClusterUpgrading, func(o *sequencer.Observation) { o.ClusterJob = sequencer.JobState{Exists: true, Succeeded: true} }),
			want: want{phase: v1beta1.PhaseClusterUpgraded},
		},
		{
			name: "cluster job failed", o: obs(v1beta1.PhaseClusterUpgrading, func(o *sequencer.Observation) {
				o.ClusterJob = sequencer.JobState{Exists: true, Failed: true, Message: "BackoffLimitExceeded"}
			}),
			want: want{phase: v1beta1.PhaseFailed, failedPhase: v1beta1.PhaseClusterUpgrading, degraded: "ClusterJobFailed"},
		},
		{
			name: "first control-plane node cordoned alone", o: obs(v1beta1.PhaseNodeUpgrading),
			want: want{phase: v1beta1.PhaseNodeUpgrading, actions: []sequencer.Action{{Kind: sequencer.ActionCordon, Node: "cp-1"}}, check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, "WaitingForControlPlane", d.Status.NodeUpgradeStatuses["w-1"].Reason)
				require.Equal(t, v1beta1.NodeUpgradePending, d.Status.NodeUpgradeStatuses["cp-2"].State)
			}},
		},
		{
			name: "cordoned node is drained", o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				nodeStates(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeCordoned})
				o.Nodes[0].Unschedulable = true
				o.PodsToEvict = map[string]int{"cp-1": 3}
			}),
			want: want{phase: v1beta1.PhaseNodeUpgrading, actions: []sequencer.Action{{Kind: sequencer.ActionDrain, Node: "cp-1"}}},
		},
		{
			name: "drained node gets its job", o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				nodeStates(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeCordoned})
				o.Nodes[0].Unschedulable = true
			}),
			want: want{phase: v1beta1.PhaseNodeUpgrading, actions: []sequencer.Action{{Kind: sequencer.ActionCreateNodeJob, Node: "cp-1"}}, check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, v1beta1.NodeUpgrading, d.Status.NodeUpgradeStatuses["cp-1"].State)
			}},
		},
		{
			name: "node job done: uncordon, and the next node waits for it to rejoin", o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				nodeStates(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgrading})
				o.Nodes[0].Unschedulable = true
				o.NodeJobs["cp-1"] = sequencer.JobState{Exists: true, Succeeded: true}
			}),
			want: want{phase: v1beta1.PhaseNodeUpgrading, actions: []sequencer.Action{{Kind: sequencer.ActionUncordon, Node: "cp-1"}}, check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, v1beta1.NodeRejoining, d.Status.NodeUpgradeStatuses["cp-1"].State)
			}},
		},
		{
			name: "a rejoined node lets the next control-plane node start", o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				nodeStates(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeRejoining})
				o.NodeJobs["cp-1"] = sequencer.JobState{Exists: true, Succeeded: true, Completed: decideNow.Add(-time.Minute)}
			}),
			want: want{phase: v1beta1.PhaseNodeUpgrading, actions: []sequencer.Action{{Kind: sequencer.ActionCordon, Node: "cp-2"}}, check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, v1beta1.NodeUpgraded, d.Status.NodeUpgradeStatuses["cp-1"].State)
			}},
		},
		{
			name: "workers go with the concurrency once the control plane is done", o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				nodeStates(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgraded, "cp-2": v1beta1.NodeUpgraded})
				o.Nodes = append(o.Nodes, sequencer.NodeInfo{Name: "w-3", Ready: true})
			}),
			want: want{phase: v1beta1.PhaseNodeUpgrading, actions: []sequencer.Action{{Kind: sequencer.ActionCordon, Node: "w-1"}, {Kind: sequencer.ActionCordon, Node: "w-2"}}},
		},
		{
			name: "a paused node is held", o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				nodeStates(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgraded, "cp-2": v1beta1.NodeUpgraded, "w-1": v1beta1.NodeUpgraded})
				o.Plan.Spec.NodeUpgradeOption.PauseNodes = []string{"w-2"}
			}),
			want: want{phase: v1beta1.PhaseNodeUpgrading, progressing: "NodesHeld", check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgradePaused, Reason: "NodePaused", Message: "listed in nodeUpgradeOption.pauseNodes", StateTime: &decideNowMeta, LastProgressTime: &decideNowMeta}, d.Status.NodeUpgradeStatuses["w-2"])
			}},
		},
		{
			name: "a node job failed", o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				nodeStates(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgrading})
				o.NodeJobs["cp-1"] = sequencer.JobState{Exists: true, Failed: true, Message: "exit 1"}
			}),
			want: want{phase: v1beta1.PhaseFailed, failedPhase: v1beta1.PhaseNodeUpgrading, degraded: "NodeUpgradeFailed"},
		},
		{
			name: "all nodes upgraded", o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				nodeStates(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgraded, "cp-2": v1beta1.NodeUpgraded, "w-1": v1beta1.NodeUpgraded, "w-2": v1beta1.NodeUpgraded})
			}),
			want: want{phase: v1beta1.PhaseNodeUpgraded},
		},
		{
			name: "system-upgrade-controller plans applied", o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				o.Plan.Spec.NodeUpgradeOption.Executor = v1beta1.ExecutorSystemUpgradeController
				o.SUC = sequencer.SUCProgress{Exists: true, Upgraded: []string{"cp-1"}}
			}),
			want: want{phase: v1beta1.PhaseNodeUpgrading, actions: []sequencer.Action{{Kind: sequencer.ActionApplySUCPlans}}, check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, v1beta1.NodeUpgraded, d.Status.NodeUpgradeStatuses["cp-1"].State)
				require.Equal(t, v1beta1.NodeUpgrading, d.Status.NodeUpgradeStatuses["w-1"].State)
			}},
		},
		{
			name: "system-upgrade-controller done", o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				o.Plan.Spec.NodeUpgradeOption.Executor = v1beta1.ExecutorSystemUpgradeController
				o.SUC = sequencer.SUCProgress{Exists: true, Upgraded: []string{"cp-1", "cp-2", "w-1", "w-2"}}
			}),
			want: want{phase: v1beta1.PhaseNodeUpgraded, actions: []sequencer.Action{{Kind: sequencer.ActionApplySUCPlans}}},
		},
		{
			name: "cleaning up", o: obs(v1beta1.PhaseCleaningUp),
			want: want{phase: v1beta1.PhaseCleanedUp, actions: []sequencer.Action{{Kind: sequencer.ActionCleanUp}, {Kind: sequencer.ActionRecordInstalled}}, check: func(t *testing.T, d sequencer.Decision) {
				require.False(t, d.Status.Agents.Hold)
			}},
		},
		{
			name: "succeeded", o: obs(v1beta1.PhaseCleanedUp),
			want: want{phase: v1beta1.PhaseSucceeded, check: func(t *testing.T, d sequencer.Decision) {
				require.True(t, meta.IsStatusConditionTrue(d.Status.Conditions, v1beta1.ConditionAvailable))
				require.True(t, meta.IsStatusConditionFalse(d.Status.Conditions, v1beta1.ConditionProgressing))
			}},
		},
		{name: "finished plans stay", o: obs(v1beta1.PhaseSucceeded), want: want{phase: v1beta1.PhaseSucceeded}},
		{
			name: "pre-flight: room for the ISO and the images", o: initializing(20<<30, 6<<30),
			want: want{phase: v1beta1.PhaseInitialized, check: func(t *testing.T, d sequencer.Decision) { require.Empty(t, d.Status.Warnings) }},
		},
		{
			name: "pre-flight: no room for the ISO waits, naming the node and its figures", o: initializing(20<<30, 6<<30, func(o *sequencer.Observation) {
				o.RepoNodes["w-2"].Cache.FreeBytes = 1 << 30
			}),
			want: want{phase: v1beta1.PhaseInitializing, degraded: "PolicyCheckPending", check: func(t *testing.T, d sequencer.Decision) {
				msg := meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionDegraded).Message
				require.Contains(t, msg, "NodeDiskSpace: node w-2: ISO needs 6.0 GiB in /var/lib/upgrade-repo, 1.0 GiB free")
				require.NotContains(t, msg, "w-1")
				require.Nil(t, d.Status.Agents, "nothing is downloaded")
			}},
		},
		{
			name: "pre-flight: force turns no room into a warning", o: initializing(20<<30, 6<<30, func(o *sequencer.Observation) {
				o.RepoNodes["w-2"].Cache.FreeBytes = 1 << 30
				o.Plan.Spec.Force = true
			}),
			want: want{phase: v1beta1.PhaseInitialized, check: func(t *testing.T, d sequencer.Decision) {
				var forced []string
				for _, e := range d.Events {
					if e.Reason == "PolicyForced" {
						forced = append(forced, e.Message)
					}
				}
				require.Equal(t, []string{"NodeDiskSpace: node w-2: ISO needs 6.0 GiB in /var/lib/upgrade-repo, 1.0 GiB free (forced)"}, forced)
			}},
		},
		{
			name: "pre-flight: images that would cross a kubelet's GC threshold wait, with the figures", o: initializing(20<<30, 6<<30, func(o *sequencer.Observation) {
				o.EarlyArchives = []isorelease.Archive{{Images: []string{"docker.io/library/a:1", "docker.io/library/b:1"}, Size: 2 << 30, TarBytes: 4 << 30}}
				for _, rn := range o.RepoNodes {
					rn.Containerd = &v1beta1.RepoNodeCache{Path: "/var/lib/containerd", FreeBytes: 50 << 30, TotalBytes: 100 << 30, FilesystemID: "2049"}
				}
				o.RepoNodes["w-1"].ImageGC = &v1beta1.RepoNodeImageGC{HighThresholdPercent: 55, LowThresholdPercent: 50, Source: "/var/lib/kubelet/config.yaml"}
			}),
			want: want{phase: v1beta1.PhaseInitializing, degraded: "PolicyCheckPending", check: func(t *testing.T, d sequencer.Decision) {
				msg := meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionDegraded).Message
				require.Contains(t, msg, "NodeDiskSpace: node w-1: images (8.0 GiB) would fill /var/lib/containerd to 58.0%, past the kubelet's image GC threshold of 55% (50.0 GiB free of 100.0 GiB)")
				require.NotContains(t, msg, "cp-1")
			}},
		},
		{
			name: "pre-flight: the disk forecast is recorded per node; a node holding the ISO and its images needs no room", o: initializing(20<<30, 6<<30, func(o *sequencer.Observation) {
				o.EarlyArchives = []isorelease.Archive{{Images: []string{"docker.io/library/a:1"}, Size: 1 << 30, TarBytes: 3 << 30}}
				o.RepoNodes["cp-1"].ISO = v1beta1.RepoNodeISO{Checksum: strings.ToUpper(strings.TrimPrefix(testChecksum, "sha512:")), State: v1beta1.ISOReady}
				o.RepoNodes["cp-1"].Preload.State = v1beta1.PreloadDone
				o.RepoNodes["cp-2"].Containerd = &v1beta1.RepoNodeCache{Path: "/var/lib/containerd", FreeBytes: 40 << 30, TotalBytes: 100 << 30, FilesystemID: "7"}
			}),
			want: want{phase: v1beta1.PhaseInitialized, check: func(t *testing.T, d sequencer.Decision) {
				require.Len(t, d.Status.DiskForecast, 4)
				cp1, cp2 := d.Status.DiskForecast[0], d.Status.DiskForecast[1]
				require.Equal(t, v1beta1.NodeDiskForecast{Node: "cp-1", ImagesBasis: "Images", Filesystems: []v1beta1.FilesystemForecast{
					{Path: "/var/lib/upgrade-repo", What: "ISO", FreeBytes: 20 << 30, TotalBytes: 100 << 30, UsedPercentAfter: 80}}}, cp1)
				require.Equal(t, v1beta1.NodeDiskForecast{Node: "cp-2", ISOBytes: 6 << 30, ImagesStoredBytes: 3 << 30, ImagesUnpackedBytes: 3 << 30, ImagesArchiveBytes: 1 << 30, ImagesMissing: 1, Estimated: true, // the ISO records no blobs
					ImagesBasis: "Images", Filesystems: []v1beta1.FilesystemForecast{
						{Path: "/var/lib/upgrade-repo", What: "ISO", FreeBytes: 20 << 30, TotalBytes: 100 << 30, AddedBytes: 6 << 30, UsedPercentAfter: 86},
						{Path: "/var/lib/containerd", What: "images", FreeBytes: 40 << 30, TotalBytes: 100 << 30, AddedBytes: 6 << 30, UsedPercentAfter: 66, ImageGCHighPercent: 85},
					}}, cp2)
			}},
		},
		{
			name: "pre-flight: a node's measure of the release stands for its blobs, with the cleanup it forecasts", o: initializing(20<<30, 6<<30, func(o *sequencer.Observation) {
				o.EarlyArchives = layeredArchives()
				o.RepoNodes["cp-1"].Forecast = &v1beta1.RepoNodeForecast{ISOChecksum: strings.TrimPrefix(testChecksum, "sha512:"), Blobs: 4, MissingBlobs: 1,
					MissingStoredBytes: 1 << 20, MissingLayers: 1, MissingUnpackedBytes: 2 << 20, CleanupMeasured: true, CleanupImages: 2, CleanupBytes: 7 << 20}
				o.RepoNodes["cp-2"].Forecast = &v1beta1.RepoNodeForecast{ISOChecksum: "sha512:" + strings.Repeat("0", 128), Blobs: 4, MissingStoredBytes: 1}
				o.RepoNodes["w-1"].Forecast = &v1beta1.RepoNodeForecast{ISOChecksum: testChecksum, Message: "the ISO records no image blobs"}
			}),
			want: want{phase: v1beta1.PhaseInitialized, check: func(t *testing.T, d sequencer.Decision) {
				require.Len(t, d.Status.DiskForecast, 4)
				byNode := map[string]v1beta1.NodeDiskForecast{}
				for _, f := range d.Status.DiskForecast {
					byNode[f.Node] = f
				}
				cp1 := byNode["cp-1"]
				require.Equal(t, "Measured", cp1.ImagesBasis)
				require.Equal(t, int64(1<<20), cp1.ImagesStoredBytes)
				require.Equal(t, int64(2<<20+forecast.SnapshotOverheadBytes), cp1.ImagesUnpackedBytes)
				require.Equal(t, int64(7<<20), cp1.CleanupBytes)
				require.Equal(t, forecast.CleanupAfterSoak, cp1.CleanupAfter)
				// Another ISO's measure, or none, leaves the blob index to count.
				for _, n := range []string{"cp-2", "w-1", "w-2"} {
					require.Equal(t, "Blobs", byNode[n].ImagesBasis, n)
					require.Equal(t, int64(3*(1<<20)+2*800), byNode[n].ImagesStoredBytes, n)
					require.Zero(t, byNode[n].CleanupBytes, n)
				}
			}},
		},
		{
			name: "pre-flight: a plan without a soak cleans up after the plan", o: initializing(20<<30, 6<<30, func(o *sequencer.Observation) {
				o.EarlyArchives = layeredArchives()
				o.Plan.Spec.Soak = &metav1.Duration{}
				o.RepoNodes["cp-1"].Forecast = &v1beta1.RepoNodeForecast{ISOChecksum: testChecksum, CleanupMeasured: true, CleanupBytes: 5}
			}),
			want: want{phase: v1beta1.PhaseInitialized, check: func(t *testing.T, d sequencer.Decision) {
				cp1 := d.Status.DiskForecast[0]
				require.Equal(t, "Blobs", cp1.ImagesBasis, "no blob was measured")
				require.Equal(t, int64(5), cp1.CleanupBytes)
				require.Equal(t, forecast.CleanupAfterPlan, cp1.CleanupAfter)
			}},
		},
		{
			name: "pre-flight: the agents of Ready nodes are given a while to measure the release", o: initializing(20<<30, 6<<30, func(o *sequencer.Observation) {
				o.EarlyArchives = layeredArchives()
				o.Plan.Status.PhaseTransitionTimestamps[0].PhaseTransitionTimestamp = metav1.NewTime(decideNow.Add(-10 * time.Second))
				for _, n := range []string{"cp-1", "cp-2", "w-1"} {
					o.RepoNodes[n].Forecast = &v1beta1.RepoNodeForecast{ISOChecksum: testChecksum, Blobs: 4}
				}
				o.Nodes[3].Ready = true
			}),
			want: want{phase: v1beta1.PhaseInitializing, progressing: "AwaitingNodeMeasures", check: func(t *testing.T, d sequencer.Decision) {
				require.Empty(t, d.Status.DiskForecast)
				require.Contains(t, meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionProgressing).Message, "w-2")
				require.Positive(t, d.RequeueAfter)
				require.LessOrEqual(t, d.RequeueAfter, 5*time.Second)
			}},
		},
		{
			name: "pre-flight: a node not Ready is not waited for", o: initializing(20<<30, 6<<30, func(o *sequencer.Observation) {
				o.EarlyArchives = layeredArchives()
				o.Plan.Status.PhaseTransitionTimestamps[0].PhaseTransitionTimestamp = metav1.NewTime(decideNow.Add(-10 * time.Second))
				for _, n := range []string{"cp-1", "cp-2", "w-1"} {
					o.RepoNodes[n].Forecast = &v1beta1.RepoNodeForecast{ISOChecksum: testChecksum, Blobs: 4}
				}
				o.Plan.Spec.Force = true // w-2 not Ready fails a policy otherwise
				o.Nodes[3].Ready = false
			}),
			want: want{phase: v1beta1.PhaseInitialized},
		},
		{
			name: "pre-flight: past the wait, the plan is judged with what the agents reported", o: initializing(20<<30, 6<<30, func(o *sequencer.Observation) {
				o.EarlyArchives = layeredArchives()
				o.Plan.Status.PhaseTransitionTimestamps[0].PhaseTransitionTimestamp = metav1.NewTime(decideNow.Add(-sequencer.MeasureWait))
			}),
			want: want{phase: v1beta1.PhaseInitialized, check: func(t *testing.T, d sequencer.Decision) {
				require.Len(t, d.Status.DiskForecast, 4)
				require.Equal(t, "Blobs", d.Status.DiskForecast[0].ImagesBasis)
			}},
		},
		{
			name: "pre-flight: drain warnings and silent agents are named up front", o: initializing(20<<30, 0, func(o *sequencer.Observation) {
				delete(o.RepoNodes, "w-1")
				o.DrainWarnings = []string{"PodDisruptionBudget apps/db allows no disruption: the drain of node cp-2 will wait until it does"}
			}),
			want: want{phase: v1beta1.PhaseInitialized, check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, []string{
					"the ISO's size is unknown (its origin did not announce it): free space was not checked",
					"node w-1: no report from its agent yet, its free space was not checked",
					"PodDisruptionBudget apps/db allows no disruption: the drain of node cp-2 will wait until it does",
				}, d.Status.Warnings)
				require.Len(t, d.Events, 4, "one warning event each, and the phase's")
			}},
		},
		{
			name: "a plan without an upgrade image fails at once", o: initializing(20<<30, 6<<30, func(o *sequencer.Observation) { o.UpgradeImage = "" }),
			want: want{phase: v1beta1.PhaseFailed, failedPhase: v1beta1.PhaseInitializing, degraded: "InvalidPlan"},
		},
		{
			name: "a Version without a checksum fails at once", o: initializing(20<<30, 6<<30, func(o *sequencer.Observation) { o.Version.Spec.ISOChecksum = "" }),
			want: want{phase: v1beta1.PhaseFailed, failedPhase: v1beta1.PhaseInitializing, degraded: "InvalidVersion"},
		},
		{
			name: "a Version with a password in a ftp URL fails without printing it", o: initializing(20<<30, 6<<30, func(o *sequencer.Observation) {
				o.Version.Spec.ISOURL = "ftp://user:secret@host/x.iso?sig=abc"
			}),
			want: want{phase: v1beta1.PhaseFailed, failedPhase: v1beta1.PhaseInitializing, degraded: "InvalidVersion", check: func(t *testing.T, d sequencer.Decision) {
				msg := meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionDegraded).Message
				require.Contains(t, msg, "ftp://host/x.iso")
				require.NotContains(t, msg, "secret")
				require.NotContains(t, msg, "sig=")
			}},
		},
		{
			name: "a node step without progress for too long is named", o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				o.Plan.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{
					"cp-1": {State: v1beta1.NodeUpgrading, Message: "the node Job runs", LastProgressTime: since(25 * time.Minute)},
				}
				o.Nodes[0].Unschedulable = true
				o.NodeJobs["cp-1"] = sequencer.JobState{Exists: true}
			}),
			want: want{phase: v1beta1.PhaseNodeUpgrading, degraded: "NodeStalled", check: func(t *testing.T, d sequencer.Decision) {
				require.Contains(t, meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionDegraded).Message,
					"node cp-1: Upgrading: the node Job runs, no progress since 2026-03-01T11:35:00Z (more than 20m0s)")
			}},
		},
		{
			name: "a drain that makes no progress is named", o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				o.Plan.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{
					"cp-1": {State: v1beta1.NodeCordoned, Reason: "Draining", Message: "2 pods to evict", LastProgressTime: since(21 * time.Minute)},
				}
				o.Nodes[0].Unschedulable = true
				o.PodsToEvict = map[string]int{"cp-1": 2}
			}),
			want: want{phase: v1beta1.PhaseNodeUpgrading, degraded: "NodeStalled", actions: []sequencer.Action{{Kind: sequencer.ActionDrain, Node: "cp-1"}}, check: func(t *testing.T, d sequencer.Decision) {
				require.Contains(t, meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionDegraded).Message, "node cp-1: Cordoned (Draining): 2 pods to evict")
			}},
		},
		{
			name: "a drain that moves is not a stall", o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				o.Plan.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{
					"cp-1": {State: v1beta1.NodeCordoned, Reason: "Draining", Message: "2 pods to evict", LastProgressTime: since(21 * time.Minute)},
				}
				o.Nodes[0].Unschedulable = true
				o.PodsToEvict = map[string]int{"cp-1": 1}
			}),
			want: want{phase: v1beta1.PhaseNodeUpgrading, actions: []sequencer.Action{{Kind: sequencer.ActionDrain, Node: "cp-1"}}, check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, &decideNowMeta, d.Status.NodeUpgradeStatuses["cp-1"].LastProgressTime)
			}},
		},
		{
			name: "a rejoining node waits for Ready, its agent and its control-plane pods", o: obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
				nodeStates(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeRejoining})
				o.Nodes[0].Ready = false
				o.NodeJobs["cp-1"] = sequencer.JobState{Exists: true, Succeeded: true, Completed: decideNow.Add(-5 * time.Second)}
				o.ControlPlaneNotReady = map[string][]string{"cp-1": {"kube-system/kube-apiserver-cp-1"}}
			}),
			want: want{phase: v1beta1.PhaseNodeUpgrading, check: func(t *testing.T, d sequencer.Decision) {
				s := d.Status.NodeUpgradeStatuses["cp-1"]
				require.Equal(t, v1beta1.NodeRejoining, s.State)
				require.Equal(t, "waiting for the node to be Ready, its agent to report after the node step, control-plane pods kube-system/kube-apiserver-cp-1 to be Ready", s.Message)
			}},
		},
		{
			name: "a failed plan stays failed without a new retry", o: obs(v1beta1.PhaseFailed, func(o *sequencer.Observation) {
				o.Plan.Status.FailedPhase = v1beta1.PhaseNodeUpgrading
				o.Plan.Annotations = map[string]string{v1beta1.RetryAnnotation: "1"}
				o.Plan.Status.ObservedRetry = "1"
			}),
			want: want{phase: v1beta1.PhaseFailed, failedPhase: v1beta1.PhaseNodeUpgrading},
		},
		{
			name: "a retry waits while another plan is in flight", o: obs(v1beta1.PhaseFailed, func(o *sequencer.Observation) {
				o.Plan.Status.FailedPhase = v1beta1.PhaseNodeUpgrading
				o.Plan.Annotations = map[string]string{v1beta1.RetryAnnotation: "1"}
				o.PlansInFlight = []string{"other"}
			}),
			want: want{phase: v1beta1.PhaseFailed, failedPhase: v1beta1.PhaseNodeUpgrading, degraded: "RetryBlocked"},
		},
		{
			name: "a retry resumes from the failed node", o: obs(v1beta1.PhaseFailed, func(o *sequencer.Observation) {
				o.Plan.Status.FailedPhase = v1beta1.PhaseNodeUpgrading
				nodeStates(o, map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgraded, "cp-2": v1beta1.NodeUpgradeFailed})
				o.Plan.Status.Agents.Hold = true
				o.Plan.Annotations = map[string]string{v1beta1.RetryAnnotation: "2026-03-01T12:00"}
			}),
			want: want{phase: v1beta1.PhaseNodeUpgrading, check: func(t *testing.T, d sequencer.Decision) {
				require.Equal(t, 1, d.Status.Retries)
				require.Equal(t, "2026-03-01T12:00", d.Status.ObservedRetry)
				require.Equal(t, v1beta1.NodeCordoned, d.Status.NodeUpgradeStatuses["cp-2"].State)
				require.Equal(t, v1beta1.NodeUpgraded, d.Status.NodeUpgradeStatuses["cp-1"].State)
				require.True(t, d.Status.Agents.Hold)
			}},
		},
		{name: "an unknown phase fails", o: obs("Upgrading"), want: want{phase: v1beta1.PhaseFailed, failedPhase: "Upgrading", degraded: "UnknownPhase"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := tt.o.Plan.DeepCopy()
			d := sequencer.Decide(decideCfg, tt.o)
			require.Equal(t, before, tt.o.Plan, "Decide must not change its input")
			require.Equal(t, d, sequencer.Decide(decideCfg, tt.o), "Decide must be deterministic")
			require.Equal(t, tt.want.phase, d.Status.Phase, "conditions: %+v", d.Status.Conditions)
			require.Equal(t, tt.want.failedPhase, d.Status.FailedPhase)
			deg := meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionDegraded)
			if tt.want.degraded != "" {
				require.NotNil(t, deg)
				require.Equal(t, metav1.ConditionTrue, deg.Status)
				require.Equal(t, tt.want.degraded, deg.Reason)
				require.NotEmpty(t, deg.Message)
			} else if deg != nil {
				require.Equal(t, metav1.ConditionFalse, deg.Status, "degraded: %s", deg.Message)
			}
			if tt.want.progressing != "" {
				require.Equal(t, tt.want.progressing, meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionProgressing).Reason)
			}
			require.Equal(t, tt.want.actions, d.Actions)
			if tt.want.check != nil {
				tt.want.check(t, d)
			}
			if tt.want.phase != tt.o.Plan.Status.Phase {
				last := d.Status.PhaseTransitionTimestamps[len(d.Status.PhaseTransitionTimestamps)-1]
				require.Equal(t, tt.want.phase, last.Phase)
				require.True(t, last.PhaseTransitionTimestamp.Time.Equal(decideNow) || tt.o.Now != decideNow)
			}
		})
	}
}

// layeredArchives is an ISO's one archive whose blob index the ISO records: two images sharing a
// base layer of 1 MiB, each with a layer of its own of 1 MiB, and a manifest and a config of
// 800 bytes together.
func layeredArchives() []isorelease.Archive {
	const mib = 1 << 20
	meta := func(n string) []isorelease.Blob {
		return []isorelease.Blob{{Digest: "sha256:m" + n, BlobSize: release.BlobSize{Size: 500}}, {Digest: "sha256:c" + n, BlobSize: release.BlobSize{Size: 300}}}
	}
	base := isorelease.Blob{Digest: "sha256:base", BlobSize: release.BlobSize{Size: mib, Unpacked: mib}}
	own := func(n string) isorelease.Blob {
		return isorelease.Blob{Digest: "sha256:l" + n, BlobSize: release.BlobSize{Size: mib, Unpacked: mib}}
	}
	return []isorelease.Archive{{Images: []string{"docker.io/library/a:1", "docker.io/library/b:1"}, Size: 2 * mib, TarBytes: 4 * mib,
		Blobs: map[string][]isorelease.Blob{
			"docker.io/library/a:1": append(meta("a"), base, own("a")),
			"docker.io/library/b:1": append(meta("b"), base, own("b")),
		}}}
}
