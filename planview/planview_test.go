package planview

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the current output")

// t0 is when every test plan was created and entered Initializing.
var t0 = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) *metav1.Time {
	t := metav1.NewTime(t0.Add(d))
	return &t
}

// transitions enters each phase of phases 10 s after the one before, from t0; the last one is
// entered at last instead.
func transitions(last time.Duration, phases ...v1beta1.Phase) []v1beta1.PhaseTransitionTimestamp {
	out := make([]v1beta1.PhaseTransitionTimestamp, len(phases))
	for i, ph := range phases {
		d := time.Duration(i) * 10 * time.Second
		if i == len(phases)-1 {
			d = last
		}
		out[i] = v1beta1.PhaseTransitionTimestamp{Phase: ph, PhaseTransitionTimestamp: *at(d)}
	}
	return out
}

// upTo lists the phases of a plan from Initializing to last.
func upTo(last v1beta1.Phase) []v1beta1.Phase {
	all := []v1beta1.Phase{
		v1beta1.PhaseInitializing, v1beta1.PhaseInitialized, v1beta1.PhaseISODownloading, v1beta1.PhaseISODownloaded,
		v1beta1.PhaseRepoCreating, v1beta1.PhaseRepoCreated, v1beta1.PhaseMetadataPopulating, v1beta1.PhaseMetadataPopulated,
		v1beta1.PhaseImagePreloading, v1beta1.PhaseImagePreloaded, v1beta1.PhaseClusterUpgrading, v1beta1.PhaseClusterUpgraded,
		v1beta1.PhaseNodeUpgrading, v1beta1.PhaseNodeUpgraded, v1beta1.PhaseCleaningUp, v1beta1.PhaseCleanedUp,
		v1beta1.PhaseSucceeded,
	}
	for i, ph := range all {
		if ph == last {
			return all[:i+1]
		}
	}
	return append(all[:13:13], last)
}

func conditions(progressing, degraded bool, reason, message string, since time.Duration) []metav1.Condition {
	status := func(b bool) metav1.ConditionStatus {
		if b {
			return metav1.ConditionTrue
		}
		return metav1.ConditionFalse
	}
	return []metav1.Condition{
		{Type: v1beta1.ConditionAvailable, Status: metav1.ConditionFalse, Reason: "Upgrading", LastTransitionTime: *at(0)},
		{Type: v1beta1.ConditionProgressing, Status: status(progressing), Reason: "Upgrading", LastTransitionTime: *at(0)},
		{Type: v1beta1.ConditionDegraded, Status: status(degraded), Reason: reason, Message: message, LastTransitionTime: *at(since)},
	}
}

var release = &v1beta1.ReleaseMetadata{
	Harvester: "v1.6.0", Kubernetes: "v1.33.3", Etcd: "3.5.21-0", CoreDNS: "v1.12.1", OS: "Harvester v1.6.0",
}

// clusterNodes is the upgrade order the command hands in: control-plane nodes (node-b, node-c)
// first, then node-a, each with its kubelet now.
var clusterNodes = []Node{
	{Name: "node-b", KubeletVersion: "v1.32.7"},
	{Name: "node-c", KubeletVersion: "v1.32.7"},
	{Name: "node-a", KubeletVersion: "v1.32.7"},
}

func plan(status v1beta1.UpgradePlanStatus) *v1beta1.UpgradePlan {
	return &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: "to-v1-6-0", CreationTimestamp: *at(-2 * time.Second)},
		Spec:       v1beta1.UpgradePlanSpec{Version: "v1.6.0"},
		Status:     status,
	}
}

func preloaded(images, bytes int64) v1beta1.NodeUpgradeStatus {
	return v1beta1.NodeUpgradeStatus{ImagesDone: images, ImagesTotal: images, BytesDone: bytes, BytesTotal: bytes}
}

func upgraded(ns v1beta1.NodeUpgradeStatus, state v1beta1.NodeState, since time.Duration, now string) v1beta1.NodeUpgradeStatus {
	ns.State, ns.StateTime, ns.LastProgressTime = state, at(since), at(since)
	ns.KubeletVersionBefore, ns.KubeletVersion, ns.TargetKubeletVersion = "v1.32.7", now, "v1.33.3"
	return ns
}

func goldenCases() []struct {
	name  string
	plan  *v1beta1.UpgradePlan
	nodes []Node
	now   time.Duration
} {
	const gib = 1 << 30
	return []struct {
		name  string
		plan  *v1beta1.UpgradePlan
		nodes []Node
		now   time.Duration
	}{
		{
			name: "initializing",
			plan: plan(v1beta1.UpgradePlanStatus{
				Phase:                     v1beta1.PhaseInitializing,
				PhaseTransitionTimestamps: transitions(0, v1beta1.PhaseInitializing),
				Conditions:                conditions(true, false, "Upgrading", "", 0),
			}),
			nodes: clusterNodes,
			now:   5 * time.Second,
		},
		{
			name: "image-preloading",
			plan: plan(v1beta1.UpgradePlanStatus{
				Phase:                     v1beta1.PhaseImagePreloading,
				PhaseTransitionTimestamps: transitions(90*time.Second, upTo(v1beta1.PhaseImagePreloading)...),
				Conditions:                conditions(true, false, "Upgrading", "", 0),
				PreviousVersion:           "v1.5.2",
				ReleaseMetadata:           release,
				Warnings: []string{
					"deployment default/web has a single replica: it is unavailable while its node drains",
					"poddisruptionbudget default/db allows no disruption now: the drain of its node will wait",
				},
				NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
					"node-b": {State: v1beta1.NodeImagePreloaded, StateTime: at(150 * time.Second), ImagesDone: 7, ImagesTotal: 7, BytesDone: 3 * gib, BytesTotal: 3 * gib, KubeletVersionBefore: "v1.32.7", KubeletVersion: "v1.32.7"},
					"node-c": {State: v1beta1.NodeImagePreloading, StateTime: at(150 * time.Second), ImagesDone: 3, ImagesTotal: 7, BytesDone: 2 * gib, BytesTotal: 3 * gib, KubeletVersionBefore: "v1.32.7", KubeletVersion: "v1.32.7"},
					"node-a": {State: v1beta1.NodeImagePreloadPending, StateTime: at(90 * time.Second), ImagesTotal: 7, BytesTotal: 3 * gib, KubeletVersionBefore: "v1.32.7", KubeletVersion: "v1.32.7"},
				},
			}),
			nodes: clusterNodes,
			now:   3 * time.Minute,
		},
		{
			name: "node-upgrading",
			plan: plan(v1beta1.UpgradePlanStatus{
				Phase:                     v1beta1.PhaseNodeUpgrading,
				PhaseTransitionTimestamps: transitions(5*time.Minute, upTo(v1beta1.PhaseNodeUpgrading)...),
				Conditions:                conditions(true, false, "Upgrading", "", 0),
				PreviousVersion:           "v1.5.2",
				ReleaseMetadata:           release,
				NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
					"node-b": upgraded(preloaded(7, 3*gib), v1beta1.NodeUpgraded, 7*time.Minute, "v1.33.3"),
					"node-c": upgraded(preloaded(7, 3*gib), v1beta1.NodeKubernetesUpgrading, 8*time.Minute+20*time.Second, "v1.32.7"),
				},
			}),
			nodes: clusterNodes,
			now:   9 * time.Minute,
		},
		{
			// Paused by upgrade pause: the header says so and names the command that resumes
			// it; a node given up on is listed.
			name: "held",
			plan: func() *v1beta1.UpgradePlan {
				p := plan(v1beta1.UpgradePlanStatus{
					Phase:                     v1beta1.PhaseNodeUpgrading,
					PhaseTransitionTimestamps: transitions(5*time.Minute, upTo(v1beta1.PhaseNodeUpgrading)...),
					Conditions:                conditions(true, true, "NodesHeld", "waiting for held nodes: node-c", 8*time.Minute),
					PreviousVersion:           "v1.5.2",
					ReleaseMetadata:           release,
					NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
						"node-b": upgraded(preloaded(7, 3*gib), v1beta1.NodeUpgraded, 7*time.Minute, "v1.33.3"),
						"node-c": func() v1beta1.NodeUpgradeStatus {
							ns := upgraded(preloaded(7, 3*gib), v1beta1.NodeUpgradePaused, 8*time.Minute, "v1.32.7")
							ns.Reason, ns.Message = "NodePaused", "listed in nodeUpgradeOption.pauseNodes"
							return ns
						}(),
						"node-a": upgraded(preloaded(7, 3*gib), v1beta1.NodeSkipped, 8*time.Minute, "v1.32.7"),
					},
				})
				p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: []string{"node-b", "node-c"}, SkipNodes: []string{"node-a"}}
				return p
			}(),
			nodes: clusterNodes,
			now:   10 * time.Minute,
		},
		{
			name: "degraded",
			plan: plan(v1beta1.UpgradePlanStatus{
				Phase:                     v1beta1.PhaseNodeUpgrading,
				PhaseTransitionTimestamps: transitions(5*time.Minute, upTo(v1beta1.PhaseNodeUpgrading)...),
				Conditions: conditions(true, true, "NodeStalled",
					"node node-c: Rejoining (WaitingForNode): waiting for the node to be Ready, control-plane pods kube-system/kube-apiserver-node-c to be Ready, no progress since 2025-06-01T10:08:00Z",
					38*time.Minute),
				PreviousVersion: "v1.5.2",
				ReleaseMetadata: release,
				Retries:         1,
				NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
					"node-b": upgraded(preloaded(7, 3*gib), v1beta1.NodeUpgraded, 7*time.Minute, "v1.33.3"),
					"node-c": func() v1beta1.NodeUpgradeStatus {
						ns := upgraded(preloaded(7, 3*gib), v1beta1.NodeRejoining, 8*time.Minute, "v1.33.3")
						ns.Reason = "WaitingForNode"
						ns.Message = "waiting for the node to be Ready,\ncontrol-plane pods kube-system/kube-apiserver-node-c to be Ready"
						return ns
					}(),
					"node-a": upgraded(preloaded(7, 3*gib), v1beta1.NodeUpgradePending, 5*time.Minute, "v1.32.7"),
				},
			}),
			nodes: clusterNodes,
			now:   40 * time.Minute,
		},
		{
			// No nodes handed in: the rows are the status's nodes by name.
			name: "succeeded",
			plan: plan(v1beta1.UpgradePlanStatus{
				Phase:                     v1beta1.PhaseSucceeded,
				PhaseTransitionTimestamps: transitions(12*time.Minute, upTo(v1beta1.PhaseSucceeded)...),
				Conditions: []metav1.Condition{
					{Type: v1beta1.ConditionAvailable, Status: metav1.ConditionTrue, Reason: "Succeeded", LastTransitionTime: *at(12 * time.Minute)},
					{Type: v1beta1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: "Succeeded", LastTransitionTime: *at(12 * time.Minute)},
					{Type: v1beta1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: "Succeeded", LastTransitionTime: *at(12 * time.Minute)},
				},
				PreviousVersion: "v1.5.2",
				ReleaseMetadata: release,
				NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
					"node-b": upgraded(preloaded(7, 3*gib), v1beta1.NodeUpgraded, 7*time.Minute, "v1.33.3"),
					"node-c": upgraded(preloaded(7, 3*gib), v1beta1.NodeUpgraded, 9*time.Minute, "v1.33.3"),
					"node-a": upgraded(preloaded(7, 3*gib), v1beta1.NodeUpgraded, 11*time.Minute, "v1.33.3"),
				},
			}),
			now: 2 * time.Hour,
		},
		{
			name: "failed",
			plan: plan(v1beta1.UpgradePlanStatus{
				Phase:                     v1beta1.PhaseFailed,
				FailedPhase:               v1beta1.PhaseNodeUpgrading,
				PhaseTransitionTimestamps: transitions(10*time.Minute, append(upTo(v1beta1.PhaseNodeUpgrading), v1beta1.PhaseFailed)...),
				Conditions: conditions(false, true, "NodeUpgradeFailed",
					"node node-c: job to-v1-6-0-node-node-c failed: BackoffLimitExceeded", 10*time.Minute),
				PreviousVersion: "v1.5.2",
				ReleaseMetadata: release,
				NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
					"node-b": upgraded(preloaded(7, 3*gib), v1beta1.NodeUpgraded, 7*time.Minute, "v1.33.3"),
					"node-c": func() v1beta1.NodeUpgradeStatus {
						ns := upgraded(preloaded(7, 3*gib), v1beta1.NodeUpgradeFailed, 10*time.Minute, "v1.32.7")
						ns.Reason, ns.Message = "JobFailed", "job to-v1-6-0-node-node-c failed: BackoffLimitExceeded"
						return ns
					}(),
					"node-a": upgraded(preloaded(7, 3*gib), v1beta1.NodeUpgradePending, 5*time.Minute, "v1.32.7"),
				},
			}),
			nodes: clusterNodes,
			now:   15 * time.Minute,
		},
	}
}

func TestGolden(t *testing.T) {
	t.Parallel()
	for _, tt := range goldenCases() {
		for _, format := range []string{"txt", "json"} {
			t.Run(tt.name+"."+format, func(t *testing.T) {
				t.Parallel()
				p := New(tt.plan, tt.nodes, t0.Add(tt.now))
				var b bytes.Buffer
				if format == "json" {
					require.NoError(t, WriteJSON(&b, p))
				} else {
					require.NoError(t, WriteText(&b, p))
				}
				path := filepath.Join("testdata", tt.name+"."+format+".golden")
				if *update {
					require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
				}
				want, err := os.ReadFile(path)
				require.NoError(t, err, "run go test ./planview -update to write it")
				require.Equal(t, string(want), b.String())
			})
		}
	}
}

// TestJSONFields pins the JSON field names scripts read: every field is present, even when
// unknown, so that a script never meets a missing key.
func TestJSONFields(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, WriteJSON(&b, New(&v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, []Node{{Name: "n"}}, t0)))
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &doc))
	keys := func(m map[string]any) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		return out
	}
	require.ElementsMatch(t, []string{
		"name", "version", "previousVersion", "phase", "failedPhase", "time", "startTime", "phaseTime",
		"finishTime", "elapsedSeconds", "phaseElapsedSeconds", "degraded", "warnings", "retries", "installed", "release",
		"held", "skipNodes", "onlyNodes", "nodes", "estimate",
	}, keys(doc))
	nodes, ok := doc["nodes"].([]any)
	require.True(t, ok)
	require.Len(t, nodes, 1)
	node, ok := nodes[0].(map[string]any)
	require.True(t, ok)
	require.ElementsMatch(t, []string{
		"name", "state", "reason", "message", "stateTime", "lastProgressTime", "kubeletVersionBefore",
		"kubeletVersion", "targetKubeletVersion", "imagesDone", "imagesTotal", "bytesDone", "bytesTotal", "preloadPercent",
		"downloadBytesDone", "downloadBytesTotal", "controlPlane",
	}, keys(node))
	require.Equal(t, StatePending, node["state"])
	require.Equal(t, []any{}, doc["warnings"])
}

func TestNew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		plan  *v1beta1.UpgradePlan
		nodes []Node
		now   time.Time
		check func(t *testing.T, p *Plan)
	}{
		{
			name:  "no status yet: not started, nodes pending, started at creation",
			plan:  &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "p", CreationTimestamp: *at(0)}, Spec: v1beta1.UpgradePlanSpec{Version: "v1.6.0"}},
			nodes: []Node{{Name: "b", KubeletVersion: "v1.32.7"}, {Name: "a"}},
			now:   t0.Add(time.Minute),
			check: func(t *testing.T, p *Plan) {
				require.Len(t, p.Nodes, 2)
				require.Equal(t, "b", p.Nodes[0].Name, "the handed order is kept")
				require.Equal(t, StatePending, p.Nodes[0].State)
				require.Equal(t, "v1.32.7", p.Nodes[0].KubeletVersion)
				require.Nil(t, p.PhaseTime)
				require.Equal(t, int64(60), p.ElapsedSeconds)
			},
		},
		{
			name: "a node missing from the order follows by name; a repeated one shows once",
			plan: plan(v1beta1.UpgradePlanStatus{NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
				"z": {State: v1beta1.NodeUpgraded}, "y": {State: v1beta1.NodeUpgraded}, "m": {State: v1beta1.NodeCordoned},
			}}),
			nodes: []Node{{Name: "m"}, {Name: "m"}},
			now:   t0,
			check: func(t *testing.T, p *Plan) {
				var names []string
				for _, n := range p.Nodes {
					names = append(names, n.Name)
				}
				require.Equal(t, []string{"m", "y", "z"}, names)
				require.Equal(t, string(v1beta1.NodeCordoned), p.Nodes[0].State)
			},
		},
		{
			name: "a retried plan counts the phase from its last entry",
			plan: plan(v1beta1.UpgradePlanStatus{
				Phase: v1beta1.PhaseNodeUpgrading,
				PhaseTransitionTimestamps: []v1beta1.PhaseTransitionTimestamp{
					{Phase: v1beta1.PhaseInitializing, PhaseTransitionTimestamp: *at(0)},
					{Phase: v1beta1.PhaseNodeUpgrading, PhaseTransitionTimestamp: *at(time.Minute)},
					{Phase: v1beta1.PhaseFailed, PhaseTransitionTimestamp: *at(2 * time.Minute)},
					{Phase: v1beta1.PhaseNodeUpgrading, PhaseTransitionTimestamp: *at(10 * time.Minute)},
				},
			}),
			now: t0.Add(11 * time.Minute),
			check: func(t *testing.T, p *Plan) {
				require.Equal(t, int64(60), p.PhaseElapsedSeconds)
				require.Equal(t, int64(660), p.ElapsedSeconds)
				require.Nil(t, p.FinishTime)
			},
		},
		{
			name: "preload percent by images without bytes, never above 100",
			plan: plan(v1beta1.UpgradePlanStatus{NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
				"a": {ImagesDone: 1, ImagesTotal: 3}, "b": {ImagesDone: 4, ImagesTotal: 3}, "c": {},
			}}),
			now: t0,
			check: func(t *testing.T, p *Plan) {
				require.NotNil(t, p.Nodes[0].PreloadPercent)
				require.Equal(t, 33, *p.Nodes[0].PreloadPercent)
				require.Equal(t, 100, *p.Nodes[1].PreloadPercent)
				require.Nil(t, p.Nodes[2].PreloadPercent)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.check(t, New(tt.plan, tt.nodes, tt.now))
		})
	}
}

func TestPick(t *testing.T) {
	t.Parallel()
	mk := func(name string, created time.Duration, phase v1beta1.Phase) v1beta1.UpgradePlan {
		return v1beta1.UpgradePlan{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: *at(created)},
			Status:     v1beta1.UpgradePlanStatus{Phase: phase},
		}
	}
	tests := []struct {
		name  string
		plans []v1beta1.UpgradePlan
		want  string
	}{
		{name: "none", want: ""},
		{name: "the running one over a newer finished one", plans: []v1beta1.UpgradePlan{
			mk("old", 0, v1beta1.PhaseSucceeded), mk("running", time.Hour, v1beta1.PhaseNodeUpgrading), mk("newest", 2*time.Hour, v1beta1.PhaseFailed),
		}, want: "running"},
		{name: "a plan not seen by the sequencer yet runs", plans: []v1beta1.UpgradePlan{
			mk("done", time.Hour, v1beta1.PhaseSucceeded), mk("new", 0, ""),
		}, want: "new"},
		{name: "all finished: the newest", plans: []v1beta1.UpgradePlan{
			mk("b", time.Hour, v1beta1.PhaseFailed), mk("c", 2*time.Hour, v1beta1.PhaseSucceeded), mk("a", 0, v1beta1.PhaseSucceeded),
		}, want: "c"},
		{name: "same creation time: the last name", plans: []v1beta1.UpgradePlan{
			mk("b", 0, v1beta1.PhaseSucceeded), mk("c", 0, v1beta1.PhaseSucceeded), mk("a", 0, v1beta1.PhaseSucceeded),
		}, want: "c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Pick(tt.plans)
			if tt.want == "" {
				require.Nil(t, got)
				return
			}
			require.NotNil(t, got)
			require.Equal(t, tt.want, got.Name)
		})
	}
}

func TestSameText(t *testing.T) {
	t.Parallel()
	c := goldenCases()[1]
	base := New(c.plan, c.nodes, t0.Add(c.now))
	later := New(c.plan, c.nodes, t0.Add(c.now+time.Hour))
	moved := c.plan.DeepCopy()
	ns := moved.Status.NodeUpgradeStatuses["node-c"]
	ns.State = v1beta1.NodeImagePreloaded
	moved.Status.NodeUpgradeStatuses["node-c"] = ns
	bytesOnly := c.plan.DeepCopy()
	ns = bytesOnly.Status.NodeUpgradeStatuses["node-c"]
	ns.BytesDone--
	bytesOnly.Status.NodeUpgradeStatuses["node-c"] = ns
	tests := []struct {
		name string
		b    *Plan
		same bool
	}{
		{name: "only the clock moved", b: later, same: true},
		{name: "a node moved", b: New(moved, c.nodes, t0.Add(c.now)), same: false},
		{name: "a byte less, still 66%", b: New(bytesOnly, c.nodes, t0.Add(c.now)), same: true},
		{name: "nil", b: nil, same: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.same, SameText(base, tt.b))
		})
	}
}

func TestCells(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		got  string
		want string
	}{
		{name: "kubelet before and now", got: kubelet("v1.32.7", "v1.33.3"), want: "v1.32.7 -> v1.33.3"},
		{name: "kubelet unchanged", got: kubelet("v1.32.7", "v1.32.7"), want: "v1.32.7"},
		{name: "kubelet unknown", got: kubelet("", ""), want: "-"},
		{name: "kubelet now unknown", got: kubelet("v1.32.7", ""), want: "v1.32.7"},
		{name: "short message", got: truncate("short", 10), want: "short"},
		{name: "long message", got: truncate(strings.Repeat("é", 12), 10), want: strings.Repeat("é", 7) + "..."},
		{name: "white space folded", got: oneLine("a\n\tb  c "), want: "a b c"},
		{name: "reason only", got: joinReason("JobFailed", ""), want: "JobFailed"},
		{name: "age unknown", got: age(t0, nil), want: "-"},
		{name: "age", got: age(t0.Add(90*time.Second), &t0), want: "90s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.got)
		})
	}
}

func TestWriteTextControlPlanes(t *testing.T) {
	t.Parallel()
	p := &Plan{Name: "p", Nodes: []NodeStatus{
		{Name: "cp-1", State: "Upgraded", ControlPlane: &v1beta1.ControlPlaneVersions{APIServer: "v1.34.4", ControllerManager: "v1.34.4", Scheduler: "v1.34.4", Etcd: "3.6.5-0"}},
		{Name: "cp-2", State: "UpgradePending", ControlPlane: &v1beta1.ControlPlaneVersions{APIServer: "v1.33.13", ControllerManager: "v1.33.13", Scheduler: "v1.33.13"}},
		{Name: "w-1", State: "Skipped"},
	}}
	var b strings.Builder
	require.NoError(t, WriteText(&b, p))
	out := b.String()
	require.Contains(t, out, "CONTROL PLANE   APISERVER   CONTROLLER-MANAGER   SCHEDULER   ETCD\n")
	require.Contains(t, out, "cp-1            v1.34.4     v1.34.4              v1.34.4     3.6.5-0\n")
	require.Contains(t, out, "cp-2            v1.33.13    v1.33.13             v1.33.13    -\n")
	require.NotContains(t, out[strings.Index(out, "CONTROL PLANE"):], "w-1", "a worker has no control-plane row")
}

func TestEstimateLine(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 3, 1, 11, 30, 0, 0, time.UTC)
	tests := []struct {
		name string
		e    Estimate
		want string
	}{
		{name: "from history and rate", e: Estimate{RemainingSeconds: 1500, EndTime: end, Phases: []PhaseEstimate{
			{Phase: "ISODownloading", Basis: "rate", BytesPerSecond: 12 << 20}, {Phase: "ImagePreloading", Basis: "history"}, {Phase: "CleaningUp", Basis: "history"}}},
			want: "in about 25m0s, near 11:30 UTC; measured: ISODownloading at 12.0 MiB/s; from history: ImagePreloading, CleaningUp"},
		{name: "a first plan", e: Estimate{RemainingSeconds: 240, EndTime: end, First: true, Partial: true, Phases: []PhaseEstimate{
			{Phase: "ISODownloading", Basis: "rate", BytesPerSecond: 5 << 20}, {Phase: "ImagePreloading", Basis: "unknown"}, {Phase: "NodeUpgrading", Basis: "unknown"}}},
			want: "in at least 4m0s, near 11:30 UTC at the earliest; measured: ISODownloading at 5.0 MiB/s; nothing to go on yet for ImagePreloading, NodeUpgrading; a first estimate: the cluster recorded no earlier plan"},
		{name: "a first plan in ImagePreloading: measured, assumed and unknown parts each said", e: Estimate{RemainingSeconds: 990, EndTime: end, First: true, Partial: true, Assumed: true,
			Phases: []PhaseEstimate{
				{Phase: "ImagePreloading", Basis: "rate", RemainingSeconds: 90, BytesLeft: 180 << 20, BytesPerSecond: 2 << 20},
				{Phase: "ClusterUpgrading", Basis: "unknown"},
				{Phase: "NodeUpgrading", Basis: "assumed", RemainingSeconds: 900, NodeSeconds: 300, Assumption: "5m0s a node, control planes one at a time, the others 1 at a time"},
				{Phase: "CleaningUp", Basis: "unknown"}}},
			want: "in at least 16m30s, near 11:30 UTC at the earliest; measured: ImagePreloading at 2.0 MiB/s; assumed: NodeUpgrading (5m0s a node, control planes one at a time, the others 1 at a time); " +
				"nothing to go on yet for ClusterUpgrading, CleaningUp; a first estimate: the cluster recorded no earlier plan"},
		{name: "a node time measured on this plan", e: Estimate{RemainingSeconds: 240, EndTime: end, Phases: []PhaseEstimate{
			{Phase: "NodeUpgrading", Basis: "this plan", NodeSeconds: 120}, {Phase: "CleaningUp", Basis: "history"}}},
			want: "in about 4m0s, near 11:30 UTC; measured: NodeUpgrading at 2m0s a node; from history: CleaningUp"},
		{name: "a second plan to the release the cluster runs: phases with nothing to do said apart", e: Estimate{RemainingSeconds: 105, EndTime: end, Assumed: true,
			Phases: []PhaseEstimate{
				{Phase: "ImagePreloading", Basis: "nothing to do", RemainingSeconds: 10, Assumption: "nothing to do (every node holds the release's images): 10s"},
				{Phase: "ClusterUpgrading", Basis: "nothing to do", RemainingSeconds: 10},
				{Phase: "NodeUpgrading", Basis: "assumed", RemainingSeconds: 80, NodeSeconds: 20, Assumption: "20s for each control plane at the target, 20s for each other node at the target; control planes one at a time, the others 1 at a time"},
				{Phase: "CleaningUp", Basis: "history", RemainingSeconds: 5}}},
			want: "in about 1m45s, near 11:30 UTC; from history: CleaningUp; assumed: NodeUpgrading (20s for each control plane at the target, 20s for each other node at the target; " +
				"control planes one at a time, the others 1 at a time); nothing to do: ImagePreloading, ClusterUpgrading"},
		{name: "nothing to go on", e: Estimate{EndTime: end, First: true, Partial: true, Phases: []PhaseEstimate{{Phase: "NodeUpgrading", Basis: "unknown"}}},
			want: "not known yet: nothing to go on for NodeUpgrading; a first estimate: the cluster recorded no earlier plan"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.e.Line())
		})
	}
}
