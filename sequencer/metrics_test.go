package sequencer_test

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/forecast"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// gathered returns what reg gathers as sorted "name{labels} value" lines.
func gathered(t *testing.T, reg prometheus.Gatherer) []string {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var lines []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			v := m.GetGauge().GetValue()
			if mf.GetType().String() == "COUNTER" {
				v = m.GetCounter().GetValue()
			}
			key := mf.GetName()
			if len(ls) > 0 {
				key += "{" + strings.Join(ls, ",") + "}"
			}
			lines = append(lines, key+" "+strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	sort.Strings(lines)
	return lines
}

// The plans' metrics tell each plan's phase, since when, its conditions and its nodes by state,
// read afresh at each scrape.
func TestMetricsTellThePlans(t *testing.T) {
	t.Parallel()
	entered := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		plans []v1beta1.UpgradePlan
		want  []string
	}{
		{name: "no plan", want: []string{"upgrade_repo_plan_read_errors_total 0"}},
		{
			name: "a plan preloading, degraded",
			plans: []v1beta1.UpgradePlan{{
				ObjectMeta: metav1.ObjectMeta{Name: "hvst-upgrade"},
				Spec:       v1beta1.UpgradePlanSpec{Version: "v1.6.0"},
				Status: v1beta1.UpgradePlanStatus{
					Phase: v1beta1.PhaseImagePreloading,
					PhaseTransitionTimestamps: []v1beta1.PhaseTransitionTimestamp{
						{Phase: v1beta1.PhaseInitializing, PhaseTransitionTimestamp: metav1.NewTime(entered.Add(-time.Hour))},
						{Phase: v1beta1.PhaseImagePreloading, PhaseTransitionTimestamp: metav1.NewTime(entered)},
					},
					Conditions: []metav1.Condition{
						{Type: v1beta1.ConditionProgressing, Status: metav1.ConditionTrue},
						{Type: v1beta1.ConditionDegraded, Status: metav1.ConditionTrue},
					},
					NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
						"n1": {State: v1beta1.NodeImagePreloaded}, "n2": {State: v1beta1.NodeImagePreloading},
						"n3": {State: v1beta1.NodeImagePreloading}, "n4": {},
					},
				},
			}},
			want: []string{
				`upgrade_repo_plan_condition{condition="Degraded",plan="hvst-upgrade",status="True"} 1`,
				`upgrade_repo_plan_condition{condition="Progressing",plan="hvst-upgrade",status="True"} 1`,
				// The cluster's first plan, no byte preloaded yet and no disk forecast: nothing to go
				// on but the node time assumed, for no node of the cluster.
				`upgrade_repo_plan_estimate_assumed{plan="hvst-upgrade"} 1`,
				`upgrade_repo_plan_estimate_partial{plan="hvst-upgrade"} 1`,
				`upgrade_repo_plan_info{plan="hvst-upgrade",version="v1.6.0"} 1`,
				`upgrade_repo_plan_nodes{plan="hvst-upgrade",state="ImagePreloaded"} 1`,
				`upgrade_repo_plan_nodes{plan="hvst-upgrade",state="ImagePreloading"} 2`,
				`upgrade_repo_plan_nodes{plan="hvst-upgrade",state="Unknown"} 1`,
				`upgrade_repo_plan_phase_remaining_seconds{basis="assumed",phase="NodeUpgrading",plan="hvst-upgrade"} 0`,
				`upgrade_repo_plan_phase_remaining_seconds{basis="unknown",phase="CleaningUp",plan="hvst-upgrade"} 0`,
				`upgrade_repo_plan_phase_remaining_seconds{basis="unknown",phase="ClusterUpgrading",plan="hvst-upgrade"} 0`,
				`upgrade_repo_plan_phase_remaining_seconds{basis="unknown",phase="ImagePreloading",plan="hvst-upgrade"} 0`,
				`upgrade_repo_plan_phase_started_timestamp_seconds{plan="hvst-upgrade"} ` + strconv.FormatFloat(float64(entered.Unix()), 'g', -1, 64),
				`upgrade_repo_plan_phase{phase="ImagePreloading",plan="hvst-upgrade"} 1`,
				"upgrade_repo_plan_read_errors_total 0",
				`upgrade_repo_plan_remaining_seconds{plan="hvst-upgrade"} 0`,
			},
		},
		{
			name: "a new plan and a finished one",
			plans: []v1beta1.UpgradePlan{
				{ObjectMeta: metav1.ObjectMeta{Name: "new"}, Spec: v1beta1.UpgradePlanSpec{Version: "v1.6.0"}},
				{ObjectMeta: metav1.ObjectMeta{Name: "old"}, Spec: v1beta1.UpgradePlanSpec{Version: "v1.5.2"}, Status: v1beta1.UpgradePlanStatus{Phase: v1beta1.PhaseSucceeded}},
			},
			want: []string{
				// old took no phase it recorded: the new plan's estimate has nothing to go on.
				`upgrade_repo_plan_estimate_assumed{plan="new"} 1`,
				`upgrade_repo_plan_estimate_partial{plan="new"} 1`,
				`upgrade_repo_plan_info{plan="new",version="v1.6.0"} 1`,
				`upgrade_repo_plan_info{plan="old",version="v1.5.2"} 1`,
				`upgrade_repo_plan_phase_remaining_seconds{basis="assumed",phase="NodeUpgrading",plan="new"} 0`,
				`upgrade_repo_plan_phase_remaining_seconds{basis="unknown",phase="CleaningUp",plan="new"} 0`,
				`upgrade_repo_plan_phase_remaining_seconds{basis="unknown",phase="ClusterUpgrading",plan="new"} 0`,
				`upgrade_repo_plan_phase_remaining_seconds{basis="unknown",phase="ISODownloading",plan="new"} 0`,
				`upgrade_repo_plan_phase_remaining_seconds{basis="unknown",phase="ImagePreloading",plan="new"} 0`,
				`upgrade_repo_plan_phase_remaining_seconds{basis="unknown",phase="Initializing",plan="new"} 0`,
				`upgrade_repo_plan_phase_remaining_seconds{basis="unknown",phase="MetadataPopulating",plan="new"} 0`,
				`upgrade_repo_plan_phase_remaining_seconds{basis="unknown",phase="RepoCreating",plan="new"} 0`,
				`upgrade_repo_plan_phase{phase="Succeeded",plan="old"} 1`,
				"upgrade_repo_plan_read_errors_total 0",
				`upgrade_repo_plan_remaining_seconds{plan="new"} 0`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := fake.NewClientBuilder().WithScheme(testScheme(t))
			for i := range tc.plans {
				b = b.WithObjects(&tc.plans[i])
			}
			reg := prometheus.NewPedanticRegistry()
			_, err := sequencer.NewMetrics(b.Build(), slog.New(slog.DiscardHandler), reg)
			require.NoError(t, err)
			require.Equal(t, tc.want, gathered(t, reg))
		})
	}
}

// A plan's phase series follows the plan from one scrape to the next; a read that fails is
// counted and leaves the scrape without plan series, not failed.
func TestMetricsMoveWithThePlan(t *testing.T) {
	t.Parallel()
	plan := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1beta1.UpgradePlanSpec{Version: "v1.6.0"},
		Status: v1beta1.UpgradePlanStatus{Phase: v1beta1.PhaseISODownloading}}
	failList := false
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(plan).WithStatusSubresource(plan).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if failList {
				return errors.New("the API server is away")
			}
			return c.List(ctx, list, opts...)
		}}).Build()
	reg := prometheus.NewPedanticRegistry()
	_, err := sequencer.NewMetrics(c, slog.New(slog.DiscardHandler), reg)
	require.NoError(t, err)
	require.Contains(t, gathered(t, reg), `upgrade_repo_plan_phase{phase="ISODownloading",plan="p"} 1`)

	plan.Status.Phase = v1beta1.PhaseFailed
	require.NoError(t, c.Status().Update(t.Context(), plan))
	got := gathered(t, reg)
	require.Contains(t, got, `upgrade_repo_plan_phase{phase="Failed",plan="p"} 1`)
	require.NotContains(t, got, `upgrade_repo_plan_phase{phase="ISODownloading",plan="p"} 1`)

	failList = true
	require.Equal(t, []string{"upgrade_repo_plan_read_errors_total 1"}, gathered(t, reg))
}

// A running plan's time estimate rests on what the cluster's earlier plan took: its phases and
// its node upgrades.
func TestMetricsEstimateFromHistory(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	atp := func(d time.Duration) *metav1.Time { m := at(d); return &m }
	past := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "past"}, Spec: v1beta1.UpgradePlanSpec{Version: "v1.5.2"},
		Status: v1beta1.UpgradePlanStatus{Phase: v1beta1.PhaseSucceeded,
			PhaseTransitionTimestamps: []v1beta1.PhaseTransitionTimestamp{
				{Phase: v1beta1.PhaseNodeUpgrading, PhaseTransitionTimestamp: at(0)},
				{Phase: v1beta1.PhaseCleaningUp, PhaseTransitionTimestamp: at(10 * time.Minute)},
				{Phase: v1beta1.PhaseSucceeded, PhaseTransitionTimestamp: at(12 * time.Minute)},
			},
			NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
				"n1": {State: v1beta1.NodeUpgraded, UpgradeStartTime: atp(0), StateTime: atp(5 * time.Minute)},
			}}}
	next := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "next"}, Spec: v1beta1.UpgradePlanSpec{Version: "v1.6.0"},
		Status: v1beta1.UpgradePlanStatus{Phase: v1beta1.PhaseClusterUpgraded,
			NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{"n1": {}, "n2": {}}}}
	nodes := []client.Object{past, next,
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}}
	reg := prometheus.NewPedanticRegistry()
	_, err := sequencer.NewMetrics(fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(nodes...).Build(), slog.New(slog.DiscardHandler), reg)
	require.NoError(t, err)
	got := gathered(t, reg)
	// Two nodes of 5m each, one at a time, then 2m of cleaning up.
	require.Contains(t, got, `upgrade_repo_plan_remaining_seconds{plan="next"} 720`)
	require.Contains(t, got, `upgrade_repo_plan_estimate_partial{plan="next"} 0`)
	require.Contains(t, got, `upgrade_repo_plan_estimate_assumed{plan="next"} 0`)
	require.Contains(t, got, `upgrade_repo_plan_phase_remaining_seconds{basis="history",phase="NodeUpgrading",plan="next"} 600`)
}

// On the cluster's first plan, the nodes' time rests on the node time assumed, and the metrics
// say so: a remaining time that is not 0 while phases are unknown, a lower bound.
func TestMetricsEstimateFirstPlan(t *testing.T) {
	t.Parallel()
	first := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "first"}, Spec: v1beta1.UpgradePlanSpec{Version: "v1.6.0"},
		Status: v1beta1.UpgradePlanStatus{Phase: v1beta1.PhaseClusterUpgraded,
			NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{"n1": {}, "n2": {}}}}
	objs := []client.Object{first, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}}
	reg := prometheus.NewPedanticRegistry()
	_, err := sequencer.NewMetrics(fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).Build(), slog.New(slog.DiscardHandler), reg)
	require.NoError(t, err)
	got := gathered(t, reg)
	step := forecast.DefaultAssumptions.NodeStep.Seconds()
	require.Contains(t, got, `upgrade_repo_plan_remaining_seconds{plan="first"} `+strconv.FormatFloat(2*step, 'g', -1, 64))
	require.Contains(t, got, `upgrade_repo_plan_estimate_partial{plan="first"} 1`)
	require.Contains(t, got, `upgrade_repo_plan_estimate_assumed{plan="first"} 1`)
	require.Contains(t, got, `upgrade_repo_plan_phase_remaining_seconds{basis="assumed",phase="NodeUpgrading",plan="first"} `+strconv.FormatFloat(2*step, 'g', -1, 64))
	require.Contains(t, got, `upgrade_repo_plan_phase_remaining_seconds{basis="unknown",phase="CleaningUp",plan="first"} 0`)
}
