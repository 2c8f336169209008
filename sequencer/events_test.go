package sequencer_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// TestReconcileEventsTellTheStory drives a plan over a control-plane node and a worker whose
// node step reboots it, through every phase, with a sequencer restarted at each reconcile, and
// checks the events `kubectl describe upgradeplan` shows: each phase begun and ended, each node
// drained, stepped, rebooted and rejoined, and the pre-flight warnings, once each and in order,
// and nothing else.
func TestReconcileEventsTellTheStory(t *testing.T) {
	t.Parallel()
	cp, w := testNode("cp-1", true), testNode("w-1", false)
	cp.Status.NodeInfo.BootID, w.Status.NodeInfo.BootID = "boot-cp-1", "boot-w-1"
	k := newClusterOf(t, newPlan("up", nil), cp, w, testPod("web", "w-1", "ReplicaSet", nil))
	rebooted := false
	p := k.run("up", 300, "", 1, 0, func(*v1beta1.UpgradePlan) {
		// The worker's node step reboots it while its Job runs.
		var jobs batchv1.JobList
		require.NoError(t, k.c.List(t.Context(), &jobs, client.InNamespace(testNS), client.MatchingLabels{sequencer.LabelNode: "w-1"}))
		if len(jobs.Items) == 0 || rebooted {
			return
		}
		var n corev1.Node
		require.NoError(t, k.c.Get(t.Context(), client.ObjectKey{Name: "w-1"}, &n))
		n.Status.NodeInfo.BootID = "boot-w-1-again"
		require.NoError(t, k.c.Status().Update(t.Context(), &n))
		rebooted = true
	})
	require.Equal(t, v1beta1.PhaseSucceeded, p.Status.Phase, "conditions: %+v", p.Status.Conditions)
	close(k.recorder.Events)
	var got []string
	for e := range k.recorder.Events {
		got = append(got, e)
	}
	want := []string{
		"Normal Initializing phase Initializing began",
		// The pre-flight's warnings, once.
		"Warning PreflightWarning the ISO's size is unknown (its origin did not announce it): free space was not checked",
		"Warning PreflightWarning node cp-1: no report from its agent yet, its free space was not checked",
		"Warning PreflightWarning node w-1: no report from its agent yet, its free space was not checked",
		"Warning PreflightWarning ReplicaSet apps/web-owner has one replica, on node w-1: it is down while that node is drained",
		"Normal Initialized phase Initializing ended after 1s",
		"Normal ISODownloading phase ISODownloading began",
		"Normal ISODownloaded phase ISODownloading ended after 1s",
		"Normal RepoCreating phase RepoCreating began",
		"Normal RepoCreated phase RepoCreating ended after 1s",
		"Normal MetadataPopulating phase MetadataPopulating began",
		"Normal MetadataPopulated phase MetadataPopulating ended after 1s",
		"Normal ImagePreloading phase ImagePreloading began",
		"Normal ImagePreloaded phase ImagePreloading ended after 3s",
		"Normal ClusterUpgrading phase ClusterUpgrading began",
		"Normal ClusterUpgraded phase ClusterUpgrading ended after 3s",
		"Normal NodeUpgrading phase NodeUpgrading began",
		"Normal NodeDrained node cp-1 cordoned and drained; its node Job starts",
		"Normal NodeStepped node cp-1: the node step succeeded; uncordoned, waiting for it to rejoin",
		"Normal NodeRejoined node cp-1 rejoined: Ready, schedulable, its agent serving; upgraded",
		"Normal NodeDrained node w-1 cordoned and drained; its node Job starts",
		"Normal NodeRebooted node w-1 rebooted: its boot ID changed",
		"Normal NodeStepped node w-1: the node step succeeded; uncordoned, waiting for it to rejoin",
		"Normal NodeRejoined node w-1 rejoined: Ready, schedulable, its agent serving; upgraded",
		// One reconcile a second: a node's uncordon, rejoin and the next node's cordon, and a
		// cordon and the Job of a node with nothing to drain, each take one reconcile
		// (chain.go), not one a watch event (10s before).
		"Normal NodeUpgraded phase NodeUpgrading ended after 8s",
		"Normal CleaningUp phase CleaningUp began",
		"Normal SoakNothingKept nothing kept for a rollback: no Version named v1.5.2: its ISO is not known",
		"Normal CleanedUp phase CleaningUp ended after 1s",
		"Normal Succeeded the plan succeeded: version v1.6.0 is installed",
	}
	require.Equal(t, want, got)
}
