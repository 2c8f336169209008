package sequencer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// rowsStatus is a NodeUpgrading status of n nodes, all Pending.
func rowsStatus(n int) *v1beta1.UpgradePlanStatus {
	st := &v1beta1.UpgradePlanStatus{Phase: v1beta1.PhaseNodeUpgrading, NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{},
		Conditions: []metav1.Condition{{Type: v1beta1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: "NodeUpgrading", Message: "0 upgraded"}}}
	for i := range n {
		st.NodeUpgradeStatuses[fmt.Sprintf("node-%04d", i)] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgradePending, KubeletVersion: "v1.33.0"}
	}
	return st
}

func TestStatusPatch(t *testing.T) {
	t.Parallel()
	cordoned := metav1.NewMicroTime(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	tests := []struct {
		name string
		// change makes the new status from a copy of the old one.
		change func(st *v1beta1.UpgradePlanStatus)
		// rows are the node rows the patch must name, and no others; nil: no patch.
		rows []string
	}{
		{name: "unchanged", change: func(*v1beta1.UpgradePlanStatus) {}},
		{name: "one row", rows: []string{"node-0003"}, change: func(st *v1beta1.UpgradePlanStatus) {
			st.NodeUpgradeStatuses["node-0003"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeCordoned, Message: "cordoned",
				KubeletVersion: "v1.33.0", Times: &v1beta1.NodeTimes{Cordoned: &cordoned}}
		}},
		{name: "a field of a row cleared", rows: []string{"node-0001"}, change: func(st *v1beta1.UpgradePlanStatus) {
			st.NodeUpgradeStatuses["node-0001"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgradePending}
		}},
		{name: "a row gone and one new", rows: []string{"node-0002", "new"}, change: func(st *v1beta1.UpgradePlanStatus) {
			delete(st.NodeUpgradeStatuses, "node-0002")
			st.NodeUpgradeStatuses["new"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgradePending}
		}},
		{name: "the phase and a condition, no row", rows: []string{}, change: func(st *v1beta1.UpgradePlanStatus) {
			st.Phase = v1beta1.PhaseNodeUpgraded
			st.Conditions[0].Message = "10 upgraded"
		}},
		{name: "every row gone", rows: []string{}, change: func(st *v1beta1.UpgradePlanStatus) {
			st.NodeUpgradeStatuses = nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			from := rowsStatus(10)
			to := from.DeepCopy()
			tt.change(to)
			p, err := sequencer.StatusPatch("42", from, to)
			require.NoError(t, err)
			if tt.rows == nil {
				require.Nil(t, p)
				return
			}
			var got struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
				Status struct {
					Rows map[string]json.RawMessage `json:"nodeUpgradeStatuses"`
				} `json:"status"`
			}
			require.NoError(t, json.Unmarshal(p, &got))
			require.Equal(t, "42", got.Metadata.ResourceVersion, "the patch holds the plan's resourceVersion")
			var named []string
			for n := range got.Status.Rows {
				named = append(named, n)
			}
			require.ElementsMatch(t, tt.rows, named)

			// Applied to the old plan, the patch gives the new status.
			old, err := json.Marshal(v1beta1.UpgradePlan{Status: *from})
			require.NoError(t, err)
			patched, err := jsonpatch.MergePatch(old, p)
			require.NoError(t, err)
			var plan v1beta1.UpgradePlan
			require.NoError(t, json.Unmarshal(patched, &plan))
			require.Equal(t, "42", plan.ResourceVersion)
			want, err := json.Marshal(to)
			require.NoError(t, err)
			gotStatus, err := json.Marshal(plan.Status)
			require.NoError(t, err)
			require.JSONEq(t, string(want), string(gotStatus))
		})
	}
}

// TestStatusPatchSmall: at a thousand nodes, a change of one row is patched in far less than
// the status.
func TestStatusPatchSmall(t *testing.T) {
	t.Parallel()
	from := rowsStatus(1000)
	to := from.DeepCopy()
	to.NodeUpgradeStatuses["node-0500"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeCordoned, Message: "cordoned"}
	p, err := sequencer.StatusPatch("1", from, to)
	require.NoError(t, err)
	whole, err := json.Marshal(to)
	require.NoError(t, err)
	require.Less(t, len(p), 200, "patch %s", p)
	require.Greater(t, len(whole), 50000)
}

// BenchmarkStatusPatch measures the patch of a reconcile that moves a batch of 25 nodes of a
// thousand.
func BenchmarkStatusPatch(b *testing.B) {
	from := rowsStatus(1000)
	to := from.DeepCopy()
	for i := range 25 {
		to.NodeUpgradeStatuses[fmt.Sprintf("node-%04d", i*40)] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeCordoned, Message: "cordoned"}
	}
	for b.Loop() {
		if _, err := sequencer.StatusPatch("1", from, to); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReconcileUnchangedWritesNothing: a reconcile that decides the status the plan holds writes
// nothing: the plan keeps its resourceVersion.
func TestReconcileUnchangedWritesNothing(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("up", func(p *v1beta1.UpgradePlan) { p.Spec.NodeUpgradeOption.PauseNodes = []string{"w-3"} }))
	p := k.run("up", 200, "", 2, 2, nil)
	require.Equal(t, v1beta1.NodeUpgradePaused, p.Status.NodeUpgradeStatuses["w-3"].State)
	for range 3 {
		k.reconcile("up")
		require.Equal(t, p.ResourceVersion, k.plan("up").ResourceVersion, "a reconcile that changed nothing wrote the plan")
	}
}

// TestReconcileWaitsForItsOwnWrite: a plan read from a cache that has not yet seen the
// Reconciler's own last status write is not decided on (that decision's write would be refused
// as a conflict); once the cache has the write, it is.
func TestReconcileWaitsForItsOwnWrite(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("up", nil))
	var stale *v1beta1.UpgradePlan
	c := interceptor.NewClient(k.c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if p, ok := obj.(*v1beta1.UpgradePlan); ok && stale != nil {
				stale.DeepCopyInto(p)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	r, err := sequencer.NewReconciler(c, slog.New(slog.NewTextHandler(t.Output(), nil)), sequencer.WithNamespace(testNS),
		sequencer.WithRepoURL(k.repoURL), sequencer.WithUpgradeImage(testImage), sequencer.WithClock(func() time.Time { return k.now }),
		sequencer.WithConfig(sequencer.Config{StallAfter: time.Hour, HeartbeatTimeout: time.Hour, Poll: time.Second}))
	require.NoError(t, err)
	req := reconcile.Request{NamespacedName: client.ObjectKey{Name: "up"}}
	before := k.plan("up")
	_, err = r.Reconcile(t.Context(), req)
	require.NoError(t, err)
	written := k.plan("up")
	require.NotEqual(t, before.ResourceVersion, written.ResourceVersion, "the first reconcile writes the status")

	stale = before
	res, err := r.Reconcile(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, time.Second, res.RequeueAfter, "a stale read waits, the poll as a fallback")
	require.Equal(t, written.ResourceVersion, k.plan("up").ResourceVersion, "nothing decided on a stale read")

	stale = nil
	_, err = r.Reconcile(t.Context(), req)
	require.NoError(t, err)
	require.NotEqual(t, written.ResourceVersion, k.plan("up").ResourceVersion, "the plan moves on once the cache has the write")
}
