package planctl_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/planctl"
)

// verbT0 is when the test plans are created.
var verbT0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// verbPlan is plan name, created at verbT0 plus created, in phase, with node cp-b being
// upgraded.
func verbPlan(name string, created time.Duration, phase v1beta1.Phase) *v1beta1.UpgradePlan {
	p := testPlan(phase, map[string]v1beta1.NodeState{"cp-b": v1beta1.NodeKubernetesUpgrading})
	p.Name = name
	p.CreationTimestamp = metav1.NewTime(verbT0.Add(created))
	p.Status.PhaseTransitionTimestamps = []v1beta1.PhaseTransitionTimestamp{{Phase: phase, PhaseTransitionTimestamp: metav1.NewTime(verbT0.Add(created))}}
	return p
}

// verbClient is a cluster of objs and the nodes aa-worker, cp-b and cp-a (control plane).
func verbClient(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	objs = append(objs, testNode("aa-worker", false), testNode("cp-b", true), testNode("cp-a", true))
	return fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).Build()
}

// controlPlan is a plan p in phase whose nodes are in the given states (node -> state), with
// pauseNodes paused.
func controlPlan(phase v1beta1.Phase, states map[string]v1beta1.NodeState, paused ...string) *v1beta1.UpgradePlan {
	p := testPlan(phase, states)
	if len(paused) > 0 {
		p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: paused}
	}
	return p
}

func getPlan(t *testing.T, c client.Reader) *v1beta1.UpgradePlan {
	t.Helper()
	var p v1beta1.UpgradePlan
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: "p"}, &p))
	return &p
}

func pauseNodes(p *v1beta1.UpgradePlan) []string {
	if p.Spec.NodeUpgradeOption == nil {
		return nil
	}
	return p.Spec.NodeUpgradeOption.PauseNodes
}

// nodeArgs are the arguments of upgrade node.
type nodeArgs struct{ node, version, name string }

// The test cluster's nodes are cp-a, cp-b (control plane) and aa-worker (verbClient).
func TestUpgradePauseResume(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		plan       *v1beta1.UpgradePlan
		wantErr    error
		wantPaused []string
		wantOut    []string
		// wantResumed is pauseNodes after resume without --all.
		wantResumed []string
	}{
		{
			name:       "every node not Upgraded, the one in flight said to finish",
			plan:       controlPlan(v1beta1.PhaseNodeUpgrading, map[string]v1beta1.NodeState{"cp-a": v1beta1.NodeUpgraded, "cp-b": v1beta1.NodeKubernetesUpgrading}),
			wantPaused: []string{"aa-worker", "cp-b"},
			wantOut:    []string{"Paused upgradeplan p: aa-worker, cp-b added", "Being upgraded, and finishing: cp-b."},
		},
		{
			name:       "a node paused by hand stays paused on resume, but not with --all",
			plan:       controlPlan(v1beta1.PhaseNodeUpgrading, map[string]v1beta1.NodeState{"cp-a": v1beta1.NodeUpgraded}, "cp-b"),
			wantPaused: []string{"cp-b", "aa-worker"}, wantResumed: []string{"cp-b"},
			wantOut: []string{"Paused upgradeplan p: aa-worker added"},
		},
		{
			name: "before NodeUpgrading: it holds before its first node",
			plan: controlPlan(v1beta1.PhaseImagePreloading, nil), wantPaused: []string{"aa-worker", "cp-a", "cp-b"},
			wantOut: []string{"The plan is ImagePreloading: the phases before NodeUpgrading go on"},
		},
		{
			name: "a finished plan", plan: controlPlan(v1beta1.PhaseSucceeded, nil), wantErr: planctl.ErrState,
		},
		{
			name: "system-upgrade-controller does not read pauseNodes",
			plan: func() *v1beta1.UpgradePlan {
				p := controlPlan(v1beta1.PhaseNodeUpgrading, nil)
				p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{Executor: v1beta1.ExecutorSystemUpgradeController}
				return p
			}(),
			wantErr: planctl.ErrState,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, all := range []bool{false, true} {
				c := verbClient(t, tt.plan.DeepCopy())
				var out bytes.Buffer
				err := planctl.PauseVerb(t.Context(), &out, c, "p")
				if tt.wantErr != nil {
					require.ErrorIs(t, err, tt.wantErr)
					return
				}
				require.NoError(t, err)
				for _, want := range tt.wantOut {
					require.Contains(t, out.String(), want)
				}
				require.Equal(t, tt.wantPaused, pauseNodes(getPlan(t, c)))
				require.NoError(t, planctl.PauseVerb(t.Context(), &out, c, "p"), "a second pause")
				require.Contains(t, out.String(), "Nothing to pause")

				out.Reset()
				require.NoError(t, planctl.ResumeVerb(t.Context(), &out, c, "p", all))
				p := getPlan(t, c)
				if all {
					require.Empty(t, pauseNodes(p), "--all empties pauseNodes")
				} else {
					require.Equal(t, tt.wantResumed, pauseNodes(p), "resume removes what pause added")
				}
				require.NotContains(t, p.Annotations, planctl.PausedAnnotation)
				require.Contains(t, out.String(), "Resumed upgradeplan p")
			}
		})
	}
}

func TestUpgradeRetry(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 6, 1, 12, 0, 0, 5, time.UTC)
	tests := []struct {
		name    string
		plan    *v1beta1.UpgradePlan
		wantErr string
	}{
		{name: "a Failed plan", plan: func() *v1beta1.UpgradePlan {
			p := controlPlan(v1beta1.PhaseFailed, nil)
			p.Status.FailedPhase = v1beta1.PhaseNodeUpgrading
			return p
		}()},
		{name: "a running plan", plan: controlPlan(v1beta1.PhaseNodeUpgrading, nil), wantErr: "upgradeplan p is NodeUpgrading, not Failed"},
		{name: "no such plan", wantErr: "get upgradeplan p"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var objs []client.Object
			if tt.plan != nil {
				objs = append(objs, tt.plan)
			}
			c := verbClient(t, objs...)
			var out bytes.Buffer
			err := planctl.RetryVerb(t.Context(), &out, c, "p", now)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				if tt.plan != nil {
					require.NotContains(t, getPlan(t, c).Annotations, v1beta1.RetryAnnotation)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, "2025-06-01T12:00:00.000000005Z", getPlan(t, c).Annotations[v1beta1.RetryAnnotation])
			require.Contains(t, out.String(), "resumes it from NodeUpgrading")
			// Each retry is a new value.
			require.NoError(t, planctl.RetryVerb(t.Context(), &out, c, "p", now.Add(time.Second)))
			require.Equal(t, "2025-06-01T12:00:01.000000005Z", getPlan(t, c).Annotations[v1beta1.RetryAnnotation])
		})
	}
}

func TestUpgradeAbort(t *testing.T) {
	t.Parallel()
	failedOnNode := func() *v1beta1.UpgradePlan {
		p := controlPlan(v1beta1.PhaseFailed, map[string]v1beta1.NodeState{"cp-a": v1beta1.NodeUpgraded, "cp-b": v1beta1.NodeUpgradeFailed})
		p.Status.FailedPhase = v1beta1.PhaseNodeUpgrading
		return p
	}
	tests := []struct {
		name        string
		plan        *v1beta1.UpgradePlan
		cordoned    []string
		yes         bool
		interactive bool
		answer      string
		wantErr     string
		wantDeleted bool
		wantOut     []string
		wantNotOut  []string
		// wantSchedulable names nodes that must be schedulable after the command.
		wantSchedulable []string
	}{
		{
			name:     "a node stepping: interrupted, stays cordoned, the command to uncordon it",
			plan:     controlPlan(v1beta1.PhaseNodeUpgrading, map[string]v1beta1.NodeState{"cp-a": v1beta1.NodeUpgraded, "cp-b": v1beta1.NodeOSUpgrading}),
			cordoned: []string{"cp-b"}, yes: true, wantDeleted: true,
			wantOut: []string{
				"Deleted upgradeplan p (it was NodeUpgrading). It leaves:",
				"- upgraded, and they stay so: cp-a",
				"- interrupted: the step of cp-b",
				"- cordoned, and they stay so (nothing uncordons them once the plan is gone): cp-b",
				"  once fit to run pods again: kubectl uncordon cp-b",
				"- the Version v1.6.0",
			},
		},
		{
			name: "a failed node stays cordoned", plan: failedOnNode(), cordoned: []string{"cp-b"}, yes: true, wantDeleted: true,
			wantOut: []string{"kubectl uncordon cp-b"}, wantNotOut: []string{"interrupted"},
		},
		{
			name: "the node a bad release failed on first, restored by kubeadm, is uncordoned",
			plan: func() *v1beta1.UpgradePlan {
				p := failedOnNode()
				p.Status.NodeUpgradeStatuses["cp-a"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgradePending}
				s := p.Status.NodeUpgradeStatuses["cp-b"]
				s.Reason = v1beta1.ReasonFirstNodeFailed
				p.Status.NodeUpgradeStatuses["cp-b"] = s
				return p
			}(),
			cordoned: []string{"cp-b"}, yes: true, wantDeleted: true, wantSchedulable: []string{"cp-b"},
			wantOut:    []string{"- nothing on cp-b: the release failed there first and kubeadm restored its manifests; it runs its earlier version and is uncordoned"},
			wantNotOut: []string{"kubectl uncordon"},
		},
		{
			name: "a node the plan uncordoned is not named", plan: failedOnNode(), yes: true, wantDeleted: true,
			wantNotOut: []string{"cordoned"},
		},
		{
			name: "system-upgrade-controller's Plans stay",
			plan: func() *v1beta1.UpgradePlan {
				p := controlPlan(v1beta1.PhaseNodeUpgrading, nil)
				p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{Executor: v1beta1.ExecutorSystemUpgradeController}
				return p
			}(),
			yes: true, wantDeleted: true,
			wantOut: []string{"kubectl -n cattle-system delete plans.upgrade.cattle.io p-server p-agent"},
		},
		{
			name: "the cluster Job", plan: controlPlan(v1beta1.PhaseClusterUpgrading, nil), yes: true, wantDeleted: true,
			wantOut: []string{"- interrupted: the cluster Job"},
		},
		{
			name: "asked and answered yes", plan: failedOnNode(), cordoned: []string{"cp-b"}, interactive: true, answer: "yes\n", wantDeleted: true,
			wantOut: []string{"Deleting upgradeplan p (Failed) leaves:", "Abort? [y/N] ", "kubectl uncordon cp-b"},
		},
		{
			name: "asked and answered no", plan: failedOnNode(), interactive: true, answer: "\n",
			wantErr: "not confirmed: nothing was deleted",
		},
		{name: "no terminal, no --yes", plan: failedOnNode(), wantErr: "give --yes; nothing was deleted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := verbClient(t, tt.plan)
			for _, n := range tt.cordoned {
				var node corev1.Node
				require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: n}, &node))
				node.Spec.Unschedulable = true
				require.NoError(t, c.Update(t.Context(), &node))
			}
			var out bytes.Buffer
			o := planctl.AbortOptions{Plan: "p", Yes: tt.yes, SUCNamespace: "cattle-system", In: strings.NewReader(tt.answer), Interactive: tt.interactive}
			err := planctl.AbortVerb(t.Context(), &out, c, o)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			var p v1beta1.UpgradePlan
			gerr := c.Get(t.Context(), client.ObjectKey{Name: "p"}, &p)
			require.Equal(t, tt.wantDeleted, apierrors.IsNotFound(gerr), "deleted")
			for _, want := range tt.wantOut {
				require.Contains(t, out.String(), want)
			}
			for _, not := range tt.wantNotOut {
				require.NotContains(t, out.String(), not)
			}
			for _, n := range tt.wantSchedulable {
				var node corev1.Node
				require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: n}, &node))
				require.False(t, node.Spec.Unschedulable, "node %s uncordoned", n)
			}
		})
	}
}

// The test cluster's nodes are cp-a, cp-b (control plane) and aa-worker (verbClient).
func TestUpgradeSkip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		plans    []*v1beta1.UpgradePlan
		args     []string
		wantErr  error
		wantSkip []string
		wantOut  []string
	}{
		{
			name: "the plan in flight", plans: []*v1beta1.UpgradePlan{controlPlan(v1beta1.PhaseNodeUpgrading, nil)}, args: []string{"aa-worker"},
			wantSkip: []string{"aa-worker"},
			wantOut:  []string{"Skipped in upgradeplan p: aa-worker added", "aa-worker stays at kubelet v1.32.7; once it is back: upgrade-repo upgrade node aa-worker"},
		},
		{
			name: "the plan named", plans: []*v1beta1.UpgradePlan{controlPlan(v1beta1.PhaseNodeUpgrading, nil)}, args: []string{"p", "aa-worker"},
			wantSkip: []string{"aa-worker"},
		},
		{
			name: "twice is once", plans: []*v1beta1.UpgradePlan{func() *v1beta1.UpgradePlan {
				p := controlPlan(v1beta1.PhaseNodeUpgrading, nil)
				p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{SkipNodes: []string{"aa-worker"}}
				return p
			}()}, args: []string{"aa-worker"},
			wantSkip: []string{"aa-worker"}, wantOut: []string{"Already skipped in upgradeplan p: aa-worker."},
		},
		{
			name: "a node being stepped", plans: []*v1beta1.UpgradePlan{controlPlan(v1beta1.PhaseNodeUpgrading, map[string]v1beta1.NodeState{"aa-worker": v1beta1.NodeOSUpgrading})},
			args: []string{"aa-worker"}, wantSkip: []string{"aa-worker"}, wantOut: []string{"the node is skipped once it ends"},
		},
		{
			name: "a control-plane node", plans: []*v1beta1.UpgradePlan{controlPlan(v1beta1.PhaseNodeUpgrading, nil)}, args: []string{"aa-worker", "cp-b"},
			wantErr: planctl.ErrInvalid, wantOut: []string{"cp-b is a control-plane node (label node-role.kubernetes.io/control-plane)"},
		},
		{
			name: "an unknown node", plans: []*v1beta1.UpgradePlan{controlPlan(v1beta1.PhaseNodeUpgrading, nil)}, args: []string{"nope"},
			wantErr: planctl.ErrInvalid,
		},
		{
			name: "an upgraded node", plans: []*v1beta1.UpgradePlan{controlPlan(v1beta1.PhaseNodeUpgrading, map[string]v1beta1.NodeState{"aa-worker": v1beta1.NodeUpgraded})},
			args: []string{"aa-worker"}, wantErr: planctl.ErrInvalid,
		},
		{
			name: "a finished plan", plans: []*v1beta1.UpgradePlan{controlPlan(v1beta1.PhaseSucceeded, nil)}, args: []string{"p", "aa-worker"},
			wantErr: planctl.ErrState,
		},
		{name: "no plan in flight", args: []string{"aa-worker"}, wantErr: planctl.ErrState},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var objs []client.Object
			for _, p := range tt.plans {
				objs = append(objs, p)
			}
			c := verbClient(t, objs...)
			var out bytes.Buffer
			err := planctl.SkipVerb(t.Context(), &out, c, tt.args)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				for _, want := range tt.wantOut {
					require.ErrorContains(t, err, want)
				}
				if len(tt.plans) > 0 {
					require.Nil(t, getPlan(t, c).Spec.NodeUpgradeOption, "nothing changed")
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantSkip, getPlan(t, c).Spec.NodeUpgradeOption.SkipNodes)
			for _, want := range tt.wantOut {
				require.Contains(t, out.String(), want)
			}
		})
	}
}

func TestUpgradeNode(t *testing.T) {
	t.Parallel()
	version := func(name string) *v1beta1.Version { return &v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	succeeded := func(name, version string, at time.Duration) *v1beta1.UpgradePlan {
		p := verbPlan(name, at, v1beta1.PhaseSucceeded)
		p.Spec.Version = version
		return p
	}
	nodePlan := func(name, version, node string, phase v1beta1.Phase) *v1beta1.UpgradePlan {
		p := verbPlan(name, time.Hour, phase)
		p.Spec.Version = version
		p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{Nodes: []string{node}}
		return p
	}
	tests := []struct {
		name     string
		objs     []client.Object
		o        nodeArgs
		wantErr  error
		wantPlan string
		wantOut  []string
	}{
		{
			name: "the Version of the plan that Succeeded last",
			objs: []client.Object{succeeded("old", "v1.5.0", 0), succeeded("new", "v1.6.0", time.Minute), version("v1.5.0"), version("v1.6.0")},
			o:    nodeArgs{node: "aa-worker"}, wantPlan: "v1-6-0-aa-worker",
			wantOut: []string{"Created upgradeplan v1-6-0-aa-worker: node aa-worker alone to version v1.6.0 (the Version of new, the plan that Succeeded last)."},
		},
		{
			name: "--version and --name", objs: []client.Object{version("v1.6.0")},
			o: nodeArgs{node: "aa-worker", version: "v1.6.0", name: "fix-worker"}, wantPlan: "fix-worker",
		},
		{
			name: "one in flight is reported",
			objs: []client.Object{succeeded("new", "v1.6.0", 0), version("v1.6.0"), nodePlan("mine", "v1.6.0", "aa-worker", v1beta1.PhaseNodeUpgrading)},
			o:    nodeArgs{node: "aa-worker"}, wantPlan: "mine",
			wantOut: []string{"Upgradeplan mine upgrades node aa-worker alone to version v1.6.0 already (NodeUpgrading): nothing created."},
		},
		{
			name: "another plan in flight is waited for",
			objs: []client.Object{version("v1.6.0"), verbPlan("other", 0, v1beta1.PhaseImagePreloading)},
			o:    nodeArgs{node: "aa-worker", version: "v1.6.0"}, wantPlan: "v1-6-0-aa-worker",
			wantOut: []string{"In flight: other; the sequencer starts v1-6-0-aa-worker once they are finished."},
		},
		{
			name: "the name taken by another target", objs: []client.Object{version("v1.6.0"), nodePlan("v1-6-0-aa-worker", "v1.6.0", "cp-a", v1beta1.PhaseNodeUpgrading)},
			o: nodeArgs{node: "aa-worker", version: "v1.6.0"}, wantErr: planctl.ErrConflict,
		},
		{
			name: "failed", objs: []client.Object{version("v1.6.0"), nodePlan("v1-6-0-aa-worker", "v1.6.0", "aa-worker", v1beta1.PhaseFailed)},
			o: nodeArgs{node: "aa-worker", version: "v1.6.0"}, wantErr: planctl.ErrState,
		},
		{name: "no plan Succeeded", o: nodeArgs{node: "aa-worker"}, wantErr: planctl.ErrInvalid},
		{name: "no such Version", o: nodeArgs{node: "aa-worker", version: "v9"}, wantErr: planctl.ErrInvalid},
		{name: "no such node", objs: []client.Object{version("v1.6.0")}, o: nodeArgs{node: "gone", version: "v1.6.0"}, wantErr: planctl.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := verbClient(t, tt.objs...)
			var out bytes.Buffer
			err := planctl.NodeVerb(t.Context(), &out, c, tt.o.node, tt.o.version, tt.o.name)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			var p v1beta1.UpgradePlan
			require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: tt.wantPlan}, &p))
			require.Equal(t, []string{tt.o.node}, p.Spec.NodeUpgradeOption.Nodes)
			for _, want := range tt.wantOut {
				require.Contains(t, out.String(), want)
			}
			// Twice is once.
			var again bytes.Buffer
			require.NoError(t, planctl.NodeVerb(t.Context(), &again, c, tt.o.node, tt.o.version, tt.o.name))
			require.Contains(t, again.String(), "Upgradeplan "+tt.wantPlan+" upgrades node")
			var plans v1beta1.UpgradePlanList
			require.NoError(t, c.List(t.Context(), &plans))
			n := 0
			for _, p := range plans.Items {
				if p.Spec.NodeUpgradeOption != nil && len(p.Spec.NodeUpgradeOption.Nodes) > 0 {
					n++
				}
			}
			require.Equal(t, 1, n)
		})
	}
}
