package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/planctl"
)

// controlPlan is a plan in phase whose nodes are in the given states (node -> state), with
// pauseNodes paused.
func controlPlan(phase v1beta1.Phase, states map[string]v1beta1.NodeState, paused ...string) *v1beta1.UpgradePlan {
	p := upgradeTestPlan("p", 0, phase)
	p.Spec.Version = "v1.6.0"
	p.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
	for n, s := range states {
		p.Status.NodeUpgradeStatuses[n] = v1beta1.NodeUpgradeStatus{State: s}
	}
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

// The test cluster's nodes are cp-a, cp-b (control plane) and aa-worker (upgradeTestClient).
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
				c := upgradeTestClient(t, tt.plan.DeepCopy())
				var out bytes.Buffer
				err := upgradePause(t.Context(), &out, c, "p")
				if tt.wantErr != nil {
					require.ErrorIs(t, err, tt.wantErr)
					return
				}
				require.NoError(t, err)
				for _, want := range tt.wantOut {
					require.Contains(t, out.String(), want)
				}
				require.Equal(t, tt.wantPaused, pauseNodes(getPlan(t, c)))
				require.NoError(t, upgradePause(t.Context(), &out, c, "p"), "a second pause")
				require.Contains(t, out.String(), "Nothing to pause")

				out.Reset()
				require.NoError(t, upgradeResume(t.Context(), &out, c, "p", all))
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
			c := upgradeTestClient(t, objs...)
			var out bytes.Buffer
			err := upgradeRetry(t.Context(), &out, c, "p", now)
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
			require.NoError(t, upgradeRetry(t.Context(), &out, c, "p", now.Add(time.Second)))
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
			c := upgradeTestClient(t, tt.plan)
			for _, n := range tt.cordoned {
				var node corev1.Node
				require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: n}, &node))
				node.Spec.Unschedulable = true
				require.NoError(t, c.Update(t.Context(), &node))
			}
			var out bytes.Buffer
			o := upgradeAbortOptions{planVerbOptions: planVerbOptions{plan: "p"}, yes: tt.yes, sucNamespace: "cattle-system"}
			err := upgradeAbort(t.Context(), &out, c, o, strings.NewReader(tt.answer), tt.interactive)
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

func TestUpgradeControlUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"pause"}, {"resume", "a", "b"}, {"retry", "--nope", "p"}, {"abort"}, {"apply"}, {"apply", "--iso-url", "https://x/v1.6.0.iso", "extra"},
		{"apply", "--iso-url", "https://x/v1.6.0.iso", "--timeout", "-1s"}, {"status", "--timeout", "-1s"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			a, _, _ := upgradeTestApp()
			require.ErrorIs(t, runUpgrade(t.Context(), a, args), errUsage)
		})
	}
}
