package report_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer/report"
)

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, v1beta1.AddToScheme(s))
	return s
}

func TestWriterCreatesThenUpdates(t *testing.T) {
	t.Parallel()
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithStatusSubresource(&v1beta1.RepoNode{}).Build()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	w, err := report.NewWriter(c, "node-1", report.WithClock(func() time.Time { return at }))
	require.NoError(t, err)

	st := v1beta1.RepoNodeStatus{ISO: v1beta1.RepoNodeISO{Checksum: "abc", State: v1beta1.ISODownloading, BytesDone: 10, BytesTotal: 100}}
	require.NoError(t, w.Write(t.Context(), st))
	var got v1beta1.RepoNode
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: "node-1"}, &got))
	require.Equal(t, v1beta1.ISODownloading, got.Status.ISO.State)
	require.Equal(t, int64(10), got.Status.ISO.BytesDone)
	require.True(t, got.Status.HeartbeatTime.Time.Equal(at))

	st.ISO.State = v1beta1.ISOReady
	st.Repo = v1beta1.RepoNodeRepo{Ready: true, URL: "http://10.0.0.1:8080"}
	st.Preload = v1beta1.RepoNodePreload{State: v1beta1.PreloadDone, ImagesDone: 3, ImagesTotal: 3}
	require.NoError(t, w.Write(t.Context(), st))
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: "node-1"}, &got))
	require.Equal(t, v1beta1.ISOReady, got.Status.ISO.State)
	require.True(t, got.Status.Repo.Ready)
	require.Equal(t, v1beta1.PreloadDone, got.Status.Preload.State)
}

func TestNewWriterRejectsBadArguments(t *testing.T) {
	t.Parallel()
	c := fake.NewClientBuilder().WithScheme(scheme(t)).Build()
	tests := []struct {
		name string
		c    client.Client
		node string
	}{
		{name: "nil client", c: nil, node: "n"},
		{name: "empty node", c: c, node: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := report.NewWriter(tt.c, tt.node)
			require.Error(t, err)
		})
	}
}

func TestInstructions(t *testing.T) {
	t.Parallel()
	old := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	newer := metav1.NewTime(old.Add(time.Hour))
	plan := func(name string, created metav1.Time, a *v1beta1.AgentInstructions) *v1beta1.UpgradePlan {
		return &v1beta1.UpgradePlan{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: created},
			Spec:       v1beta1.UpgradePlanSpec{Version: "v1.5.2"},
			Status:     v1beta1.UpgradePlanStatus{Agents: a},
		}
	}
	tests := []struct {
		name  string
		plans []client.Object
		node  string
		want  report.Instruction
	}{
		{name: "no plans", node: "n1", want: report.Instruction{}},
		{
			name:  "released plan means drop",
			plans: []client.Object{plan("p", old, &v1beta1.AgentInstructions{ISOURL: "http://x/iso", Hold: false})},
			node:  "n1",
			want:  report.Instruction{},
		},
		{
			name:  "hold without preload",
			plans: []client.Object{plan("p", old, &v1beta1.AgentInstructions{ISOURL: "http://x/iso", ISOChecksum: "c", Hold: true, PreloadNodes: []string{"n2"}})},
			node:  "n1",
			want:  report.Instruction{Plan: "p", ISOURL: "http://x/iso", ISOChecksum: "c", Held: []string{"c"}},
		},
		{
			name: "a plan in flight goes before an older Failed plan, whose ISO stays held",
			plans: []client.Object{
				func() client.Object {
					p := plan("failed", old, &v1beta1.AgentInstructions{ISOURL: "http://old/iso", ISOChecksum: "old", Hold: true})
					p.Status.Phase = v1beta1.PhaseFailed
					return p
				}(),
				plan("running", newer, &v1beta1.AgentInstructions{ISOURL: "http://new/iso", ISOChecksum: "new", Hold: true, PreloadNodes: []string{"n1"}}),
			},
			node: "n1",
			want: report.Instruction{Plan: "running", ISOURL: "http://new/iso", ISOChecksum: "new", Preload: true, Held: []string{"new", "old"}, Failed: []string{"old"}},
		},
		{
			name: "every held ISO is listed once, a released one is not",
			plans: []client.Object{
				plan("a", newer, &v1beta1.AgentInstructions{ISOURL: "http://new/iso", ISOChecksum: "new", Hold: true}),
				plan("b", old, &v1beta1.AgentInstructions{ISOURL: "http://old/iso", ISOChecksum: "old", Hold: true}),
				plan("c", newer, &v1beta1.AgentInstructions{ISOURL: "http://old/iso", ISOChecksum: "old", Hold: true}),
				plan("d", old, &v1beta1.AgentInstructions{ISOURL: "http://gone/iso", ISOChecksum: "gone", Hold: false}),
			},
			node: "n1",
			want: report.Instruction{Plan: "b", ISOURL: "http://old/iso", ISOChecksum: "old", Held: []string{"new", "old"}},
		},
		{
			name: "a Succeeded plan's ISO is installed, not held",
			plans: []client.Object{
				func() client.Object {
					p := plan("done", old, &v1beta1.AgentInstructions{ISOURL: "http://old/iso", ISOChecksum: "old"})
					p.Status.Phase = v1beta1.PhaseSucceeded
					return p
				}(),
				func() client.Object {
					p := plan("failed", newer, &v1beta1.AgentInstructions{ISOURL: "http://new/iso", ISOChecksum: "new"})
					p.Status.Phase = v1beta1.PhaseFailed
					return p
				}(),
			},
			node: "n1",
			want: report.Instruction{Installed: []string{"old"}, Failed: []string{"new"}},
		},
		{
			name: "a plan cleaning up has installed its release: the agents drop the ISO before Succeeded",
			plans: []client.Object{
				func() client.Object {
					p := plan("done", old, &v1beta1.AgentInstructions{ISOURL: "http://old/iso", ISOChecksum: "old"})
					p.Status.Phase = v1beta1.PhaseCleaningUp
					return p
				}(),
				func() client.Object {
					p := plan("upgrading", newer, &v1beta1.AgentInstructions{ISOURL: "http://new/iso", ISOChecksum: "new", Hold: true})
					p.Status.Phase = v1beta1.PhaseNodeUpgrading
					return p
				}(),
			},
			node: "n1",
			want: report.Instruction{Plan: "upgrading", ISOURL: "http://new/iso", ISOChecksum: "new", Held: []string{"new"}, Installed: []string{"old"}},
		},
		{
			name: "the plan whose pre-flight awaits the agents' measures names its Version for the node's forecast",
			plans: []client.Object{
				func() client.Object {
					p := plan("judged", newer, nil)
					p.Status.Phase = v1beta1.PhaseInitializing
					p.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: v1beta1.ReasonAwaitingNodeMeasures}}
					p.Spec.Version = "v1.6.0"
					return p
				}(),
				plan("new", old, nil),
				plan("holding", old, &v1beta1.AgentInstructions{ISOURL: "http://old/iso", ISOChecksum: "old", Hold: true}),
			},
			node: "n1",
			want: report.Instruction{Plan: "holding", ISOURL: "http://old/iso", ISOChecksum: "old", Held: []string{"old"}, Judged: "v1.6.0"},
		},
		{
			name: "a plan being judged that does not await measures (a refused one, say) asks for none",
			plans: []client.Object{
				func() client.Object {
					p := plan("refused", old, nil)
					p.Status.Phase = v1beta1.PhaseInitializing
					p.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: "PolicyCheckPending"}}
					return p
				}(),
			},
			node: "n1",
			want: report.Instruction{},
		},
		{
			name: "oldest holding plan wins and preload allowed",
			plans: []client.Object{
				plan("a", newer, &v1beta1.AgentInstructions{ISOURL: "http://new/iso", Hold: true}),
				plan("b", old, &v1beta1.AgentInstructions{ISOURL: "http://old/iso", Hold: true, PreloadNodes: []string{"n1"}}),
			},
			node: "n1",
			want: report.Instruction{Plan: "b", ISOURL: "http://old/iso", Preload: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(tt.plans...).Build()
			got, err := report.Instructions(t.Context(), c, tt.node)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// Step reads back the step report the RepoNode carries, for an agent that restarts.
func TestWriterStep(t *testing.T) {
	t.Parallel()
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local)) // as metav1.Time reads it back
	step := &v1beta1.RepoNodeStep{Plan: "up", Stage: v1beta1.StageOSUpgrading, Message: "rebooting", Time: at}
	tests := []struct {
		name    string
		objects []client.Object
		want    *v1beta1.RepoNodeStep
	}{
		{name: "no RepoNode yet"},
		{name: "no step reported", objects: []client.Object{&v1beta1.RepoNode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}}},
		{
			name: "a step reported",
			objects: []client.Object{&v1beta1.RepoNode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
				Status: v1beta1.RepoNodeStatus{Step: step}}},
			want: step,
		},
		{
			name: "another node's step",
			objects: []client.Object{&v1beta1.RepoNode{ObjectMeta: metav1.ObjectMeta{Name: "node-2"},
				Status: v1beta1.RepoNodeStatus{Step: step}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := fake.NewClientBuilder().WithScheme(scheme(t)).WithStatusSubresource(&v1beta1.RepoNode{}).WithObjects(tt.objects...).Build()
			w, err := report.NewWriter(c, "node-1")
			require.NoError(t, err)
			got, err := w.Step(t.Context())
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
