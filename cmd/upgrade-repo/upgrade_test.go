package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
	"github.com/upgrade-repo/upgrade-repo/planview"
)

var upgradeT0 = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)

func upgradeTestNode(name, kubelet string, controlPlane bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if controlPlane {
		n.Labels["node-role.kubernetes.io/control-plane"] = ""
	}
	n.Status.NodeInfo.KubeletVersion = kubelet
	return n
}

func upgradeTestPlan(name string, created time.Duration, phase v1beta1.Phase) *v1beta1.UpgradePlan {
	return &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(upgradeT0.Add(created))},
		Spec:       v1beta1.UpgradePlanSpec{Version: "v1.6.0"},
		Status: v1beta1.UpgradePlanStatus{
			Phase:                     phase,
			PhaseTransitionTimestamps: []v1beta1.PhaseTransitionTimestamp{{Phase: phase, PhaseTransitionTimestamp: metav1.NewTime(upgradeT0.Add(created))}},
			NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
				"cp-b": {State: v1beta1.NodeKubernetesUpgrading, KubeletVersionBefore: "v1.32.7", KubeletVersion: "v1.32.7"},
			},
		},
	}
}

// upgradeTestClient is a fake cluster: control-plane nodes cp-a and cp-b, worker aa-worker (first
// by name, last in the upgrade order), and objs.
func upgradeTestClient(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	s, err := kubeclient.Scheme()
	require.NoError(t, err)
	objs = append(objs, upgradeTestNode("aa-worker", "v1.32.7", false), upgradeTestNode("cp-b", "v1.32.7", true),
		upgradeTestNode("cp-a", "v1.32.7", true))
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
}

func upgradeTestApp() (*app, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	return &app{stdout: &stdout, stderr: &stderr, log: slog.New(slog.NewTextHandler(&stderr, nil))}, &stdout, &stderr
}

func upgradeClock() time.Time { return upgradeT0.Add(time.Hour) }

func TestUpgradeStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		objs    []client.Object
		opts    upgradeStatusOptions
		want    string // the plan shown
		wantErr string
	}{
		{
			name: "named plan",
			objs: []client.Object{upgradeTestPlan("a", 0, v1beta1.PhaseSucceeded), upgradeTestPlan("b", time.Minute, v1beta1.PhaseNodeUpgrading)},
			opts: upgradeStatusOptions{plan: "a", output: "json"}, want: "a",
		},
		{
			name: "no name: the running plan over a newer finished one",
			objs: []client.Object{
				upgradeTestPlan("old", 0, v1beta1.PhaseSucceeded), upgradeTestPlan("running", time.Minute, v1beta1.PhaseNodeUpgrading),
				upgradeTestPlan("failed", 2*time.Minute, v1beta1.PhaseFailed),
			},
			opts: upgradeStatusOptions{output: "json"}, want: "running",
		},
		{
			name: "no name, all finished: the newest",
			objs: []client.Object{upgradeTestPlan("old", 0, v1beta1.PhaseSucceeded), upgradeTestPlan("new", time.Minute, v1beta1.PhaseFailed)},
			opts: upgradeStatusOptions{output: "json"}, want: "new",
		},
		{name: "no plan", opts: upgradeStatusOptions{output: "json"}, wantErr: "no UpgradePlan in the cluster"},
		{name: "unknown plan", opts: upgradeStatusOptions{plan: "nope", output: "json"}, wantErr: "get upgradeplan nope"},
		{
			// Without -w a failed plan is shown with exit status 0.
			name: "failed plan, no watch",
			objs: []client.Object{upgradeTestPlan("f", 0, v1beta1.PhaseFailed)},
			opts: upgradeStatusOptions{plan: "f", output: "json"}, want: "f",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, stdout, _ := upgradeTestApp()
			err := upgradeStatus(t.Context(), a, upgradeTestClient(t, tt.objs...), tt.opts, upgradeClock)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			var got planview.Plan
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &got))
			require.Equal(t, tt.want, got.Name)
			var order, states []string
			for _, n := range got.Nodes {
				order, states = append(order, n.Name), append(states, n.State)
			}
			require.Equal(t, []string{"cp-a", "cp-b", "aa-worker"}, order, "control-plane nodes first, then by name")
			require.Equal(t, []string{planview.StatePending, string(v1beta1.NodeKubernetesUpgrading), planview.StatePending}, states)
			require.Equal(t, "v1.32.7", got.Nodes[0].KubeletVersion, "a pending node shows its kubelet's version")
		})
	}
}

func TestUpgradeStatusText(t *testing.T) {
	t.Parallel()
	a, stdout, _ := upgradeTestApp()
	// An earlier plan took 20m to upgrade two nodes (10m each) and 2m to clean up.
	earlier := upgradeTestPlan("earlier", -48*time.Hour, v1beta1.PhaseSucceeded)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(upgradeT0.Add(-48*time.Hour + d)) }
	atp := func(d time.Duration) *metav1.Time { m := at(d); return &m }
	earlier.Status.PhaseTransitionTimestamps = []v1beta1.PhaseTransitionTimestamp{{Phase: v1beta1.PhaseNodeUpgrading, PhaseTransitionTimestamp: at(0)},
		{Phase: v1beta1.PhaseCleaningUp, PhaseTransitionTimestamp: at(20 * time.Minute)}, {Phase: v1beta1.PhaseSucceeded, PhaseTransitionTimestamp: at(22 * time.Minute)}}
	earlier.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{
		"cp-a": {State: v1beta1.NodeUpgraded, UpgradeStartTime: atp(0), StateTime: atp(10 * time.Minute)},
		"cp-b": {State: v1beta1.NodeUpgraded, UpgradeStartTime: atp(10 * time.Minute), StateTime: atp(20 * time.Minute)}}
	c := upgradeTestClient(t, upgradeTestPlan("p", 0, v1beta1.PhaseNodeUpgrading), earlier)
	require.NoError(t, upgradeStatus(t.Context(), a, c, upgradeStatusOptions{plan: "p", output: "text"}, upgradeClock))
	// cp-b's upgrade (10m as before), then cleaning up (2m).
	want := `Plan:      p
Version:   unknown -> v1.6.0
Phase:     NodeUpgrading for 60m, 60m since the plan started
Ends:      in about 12m0s, near 11:12 UTC; from history: NodeUpgrading, CleaningUp

NODE        STATE                 SINCE   KUBELET   TARGET   PRELOAD   MESSAGE
cp-a        Pending               -       v1.32.7   -        -
cp-b        KubernetesUpgrading   -       v1.32.7   -        -
aa-worker   Pending               -       v1.32.7   -        -
`
	require.Equal(t, want, stdout.String())
}

func TestUpgradeStatusYAML(t *testing.T) {
	t.Parallel()
	a, stdout, _ := upgradeTestApp()
	c := upgradeTestClient(t, upgradeTestPlan("p", 0, v1beta1.PhaseNodeUpgrading))
	require.NoError(t, upgradeStatus(t.Context(), a, c, upgradeStatusOptions{plan: "p", output: "yaml"}, upgradeClock))
	require.True(t, strings.HasPrefix(stdout.String(), "---\n"), "one YAML document")
	var got planview.Plan
	require.NoError(t, yaml.Unmarshal(stdout.Bytes(), &got))
	require.Equal(t, "p", got.Name)
	require.Len(t, got.Nodes, 3, "the same fields as -o json")
}

func TestUpgradeStatusUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
	}{
		{name: "no verb"},
		{name: "unknown verb", args: []string{"apply-now"}},
		{name: "two plans", args: []string{"status", "a", "-o", "json", "b"}},
		{name: "bad output", args: []string{"status", "a", "-o", "xml"}},
		{name: "unknown flag", args: []string{"status", "--nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, _, _ := upgradeTestApp()
			require.ErrorIs(t, runUpgrade(t.Context(), a, tt.args), errUsage)
		})
	}
}

// watchSignal tells when the command's watch is open, so that the test changes the plan only
// then (the fake client's watch sees only later changes).
type watchSignal struct {
	client.WithWatch
	once   sync.Once
	opened chan struct{}
}

func (w *watchSignal) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	wi, err := w.WithWatch.Watch(ctx, list, opts...)
	w.once.Do(func() { close(w.opened) })
	return wi, err
}

func TestUpgradeStatusWatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		output  string
		end     func(p *v1beta1.UpgradePlan) // the last change, after which the command returns
		wantErr string
		tables  int
		// lines are what a text watch writes after its table, one line per change.
		lines []string
	}{
		{
			name: "succeeded", output: "text", tables: 1,
			end: func(p *v1beta1.UpgradePlan) { p.Status.Phase = v1beta1.PhaseSucceeded },
			lines: []string{
				"11:00:00 phase ImagePreloading -> NodeUpgrading, 60m since the plan started",
				"11:00:00 phase NodeUpgrading -> Succeeded took 60m",
			},
		},
		{
			name: "failed: exit status 1 with the reason", output: "text", tables: 1,
			lines: []string{
				"11:00:00 phase ImagePreloading -> NodeUpgrading, 60m since the plan started",
				"11:00:00 phase NodeUpgrading -> Failed in NodeUpgrading after 60m",
				"11:00:00 degraded: NodeUpgradeFailed: node cp-b: job p-node-cp-b failed",
			},
			end: func(p *v1beta1.UpgradePlan) {
				p.Status.Phase, p.Status.FailedPhase = v1beta1.PhaseFailed, v1beta1.PhaseNodeUpgrading
				p.Status.Conditions = []metav1.Condition{{
					Type: v1beta1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: "NodeUpgradeFailed",
					Message: "node cp-b: job p-node-cp-b failed", LastTransitionTime: metav1.NewTime(upgradeT0),
				}}
			},
			wantErr: "upgradeplan p failed in NodeUpgrading: NodeUpgradeFailed: node cp-b: job p-node-cp-b failed",
		},
		{
			// JSON prints every change of the plan, the one the text does not show too.
			name: "succeeded, json", output: "json", tables: 4,
			end: func(p *v1beta1.UpgradePlan) { p.Status.Phase = v1beta1.PhaseSucceeded },
		},
		{
			name: "deleted", output: "text", tables: 1, wantErr: "upgradeplan p was deleted",
			lines: []string{"11:00:00 phase ImagePreloading -> NodeUpgrading, 60m since the plan started"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &watchSignal{WithWatch: upgradeTestClient(t, upgradeTestPlan("p", 0, v1beta1.PhaseImagePreloading)), opened: make(chan struct{})}
			a, stdout, _ := upgradeTestApp()
			done := make(chan error, 1)
			go func() {
				done <- upgradeStatus(t.Context(), a, c, upgradeStatusOptions{plan: "p", output: tt.output, watch: true}, upgradeClock)
			}()
			<-c.opened
			change := func(f func(p *v1beta1.UpgradePlan)) {
				var p v1beta1.UpgradePlan
				require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: "p"}, &p))
				f(&p)
				require.NoError(t, c.Update(t.Context(), &p))
			}
			change(func(p *v1beta1.UpgradePlan) { p.Status.Phase = v1beta1.PhaseNodeUpgrading })
			// Nothing the table shows: printed in JSON only.
			change(func(p *v1beta1.UpgradePlan) {
				ns := p.Status.NodeUpgradeStatuses["cp-b"]
				ns.LastProgressTime = &metav1.Time{Time: upgradeT0}
				p.Status.NodeUpgradeStatuses["cp-b"] = ns
			})
			if tt.end != nil {
				change(tt.end)
			} else {
				require.NoError(t, c.Delete(t.Context(), &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "p"}}))
			}
			err := <-done
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				require.False(t, apierrors.IsNotFound(err))
			} else {
				require.NoError(t, err)
			}
			key := "Plan:"
			if tt.output == "json" {
				key = `"name": "p"`
			}
			require.Equal(t, tt.tables, strings.Count(stdout.String(), key), stdout.String())
			if tt.output == "text" {
				_, after, _ := strings.Cut(stdout.String(), "aa-worker")
				_, after, _ = strings.Cut(after, "\n")
				require.Equal(t, tt.lines, strings.Split(strings.TrimSuffix(after, "\n"), "\n"), stdout.String())
			}
		})
	}
}

func TestUpgradeStatusEstimate(t *testing.T) {
	t.Parallel()
	const mib = int64(1) << 20
	// preloading is plan p 1m into ImagePreloading: cp-a read its 100 MiB, cp-b 20 MiB of the
	// archive it opened, aa-worker nothing; the pre-flight said each reads 100 MiB.
	preloading := func() *v1beta1.UpgradePlan {
		p := upgradeTestPlan("p", time.Hour-time.Minute, v1beta1.PhaseImagePreloading)
		p.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{
			"cp-a":      {State: v1beta1.NodeImagePreloaded, BytesDone: 100 * mib, BytesTotal: 100 * mib},
			"cp-b":      {State: v1beta1.NodeImagePreloading, BytesDone: 20 * mib, BytesTotal: 30 * mib},
			"aa-worker": {State: v1beta1.NodeImagePreloadPending},
		}
		for _, n := range []string{"cp-a", "cp-b", "aa-worker"} {
			p.Status.DiskForecast = append(p.Status.DiskForecast, v1beta1.NodeDiskForecast{Node: n, ImagesStoredBytes: 200 * mib, ImagesArchiveBytes: 100 * mib})
		}
		return p
	}
	// earlier took 2m in ClusterUpgrading and 10m a node.
	earlier := upgradeTestPlan("earlier", -48*time.Hour, v1beta1.PhaseSucceeded)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(upgradeT0.Add(-48*time.Hour + d)) }
	atp := func(d time.Duration) *metav1.Time { m := at(d); return &m }
	earlier.Status.PhaseTransitionTimestamps = []v1beta1.PhaseTransitionTimestamp{
		{Phase: v1beta1.PhaseImagePreloading, PhaseTransitionTimestamp: at(0)}, {Phase: v1beta1.PhaseClusterUpgrading, PhaseTransitionTimestamp: at(5 * time.Minute)},
		{Phase: v1beta1.PhaseNodeUpgrading, PhaseTransitionTimestamp: at(7 * time.Minute)}, {Phase: v1beta1.PhaseCleaningUp, PhaseTransitionTimestamp: at(37 * time.Minute)},
		{Phase: v1beta1.PhaseSucceeded, PhaseTransitionTimestamp: at(38 * time.Minute)}}
	earlier.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{
		"cp-a": {State: v1beta1.NodeUpgraded, UpgradeStartTime: atp(7 * time.Minute), StateTime: atp(17 * time.Minute)}}
	tests := []struct {
		name    string
		objs    []client.Object
		first   bool
		partial bool
		assumed bool
		bases   []string
		line    string
	}{
		{name: "a first plan in ImagePreloading: the rate measured, the nodes assumed, the rest unknown", objs: []client.Object{preloading()},
			first: true, partial: true, assumed: true, bases: []string{"rate", "unknown", "assumed", "unknown"},
			// 120 MiB in 1m, 300 MiB in all: 90s; two control planes at 4m, a worker at 1m.
			line: "in at least 10m30s, near 11:10 UTC at the earliest; measured: ImagePreloading at 2.0 MiB/s; " +
				"assumed: NodeUpgrading (4m0s for each control plane, 1m0s for each other node; control planes one at a time, the others 1 at a time); " +
				"nothing to go on yet for ClusterUpgrading, CleaningUp; a first estimate: the cluster recorded no earlier plan"},
		{name: "a second plan in ImagePreloading: the rate measured, the rest from history", objs: []client.Object{preloading(), earlier},
			assumed: true, bases: []string{"rate", "history", "assumed", "history"},
			// 90s, 2m, two control planes at 10m as the earlier one, the worker (no earlier
			// worker) at the 1m assumed, 1m.
			line: "in about 25m30s, near 11:25 UTC; measured: ImagePreloading at 2.0 MiB/s; from history: ClusterUpgrading, CleaningUp; " +
				"assumed: NodeUpgrading (1m0s for each other node (control planes: 10m0s from history); control planes one at a time, the others 1 at a time)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, stdout, _ := upgradeTestApp()
			require.NoError(t, upgradeStatus(t.Context(), a, upgradeTestClient(t, tt.objs...), upgradeStatusOptions{plan: "p", output: "json"}, upgradeClock))
			var got planview.Plan
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &got))
			e := got.Estimate
			require.NotNil(t, e)
			require.Equal(t, tt.first, e.First)
			require.Equal(t, tt.partial, e.Partial)
			require.Equal(t, tt.assumed, e.Assumed)
			var bases []string
			for _, ph := range e.Phases {
				bases = append(bases, ph.Basis)
			}
			require.Equal(t, tt.bases, bases)
			require.Equal(t, "ImagePreloading", e.Phases[0].Phase)
			require.Equal(t, int64(90), e.Phases[0].RemainingSeconds, "180 MiB left at 2 MiB/s")
			require.Equal(t, 180*mib, e.Phases[0].BytesLeft)
			require.Equal(t, tt.line, e.Line())
		})
	}
}
