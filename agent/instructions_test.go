package agent

import (
	"context"
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

// kubeFake is the API server as controller-runtime's fake client sees it.
func kubeFake(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, v1beta1.AddToScheme(s))
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithStatusSubresource(&v1beta1.RepoNode{}, &v1beta1.UpgradePlan{}).Build()
}

// waitFor waits, up to a deadline, for an instruction that ok accepts.
func waitFor(t *testing.T, b *instructions, ok func(report.Instruction) bool) report.Instruction {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	in, err := b.wait(ctx, ok)
	require.NoError(t, err, "the instruction never came")
	return in
}

// The watch turns every change of the UpgradePlans into the node's instruction: nothing reads the
// plans again, so an instruction that arrives at all came with the watch.
func TestWatchPlans(t *testing.T) {
	t.Parallel()
	kube := kubeFake(t, &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "up"}, Spec: v1beta1.UpgradePlanSpec{Version: "v1.5.2"}})
	b := newInstructions()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); watchPlans(ctx, kube, "n1", b) }()

	var p v1beta1.UpgradePlan
	require.NoError(t, kube.Get(t.Context(), client.ObjectKey{Name: "up"}, &p))
	p.Status.Phase = v1beta1.PhaseInitializing
	p.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: v1beta1.ReasonAwaitingNodeMeasures,
		LastTransitionTime: metav1.Now()}}
	require.NoError(t, kube.Status().Update(t.Context(), &p))
	in := waitFor(t, b, func(in report.Instruction) bool { return in.Judged != "" })
	require.Equal(t, report.Instruction{Judged: "v1.5.2"}, in, "a plan whose pre-flight awaits the agents' measures asks only for a measure of its release")

	require.NoError(t, kube.Get(t.Context(), client.ObjectKey{Name: "up"}, &p))
	p.Status.Agents = &v1beta1.AgentInstructions{ISOURL: "http://o/r.iso", ISOChecksum: "ab", Hold: true, PreloadNodes: []string{"n1"}}
	require.NoError(t, kube.Status().Update(t.Context(), &p))
	in = waitFor(t, b, func(in report.Instruction) bool { return in.Preload })
	require.Equal(t, report.Instruction{Plan: "up", ISOURL: "http://o/r.iso", ISOChecksum: "ab", Preload: true, Held: []string{"ab"}}, in)

	require.NoError(t, kube.Delete(t.Context(), &p))
	in = waitFor(t, b, func(in report.Instruction) bool { return len(in.Held) == 0 })
	require.Empty(t, in.Plan)

	cancel()
	<-done
}

// Waiters wake on a change, not on a repeat of the same instruction, and stop with their context.
func TestInstructionsWait(t *testing.T) {
	t.Parallel()
	b := newInstructions()
	_, known := b.current()
	require.False(t, known)
	got := make(chan report.Instruction, 1)
	go func() {
		in, err := b.wait(t.Context(), func(in report.Instruction) bool { return in.Plan == "b" })
		if err == nil {
			got <- in
		}
	}()
	b.set(report.Instruction{Plan: "a"})
	b.set(report.Instruction{Plan: "a"})
	b.set(report.Instruction{Plan: "b"})
	require.Equal(t, "b", (<-got).Plan)
	in, known := b.current()
	require.True(t, known)
	require.Equal(t, "b", in.Plan)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := b.wait(ctx, func(report.Instruction) bool { return false })
	require.ErrorIs(t, err, context.Canceled)
}
