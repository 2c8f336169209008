package sequencer_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
	"github.com/upgrade-repo/upgrade-repo/sequencer/report"
)

// Node roles of the formations, as Harvester labels and taints them.
const (
	roleManagement = "management"
	roleWitness    = "witness"
	roleWorker     = "worker"
)

// formationNode builds a node of a role: management nodes carry the control-plane, etcd and
// master labels; a witness carries etcd and witness labels and the etcd NoExecute taint.
func formationNode(name, role string) *corev1.Node {
	n := testNode(name, false)
	switch role {
	case roleManagement:
		for _, l := range []string{"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/etcd", "node-role.kubernetes.io/master"} {
			n.Labels[l] = "true"
		}
	case roleWitness:
		n.Labels["node-role.kubernetes.io/etcd"] = "true"
		n.Labels["node-role.harvesterhci.io/witness"] = "true"
		n.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/etcd", Value: "true", Effect: corev1.TaintEffectNoExecute}}
	}
	return n
}

// ownedPod is a running pod in ns owned by a controller of kind.
func ownedPod(ns, name, node, kind string, podLabels map[string]string) *corev1.Pod {
	p := testPod(name, node, kind, nil)
	p.Namespace = ns
	p.Labels = podLabels
	p.OwnerReferences[0].UID = types.UID("uid-" + ns + "-" + name)
	return p
}

// sequencerLabels are the labels of the sequencer's replicas, which drains must leave.
var sequencerLabels = map[string]string{"app.kubernetes.io/instance": "upgrade-repo", "app.kubernetes.io/component": "sequencer"}

// formation is a cluster shape: node names and roles, in the order they must be upgraded.
type formation struct {
	name  string
	nodes [][2]string
}

var formations = []formation{
	{"single", [][2]string{{"m-1", roleManagement}}},
	{"two", [][2]string{{"m-1", roleManagement}, {"w-1", roleWorker}}},
	{"three", [][2]string{{"m-1", roleManagement}, {"m-2", roleManagement}, {"m-3", roleManagement}}},
	{"witness", [][2]string{{"m-1", roleManagement}, {"m-2", roleManagement}, {"x-witness", roleWitness}}},
	{"four", [][2]string{{"m-1", roleManagement}, {"m-2", roleManagement}, {"m-3", roleManagement}, {"w-1", roleWorker}}},
}

// objects are the formation's nodes and pods: both sequencer replicas and CoreDNS on the first
// node (the worst case: draining it would strand the upgrade), a workload on every node that
// takes workloads, and an agent on every node.
func (f formation) objects() []client.Object {
	var objs []client.Object
	first := f.nodes[0][0]
	for i, n := range f.nodes {
		objs = append(objs, formationNode(n[0], n[1]),
			ownedPod(testNS, "agent-"+n[0], n[0], "DaemonSet", map[string]string{"app.kubernetes.io/component": "agent"}))
		if n[1] != roleWitness {
			objs = append(objs, ownedPod("apps", fmt.Sprintf("web-%d", i), n[0], "ReplicaSet", nil))
		}
	}
	objs = append(objs,
		ownedPod(testNS, "sequencer-a", first, "ReplicaSet", sequencerLabels),
		ownedPod(testNS, "sequencer-b", first, "ReplicaSet", sequencerLabels),
		ownedPod("kube-system", "coredns-a", first, "ReplicaSet", map[string]string{"k8s-app": "kube-dns"}),
	)
	return objs
}

// TestFormations runs a whole plan on each cluster shape and checks who is drained when: the
// management nodes (the witness among them) one at a time by name, then the workers; a node is
// drained only while it is the one being upgraded; the sequencer's replicas are never evicted,
// although they run on the first node drained; every node is schedulable at the end.
func TestFormations(t *testing.T) {
	t.Parallel()
	for _, f := range formations {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			k := newClusterOf(t, newPlan("up", func(p *v1beta1.UpgradePlan) { p.Spec.NodeUpgradeOption = nil }), f.objects()...)
			k.opts = []sequencer.Option{sequencer.WithKeepPods(labels.SelectorFromSet(sequencerLabels))}
			podsOn := func() map[string]string {
				var pods corev1.PodList
				require.NoError(t, k.c.List(t.Context(), &pods))
				out := map[string]string{}
				for _, p := range pods.Items {
					out[p.Namespace+"/"+p.Name] = p.Spec.NodeName
				}
				return out
			}
			before := podsOn()
			var jobOrder []string
			evictedWhile := map[string]string{}
			last := before
			p := k.run("up", 400, "", 1, 2, func(p *v1beta1.UpgradePlan) {
				var jobs batchv1.JobList
				require.NoError(t, k.c.List(t.Context(), &jobs, client.InNamespace(testNS), client.MatchingLabels{sequencer.LabelComponent: "node"}))
				for _, j := range jobs.Items {
					if n := j.Labels[sequencer.LabelNode]; !slices.Contains(jobOrder, n) {
						jobOrder = append(jobOrder, n)
					}
				}
				now := podsOn()
				for pod, node := range last {
					if _, ok := now[pod]; !ok {
						evictedWhile[pod] = node + ":" + string(p.Status.NodeUpgradeStatuses[node].State)
					}
				}
				last = now
			})
			require.Equal(t, v1beta1.PhaseSucceeded, p.Status.Phase, "conditions: %+v", p.Status.Conditions)

			var want []string
			for _, n := range f.nodes {
				want = append(want, n[0])
			}
			require.Equal(t, want, jobOrder, "node steps in order: management nodes and the witness one at a time, then workers")
			for pod, node := range before {
				switch pod {
				case testNS + "/sequencer-a", testNS + "/sequencer-b", testNS + "/agent-" + node:
					require.NotContains(t, evictedWhile, pod, "pod %s must never be evicted", pod)
				default:
					require.Equal(t, node+":"+string(v1beta1.NodeCordoned), evictedWhile[pod], "pod %s evicted while its node %s was being drained", pod, node)
				}
			}
			var nodes corev1.NodeList
			require.NoError(t, k.c.List(t.Context(), &nodes))
			for _, n := range nodes.Items {
				require.False(t, n.Spec.Unschedulable, "node %s schedulable at the end", n.Name)
				require.Equal(t, v1beta1.NodeUpgraded, p.Status.NodeUpgradeStatuses[n.Name].State)
			}
		})
	}
}

// TestRebootDuringNodeStep plays node steps that reboot their node: the Job's first pod dies
// with the reboot, the node goes NotReady and its agent silent, then the node comes back and the
// Job's next pod finds the work done and succeeds. Each node's Job is created once, the plan
// neither fails nor starts the next node before the rebooted one is Ready with its agent
// reporting again, and the sequencer (a new one every reconcile) resumes from the status.
func TestRebootDuringNodeStep(t *testing.T) {
	t.Parallel()
	for _, f := range []formation{formations[0], formations[2], formations[4]} {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			k := newClusterOf(t, newPlan("up", func(p *v1beta1.UpgradePlan) { p.Spec.NodeUpgradeOption = nil }), f.objects()...)
			k.opts = []sequencer.Option{sequencer.WithKeepPods(labels.SelectorFromSet(sequencerLabels))}
			ctx := t.Context()
			setReady := func(node string, ready bool) {
				var n corev1.Node
				require.NoError(t, k.c.Get(ctx, client.ObjectKey{Name: node}, &n))
				st := corev1.ConditionTrue
				if !ready {
					st = corev1.ConditionFalse
				}
				n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
				require.NoError(t, k.c.Status().Update(ctx, &n))
			}
			heartbeat := func(node string) {
				var rn v1beta1.RepoNode
				require.NoError(t, k.c.Get(ctx, client.ObjectKey{Name: node}, &rn))
				w, err := report.NewWriter(k.c, node, report.WithClock(func() time.Time { return k.now }))
				require.NoError(t, err)
				require.NoError(t, w.Write(ctx, rn.Status))
			}
			// steps counts, per node Job, the reconciles it has been seen in.
			steps := map[string]int{}
			created := map[string]int{}
			rebooting := ""
			var p *v1beta1.UpgradePlan
			for range 600 {
				k.reconcile("up")
				p = k.plan("up")
				if p.Status.Phase == v1beta1.PhaseSucceeded || p.Status.Phase == v1beta1.PhaseFailed {
					break
				}
				require.False(t, meta.IsStatusConditionTrue(p.Status.Conditions, v1beta1.ConditionDegraded),
					"a rebooting node is no reason to be Degraded: %+v", p.Status.Conditions)
				k.agents(p)
				var jobs batchv1.JobList
				require.NoError(t, k.c.List(ctx, &jobs, client.InNamespace(testNS)))
				for i := range jobs.Items {
					j := &jobs.Items[i]
					node := j.Labels[sequencer.LabelNode]
					if steps[j.Name] == 0 {
						created[node]++
						if node != "" && rebooting != "" {
							t.Fatalf("the Job of %s was created while %s was rebooting", node, rebooting)
						}
					}
					steps[j.Name]++
					switch n := steps[j.Name]; {
					case node != "" && n == 14:
						// Its agent reports again, after the step.
						heartbeat(node)
					case node != "" && n == 15:
						rebooting = ""
					case len(j.Status.Conditions) > 0:
					case node == "" && n >= 2:
						complete(t, k, j)
					case node == "":
					case n == 2:
						// The step did its work and rebooted the node: its pod is gone with it.
						rebooting = node
						setReady(node, false)
						j.Status.Failed = 1
						require.NoError(t, k.c.Status().Update(ctx, j))
					case n == 8:
						// The node is back; the Job's next pod finds the work done.
						setReady(node, true)
						complete(t, k, j)
					}
				}
			}
			require.Equal(t, v1beta1.PhaseSucceeded, p.Status.Phase, "conditions: %+v; nodes: %+v", p.Status.Conditions, p.Status.NodeUpgradeStatuses)
			for _, n := range f.nodes {
				require.Equal(t, 1, created[n[0]], "the node Job of %s created once", n[0])
			}
		})
	}
}

// complete marks j succeeded now.
func complete(t *testing.T, k *cluster, j *batchv1.Job) {
	t.Helper()
	now := metav1.NewTime(k.now)
	j.Status.CompletionTime = &now
	j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	require.NoError(t, k.c.Status().Update(t.Context(), j))
}

// TestReconcileRetryAfterNodeFailure fails a node's step, then retries the plan by annotation:
// the failed node stays cordoned while the plan is Failed, the ISO stays held, and the retry
// runs the step in a new Job and finishes the plan.
func TestReconcileRetryAfterNodeFailure(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("up", nil))
	p := k.run("up", 300, "up-node-w-2", 2, 2, nil)
	require.Equal(t, v1beta1.PhaseFailed, p.Status.Phase)
	require.Equal(t, v1beta1.PhaseNodeUpgrading, p.Status.FailedPhase)
	require.Equal(t, v1beta1.NodeUpgradeFailed, p.Status.NodeUpgradeStatuses["w-2"].State)
	require.True(t, p.Status.Agents.Hold, "the ISO stays on the nodes for a retry")
	var n corev1.Node
	require.NoError(t, k.c.Get(t.Context(), client.ObjectKey{Name: "w-2"}, &n))
	require.True(t, n.Spec.Unschedulable, "the failed node stays cordoned")

	// Nothing happens without the annotation.
	k.reconcile("up")
	require.Equal(t, v1beta1.PhaseFailed, k.plan("up").Status.Phase)

	p.Annotations = map[string]string{v1beta1.RetryAnnotation: "1"}
	require.NoError(t, k.c.Update(t.Context(), p))
	p = k.run("up", 300, "up-node-w-2", 2, 2, nil)
	require.Equal(t, v1beta1.PhaseSucceeded, p.Status.Phase, "conditions: %+v", p.Status.Conditions)
	require.Equal(t, 1, p.Status.Retries)
	require.Equal(t, "1", p.Status.ObservedRetry)
	require.NoError(t, k.c.Get(t.Context(), client.ObjectKey{Name: "w-2"}, &n))
	require.False(t, n.Spec.Unschedulable)
	var phases []v1beta1.Phase
	for _, ts := range p.Status.PhaseTransitionTimestamps {
		phases = append(phases, ts.Phase)
	}
	i := slices.Index(phases, v1beta1.PhaseFailed)
	require.Equal(t, v1beta1.PhaseNodeUpgrading, phases[i+1], "the retry resumes NodeUpgrading: %v", phases)
}

// TestReconcilePreflightWarnsOfDrains names, before anything is downloaded, a
// PodDisruptionBudget that allows no disruption, a workload with one replica and a pod without a
// controller, and leaves the sequencer's own pods out.
func TestReconcilePreflightWarnsOfDrains(t *testing.T) {
	t.Parallel()
	db := testPod("db", "cp-2", "StatefulSet", nil)
	db.Labels = map[string]string{"app": "db"}
	seq := ownedPod(testNS, "sequencer-a", "cp-1", "ReplicaSet", sequencerLabels)
	k := newClusterOf(t, newPlan("up", nil),
		testNode("cp-1", true), testNode("w-1", false), db, seq,
		ownedPod("apps", "web-1", "w-1", "ReplicaSet", nil), ownedPod("apps", "web-2", "cp-1", "ReplicaSet", nil),
		testPod("bare", "w-1", "", nil),
		&policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "db"},
			Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
			Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0},
		})
	k.opts = []sequencer.Option{sequencer.WithKeepPods(labels.SelectorFromSet(sequencerLabels))}
	k.reconcile("up")
	k.reconcile("up")
	p := k.plan("up")
	require.Equal(t, v1beta1.PhaseInitialized, p.Status.Phase, "conditions: %+v", p.Status.Conditions)
	w := p.Status.Warnings
	require.Contains(t, w, "PodDisruptionBudget apps/db allows no disruption: the drain of node cp-2 will wait until it does")
	require.Contains(t, w, "StatefulSet apps/db-owner has one replica, on node cp-2: it is down while that node is drained")
	require.Contains(t, w, "pod apps/bare on node w-1 has no controller: the drain deletes it for good")
	for _, s := range w {
		require.NotContains(t, s, "sequencer", "the sequencer's own pods are never drained")
	}
}

// TestReconcileReplacesAPodTheRebootOrphaned plays a node step whose pod the reboot left
// Pending for good (containerd had created its container, never started it, and the kubelet
// never fails such a pod): once the node has been Ready again for a minute, the sequencer
// deletes the pod so that the Job runs a new one; a Pending pod on a node that is not back yet
// is left alone.
func TestReconcileReplacesAPodTheRebootOrphaned(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	plan := newPlan("up", func(p *v1beta1.UpgradePlan) { p.Spec.NodeUpgradeOption = nil })
	plan.Status = v1beta1.UpgradePlanStatus{
		Phase:                     v1beta1.PhaseNodeUpgrading,
		PhaseTransitionTimestamps: []v1beta1.PhaseTransitionTimestamp{{Phase: v1beta1.PhaseNodeUpgrading, PhaseTransitionTimestamp: metav1.NewTime(start)}},
		Agents:                    &v1beta1.AgentInstructions{ISOURL: "http://origin/iso", ISOChecksum: testChecksum, Hold: true},
		NodeUpgradeStatuses:       map[string]v1beta1.NodeUpgradeStatus{"m-1": {State: v1beta1.NodeUpgrading}},
	}
	node := formationNode("m-1", roleManagement)
	node.Spec.Unschedulable = true
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "up-node-m-1", Labels: map[string]string{
		sequencer.LabelPlan: "up", sequencer.LabelComponent: "node", sequencer.LabelNode: "m-1", sequencer.LabelAttempt: "0",
	}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "up-node-m-1-abcde", CreationTimestamp: metav1.NewTime(start),
			Labels: map[string]string{batchv1.JobNameLabel: "up-node-m-1", sequencer.LabelPlan: "up"}},
		Spec: corev1.PodSpec{NodeName: "m-1"},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "upgrade", ContainerID: "containerd://0123", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}},
		}}},
	}
	k := newClusterOf(t, plan, node, job, pod)
	k.now = start.Add(5 * time.Minute)
	setReadySince := func(at time.Time) {
		var n corev1.Node
		require.NoError(t, k.c.Get(t.Context(), client.ObjectKey{Name: "m-1"}, &n))
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}}
		require.NoError(t, k.c.Status().Update(t.Context(), &n))
	}
	podLeft := func() bool {
		err := k.c.Get(t.Context(), client.ObjectKeyFromObject(pod), &corev1.Pod{})
		return err == nil
	}

	// The node came back 30 s ago: too soon to tell.
	setReadySince(k.now.Add(-30 * time.Second))
	k.reconcile("up")
	require.True(t, podLeft(), "a pod is not taken for lost while its node has just come back")

	// Back for two minutes: the pod is lost to the reboot.
	setReadySince(k.now.Add(-2 * time.Minute))
	k.reconcile("up")
	require.False(t, podLeft(), "the orphaned pod is deleted so that the Job replaces it")
	p := k.plan("up")
	require.Equal(t, "ReplacingPod", p.Status.NodeUpgradeStatuses["m-1"].Reason)
	require.Equal(t, v1beta1.PhaseNodeUpgrading, p.Status.Phase)
}
