package sequencer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/nodestep"
	"github.com/upgrade-repo/upgrade-repo/release"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
	"github.com/upgrade-repo/upgrade-repo/sequencer/report"
	"github.com/upgrade-repo/upgrade-repo/sequencer/suc"
)

const (
	testNS       = "upgrade-repo"
	testChecksum = "sha512:c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00"
	testImage    = "registry.local/harvester-upgrade:v1.6.0"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, v1beta1.AddToScheme(s))
	return s
}

func testNode(name string, cp bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if cp {
		n.Labels["node-role.kubernetes.io/control-plane"] = "true"
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	return n
}

func testPod(name, node, ownerKind string, annotations map[string]string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, Annotations: annotations},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if ownerKind != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: ownerKind, Name: name + "-owner", UID: types.UID("uid-" + name), Controller: &yes}}
	}
	return p
}

// releaseServer serves /v1/release the way the repo Service does.
func releaseServer(t *testing.T, harvester string) string {
	t.Helper()
	rel := release.Release{Harvester: harvester, Kubernetes: "v1.33.3+rke2r1", MinUpgradableVersion: "v1.5.0", HarvesterChart: "1.6.0"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/release":
			_ = json.NewEncoder(w).Encode(rel)
		case "/v1/images":
			_, _ = w.Write([]byte(`[{"ref":"docker.io/rancher/harvester:` + harvester + `","group":"common"},{"ref":"docker.io/rancher/rke2-runtime:v1.33.3-rke2r1","group":"rke2"}]`))
		default:
			if strings.HasPrefix(r.URL.Path, "/v1/images/digests/") {
				// What an agent read from the ISO's archives; an image no list names is not recorded.
				_, _ = w.Write([]byte(`[{"ref":"docker.io/rancher/harvester:` + harvester + `","config":"sha256:` + strings.Repeat("a", 64) + `"},` +
					`{"ref":"docker.io/rancher/unlisted:1","config":"sha256:` + strings.Repeat("b", 64) + `"}]`))
				return
			}
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// cluster is a fake cluster with nodes, a Version, the installed version, the repo Service's
// endpoints and some workload pods.
type cluster struct {
	t        *testing.T
	c        client.WithWatch
	now      time.Time
	repoURL  string
	recorder *events.FakeRecorder
	// failStatusOnce makes the first status write of the plan in each phase fail, as a sequencer
	// that dies after acting and before recording would.
	failStatusOnce bool
	failedIn       map[v1beta1.Phase]bool
	// blockEviction makes evictions of this pod fail with 429 as a PodDisruptionBudget would.
	blockEviction string
	// stepWords is when the failed step's pod, with its termination message, shows: "" with
	// the Job's failure, "late" a round after it, "never" not at all.
	stepWords string
	objects   []client.Object
	// opts are added to every Reconciler the test builds.
	opts []sequencer.Option
}

func newCluster(t *testing.T, plan *v1beta1.UpgradePlan, extra ...client.Object) *cluster {
	t.Helper()
	objs := []client.Object{
		testNode("cp-1", true), testNode("cp-2", true), testNode("w-1", false), testNode("w-2", false), testNode("w-3", false),
		testPod("web", "w-1", "ReplicaSet", nil),
		testPod("db", "cp-2", "StatefulSet", nil),
		testPod("agent-w-1", "w-1", "DaemonSet", nil),
		testPod("etcd-cp-1", "cp-1", "", map[string]string{corev1.MirrorPodAnnotationKey: "x"}),
		testPod("bare", "w-2", "", nil),
	}
	return newClusterOf(t, plan, append(objs, extra...)...)
}

// newClusterOf builds a fake cluster of the given nodes, pods and other objects, with the plan,
// its Version, the installed version and a Ready repo endpoint.
func newClusterOf(t *testing.T, plan *v1beta1.UpgradePlan, extra ...client.Object) *cluster {
	t.Helper()
	k := &cluster{t: t, now: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC), failedIn: map[v1beta1.Phase]bool{}}
	k.repoURL = releaseServer(t, plan.Spec.Version)
	ready := true
	objs := []client.Object{
		&v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: "v1.6.0"}, Spec: v1beta1.VersionSpec{ISOURL: "http://origin/harvester-v1.6.0.iso", ISOChecksum: testChecksum}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: sequencer.InstalledConfigMap}, Data: map[string]string{sequencer.InstalledVersionKey: "v1.5.2"}},
		&discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: testNS, Name: "upgrade-repo-x", Labels: map[string]string{discoveryv1.LabelServiceName: "upgrade-repo"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		},
		plan,
	}
	objs = append(objs, extra...)
	k.objects = objs
	k.recorder = events.NewFakeRecorder(1000)
	k.c = fake.NewClientBuilder().WithScheme(testScheme(t)).
		WithObjects(objs...).
		WithStatusSubresource(&v1beta1.UpgradePlan{}, &v1beta1.RepoNode{}, &v1beta1.Version{}, &batchv1.Job{}).
		WithIndex(&corev1.Pod{}, "spec.nodeName", sequencer.PodNodeIndexer).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if p, ok := obj.(*v1beta1.UpgradePlan); ok && k.failStatusOnce {
					// The phase the plan was in before this write.
					var cur v1beta1.UpgradePlan
					if err := c.Get(ctx, client.ObjectKeyFromObject(p), &cur); err == nil && !k.failedIn[cur.Status.Phase] {
						k.failedIn[cur.Status.Phase] = true
						return apierrors.NewServiceUnavailable("sequencer restarted")
					}
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
			// The sequencer writes a plan's status as a merge patch (StatusPatch): the same
			// forced restart as for an update.
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if obj.GetObjectKind().GroupVersionKind().Kind == "UpgradePlan" && k.failStatusOnce {
					var cur v1beta1.UpgradePlan
					if err := c.Get(ctx, client.ObjectKeyFromObject(obj), &cur); err == nil && !k.failedIn[cur.Status.Phase] {
						k.failedIn[cur.Status.Phase] = true
						return apierrors.NewServiceUnavailable("sequencer restarted")
					}
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
			SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj client.Object, subObj client.Object, opts ...client.SubResourceCreateOption) error {
				if sub == "eviction" && obj.GetName() == k.blockEviction {
					return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
				}
				return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
			},
		}).Build()
	return k
}

// reconcile runs one reconcile with a freshly built Reconciler, as a restarted sequencer would.
func (k *cluster) reconcile(name string, opts ...sequencer.Option) reconcile.Result {
	k.t.Helper()
	k.now = k.now.Add(time.Second)
	now := k.now
	base := []sequencer.Option{
		sequencer.WithNamespace(testNS), sequencer.WithRepoURL(k.repoURL), sequencer.WithUpgradeImage(testImage),
		sequencer.WithClock(func() time.Time { return now }), sequencer.WithEventRecorder(k.recorder),
		sequencer.WithConfig(sequencer.Config{StallAfter: time.Hour, HeartbeatTimeout: time.Hour, Poll: time.Second}),
	}
	r, err := sequencer.NewReconciler(k.c, slog.New(slog.NewTextHandler(k.t.Output(), nil)), append(append(base, k.opts...), opts...)...)
	require.NoError(k.t, err)
	res, err := r.Reconcile(k.t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: name}})
	if err != nil {
		// Only the forced restarts may fail a reconcile.
		require.ErrorContains(k.t, err, "sequencer restarted")
	}
	return res
}

func (k *cluster) plan(name string) *v1beta1.UpgradePlan {
	k.t.Helper()
	var p v1beta1.UpgradePlan
	require.NoError(k.t, k.c.Get(k.t.Context(), client.ObjectKey{Name: name}, &p))
	return &p
}

// agents plays every node's agent for one step: each report moves one state forward.
func (k *cluster) agents(p *v1beta1.UpgradePlan) {
	k.t.Helper()
	a := p.Status.Agents
	if a == nil || !a.Hold {
		return
	}
	var nodes corev1.NodeList
	require.NoError(k.t, k.c.List(k.t.Context(), &nodes))
	for _, n := range nodes.Items {
		var cur v1beta1.RepoNode
		err := k.c.Get(k.t.Context(), client.ObjectKey{Name: n.Name}, &cur)
		if err != nil {
			require.True(k.t, apierrors.IsNotFound(err))
		}
		st := cur.Status
		switch {
		case st.ISO.State == "":
			st.ISO = v1beta1.RepoNodeISO{Checksum: a.ISOChecksum, State: v1beta1.ISODownloading, BytesDone: 10, BytesTotal: 100}
		case st.ISO.State == v1beta1.ISODownloading:
			st.ISO = v1beta1.RepoNodeISO{Checksum: a.ISOChecksum, State: v1beta1.ISOReady, BytesDone: 100, BytesTotal: 100, BytesFromPeers: 60, BytesFromOrigin: 40}
		case !st.Repo.Ready:
			st.Repo = v1beta1.RepoNodeRepo{Ready: true, URL: "http://" + n.Name + ":8080"}
		case slices.Contains(a.PreloadNodes, n.Name) && st.Preload.State == "":
			st.Preload = v1beta1.RepoNodePreload{State: v1beta1.PreloadRunning, ImagesDone: 1, ImagesTotal: 4, BytesDone: 100, BytesTotal: 400}
		case st.Preload.State == v1beta1.PreloadRunning:
			st.Preload = v1beta1.RepoNodePreload{State: v1beta1.PreloadDone, ImagesDone: 4, ImagesTotal: 4, BytesDone: 400, BytesTotal: 400}
		}
		if err == nil && reflect.DeepEqual(st, cur.Status) {
			// Nothing new to report; the heartbeat timeout of these tests is long.
			continue
		}
		w, err := report.NewWriter(k.c, n.Name, report.WithClock(func() time.Time { return k.now }))
		require.NoError(k.t, err)
		require.NoError(k.t, w.Write(k.t.Context(), st))
	}
}

// jobs plays the Job controller: a Job seen once runs, a Job seen twice completes (or fails when
// named by fail); a Job labelled hold=true never finishes.
func (k *cluster) jobs(seen map[string]int, fail string) {
	k.t.Helper()
	var jobs batchv1.JobList
	require.NoError(k.t, k.c.List(k.t.Context(), &jobs, client.InNamespace(testNS)))
	for i := range jobs.Items {
		j := &jobs.Items[i]
		seen[j.Name]++
		if j.Name == fail && len(j.Status.Conditions) > 0 && k.stepWords == "late" && seen[j.Name] == 3 {
			// The step's pod status reaches the sequencer a round after the Job's failure.
			k.stepPod(j)
		}
		if seen[j.Name] < 2 || len(j.Status.Conditions) > 0 || j.Labels["hold"] == "true" {
			continue
		}
		typ := batchv1.JobComplete
		if j.Name == fail {
			typ = batchv1.JobFailed
			if k.stepWords == "" {
				k.stepPod(j)
			}
		}
		j.Status.Conditions = []batchv1.JobCondition{{Type: typ, Status: corev1.ConditionTrue, Reason: "Test", Message: "played by the test",
			LastTransitionTime: metav1.NewTime(k.now)}}
		require.NoError(k.t, k.c.Status().Update(k.t.Context(), j))
	}
}

// stepPod creates the failed pod of node Job j: the step's, ended with its error as its
// termination message.
func (k *cluster) stepPod(j *batchv1.Job) {
	k.t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: j.Namespace, Name: j.Name + "-abcde",
		Labels: map[string]string{batchv1.JobNameLabel: j.Name}}}
	require.NoError(k.t, k.c.Create(k.t.Context(), pod))
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "upgrade", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 86, Message: "node cp-1: the release's kube-apiserver did not come up within 5m0s\n", FinishedAt: metav1.NewTime(k.now)}}}}
	require.NoError(k.t, k.c.Status().Update(k.t.Context(), pod))
}

// checkInvariants checks the node upgrade order rules on the cluster as it is now.
func (k *cluster) checkInvariants(p *v1beta1.UpgradePlan, workerConcurrency, preloadConcurrency int) {
	k.t.Helper()
	var nodes corev1.NodeList
	require.NoError(k.t, k.c.List(k.t.Context(), &nodes))
	cpCordoned, workersCordoned, cpLeft := 0, 0, 0
	for i := range nodes.Items {
		n := &nodes.Items[i]
		cp := sequencer.IsControlPlane(n)
		if cp && p.Status.NodeUpgradeStatuses[n.Name].State != v1beta1.NodeUpgraded {
			cpLeft++
		}
		if n.Spec.Unschedulable {
			if cp {
				cpCordoned++
			} else {
				workersCordoned++
			}
		}
	}
	require.LessOrEqual(k.t, cpCordoned, 1, "control-plane nodes go one at a time")
	if cpLeft > 0 {
		require.Zero(k.t, workersCordoned, "workers wait for the control plane")
	}
	require.LessOrEqual(k.t, workersCordoned, workerConcurrency)
	if p.Status.Phase == v1beta1.PhaseImagePreloading && preloadConcurrency > 0 {
		running := 0
		for _, s := range p.Status.NodeUpgradeStatuses {
			if s.State == v1beta1.NodeImagePreloading {
				running++
			}
		}
		require.LessOrEqual(k.t, running, preloadConcurrency)
	}
}

// run drives plan name until it finishes or steps run out, playing agents and Jobs in between.
func (k *cluster) run(name string, steps int, failJob string, workerConc, preloadConc int, between func(*v1beta1.UpgradePlan)) *v1beta1.UpgradePlan {
	k.t.Helper()
	seen := map[string]int{}
	lastRV, still := "", 0
	for range steps {
		k.reconcile(name)
		p := k.plan(name)
		// A plan whose status has not moved for several steps waits on something the test
		// must change; stop here rather than spin.
		if p.ResourceVersion == lastRV {
			if still++; still >= 6 {
				return p
			}
		} else {
			lastRV, still = p.ResourceVersion, 0
		}
		k.checkInvariants(p, workerConc, preloadConc)
		if p.Status.Phase == v1beta1.PhaseSucceeded || p.Status.Phase == v1beta1.PhaseFailed {
			return p
		}
		if between != nil {
			between(p)
		}
		k.agents(p)
		k.jobs(seen, failJob)
	}
	return k.plan(name)
}

func phasesOf(p *v1beta1.UpgradePlan) []v1beta1.Phase {
	var out []v1beta1.Phase
	for _, t := range p.Status.PhaseTransitionTimestamps {
		out = append(out, t.Phase)
	}
	return out
}

func allPhases() []v1beta1.Phase {
	var out []v1beta1.Phase
	for _, s := range sequencer.Steps {
		out = append(out, s.Running, s.Done)
	}
	return append(out, v1beta1.PhaseSucceeded)
}

func newPlan(name string, mut func(*v1beta1.UpgradePlan)) *v1beta1.UpgradePlan {
	p := &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1beta1.UpgradePlanSpec{
			Version:            "v1.6.0",
			Mode:               v1beta1.ModeAutomatic,
			ImagePreloadOption: &v1beta1.ImagePreloadOption{Concurrency: 2},
			NodeUpgradeOption:  &v1beta1.NodeUpgradeOption{Concurrency: 2},
		},
	}
	if mut != nil {
		mut(p)
	}
	return p
}

func TestReconcileFullRunWithRestarts(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("up", nil))
	k.failStatusOnce = true
	p := k.run("up", 300, "", 2, 2, nil)

	var seq []string
	for _, ts := range p.Status.PhaseTransitionTimestamps {
		seq = append(seq, fmt.Sprintf("%s@%s", ts.Phase, ts.PhaseTransitionTimestamp.Format("15:04:05")))
	}
	t.Logf("phase sequence: %s", strings.Join(seq, " -> "))

	require.Equal(t, v1beta1.PhaseSucceeded, p.Status.Phase, "conditions: %+v", p.Status.Conditions)
	require.Equal(t, allPhases(), phasesOf(p))
	for _, s := range sequencer.Steps {
		require.True(t, k.failedIn[s.Running], "no restart was forced in %s", s.Running)
	}
	require.True(t, meta.IsStatusConditionTrue(p.Status.Conditions, v1beta1.ConditionAvailable))
	require.True(t, meta.IsStatusConditionFalse(p.Status.Conditions, v1beta1.ConditionProgressing))
	require.True(t, meta.IsStatusConditionFalse(p.Status.Conditions, v1beta1.ConditionDegraded))
	require.Equal(t, "v1.5.2", p.Status.PreviousVersion)
	require.Equal(t, testChecksum, p.Status.ISOImageID)
	require.Equal(t, "http://origin/harvester-v1.6.0.iso", p.Status.Version.ISOURL)
	require.Equal(t, "v1.33.3+rke2r1", p.Status.ReleaseMetadata.Kubernetes)
	require.False(t, p.Status.Agents.Hold, "agents may drop the ISO")
	require.Empty(t, p.Status.Agents.PreloadNodes)
	require.Len(t, p.Status.NodeUpgradeStatuses, 5)
	for n, s := range p.Status.NodeUpgradeStatuses {
		require.Equal(t, v1beta1.NodeUpgraded, s.State, "node %s", n)
	}

	// The installed version is recorded for the next plan.
	in, err := sequencer.ReadInstalled(t.Context(), k.c, testNS)
	require.NoError(t, err)
	require.Equal(t, "v1.6.0", in.Version)
	require.Equal(t, "v1.33.3+rke2r1", in.Release.Kubernetes)

	// What the plan created is gone; nodes are schedulable again.
	var jobs batchv1.JobList
	require.NoError(t, k.c.List(t.Context(), &jobs, client.InNamespace(testNS)))
	require.Empty(t, jobs.Items)
	var nodes corev1.NodeList
	require.NoError(t, k.c.List(t.Context(), &nodes))
	for _, n := range nodes.Items {
		require.False(t, n.Spec.Unschedulable, "node %s", n.Name)
	}

	// The drain evicted workload pods and left DaemonSet and mirror pods.
	var pods corev1.PodList
	require.NoError(t, k.c.List(t.Context(), &pods))
	var left []string
	for _, p := range pods.Items {
		left = append(left, p.Name)
	}
	require.ElementsMatch(t, []string{"agent-w-1", "etcd-cp-1"}, left)

	// Events mark each phase.
	close(k.recorder.Events)
	var events []string
	for e := range k.recorder.Events {
		events = append(events, e)
	}
	for _, ph := range allPhases() {
		require.True(t, slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, "Normal "+string(ph)+" ") }), "no event for %s", ph)
	}
}

func TestReconcileJobsCarryTheirEnvironment(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("up", nil), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "upgrade-repo-local"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.42", Ports: []corev1.ServicePort{{Port: 80}}},
	})
	k.opts = []sequencer.Option{
		sequencer.WithLocalService("upgrade-repo-local"), sequencer.WithJobServiceAccount("upgrade-repo-upgrade"),
		sequencer.WithJobTimeout(time.Hour),
	}
	var clusterJob, nodeJob *batchv1.Job
	k.run("up", 300, "", 2, 2, func(p *v1beta1.UpgradePlan) {
		var jobs batchv1.JobList
		require.NoError(t, k.c.List(t.Context(), &jobs, client.InNamespace(testNS)))
		for i := range jobs.Items {
			j := jobs.Items[i].DeepCopy()
			switch {
			case j.Labels[sequencer.LabelComponent] == "cluster":
				clusterJob = j
			case j.Labels[sequencer.LabelNode] == "w-2":
				nodeJob = j
			}
		}
	})
	require.NotNil(t, clusterJob)
	require.NotNil(t, nodeJob)
	env := func(j *batchv1.Job) map[string]string {
		out := map[string]string{}
		for _, e := range j.Spec.Template.Spec.Containers[0].Env {
			out[e.Name] = e.Value
		}
		return out
	}
	ce := env(clusterJob)
	require.Equal(t, k.repoURL, ce["UPGRADE_REPO_URL"])
	require.Equal(t, "v1.6.0", ce["UPGRADE_VERSION"])
	require.Equal(t, "v1.33.3+rke2r1", ce["UPGRADE_RELEASE_KUBERNETES"])
	require.Equal(t, testImage, clusterJob.Spec.Template.Spec.Containers[0].Image)
	require.Equal(t, "up", clusterJob.OwnerReferences[0].Name)
	require.Equal(t, "up", ce["HARVESTER_UPGRADE_NAME"])
	require.Equal(t, "upgrade-repo-upgrade", clusterJob.Spec.Template.Spec.ServiceAccountName)
	require.Equal(t, int64(3600), *clusterJob.Spec.ActiveDeadlineSeconds)
	ne := env(nodeJob)
	require.Equal(t, "w-2", ne["UPGRADE_NODE_NAME"])
	require.Equal(t, "w-2", ne["HARVESTER_UPGRADE_NODE_NAME"])
	// The node's own agent, by the local Service's cluster IP: no DNS, no other node.
	require.Equal(t, "http://10.96.0.42:80", ne["UPGRADE_REPO_URL"])
	require.Equal(t, k.repoURL, ne["UPGRADE_REPO_SERVICE_URL"])
	terms := nodeJob.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	require.Equal(t, []string{"w-2"}, terms[0].MatchFields[0].Values)
}

func TestReconcileClusterJobFails(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("up", nil))
	p := k.run("up", 300, "up-cluster", 2, 2, nil)
	require.Equal(t, v1beta1.PhaseFailed, p.Status.Phase, "conditions: %+v", p.Status.Conditions)
	require.Equal(t, v1beta1.PhaseClusterUpgrading, p.Status.FailedPhase)
	c := meta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionDegraded)
	require.Equal(t, "ClusterJobFailed", c.Reason)
	require.Contains(t, c.Message, "ClusterUpgrading failed: ")
	require.Contains(t, c.Message, "job upgrade-repo/up-cluster failed")
	require.True(t, p.Status.Agents.Hold, "a failed plan keeps the ISO on the nodes for a retry")
}

// A node Job that fails at once on a step that says running it again would repeat it
// (nodestep.ExitPermanent, the pod failure policy) fails the plan saying what the step said.
func TestReconcileNodeJobFailsWithTheStepsError(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("up", nil))
	p := k.run("up", 300, "up-node-cp-1", 2, 2, nil)
	require.Equal(t, v1beta1.PhaseFailed, p.Status.Phase, "conditions: %+v", p.Status.Conditions)
	require.Equal(t, v1beta1.PhaseNodeUpgrading, p.Status.FailedPhase)
	s := p.Status.NodeUpgradeStatuses["cp-1"]
	require.Equal(t, v1beta1.NodeUpgradeFailed, s.State)
	require.Contains(t, s.Message, "node cp-1: the release's kube-apiserver did not come up within 5m0s (pod up-node-cp-1-abcde exited 86)")
	var job batchv1.Job
	require.NoError(t, k.c.Get(t.Context(), client.ObjectKey{Namespace: testNS, Name: "up-node-cp-1"}, &job))
	require.NotNil(t, job.Spec.PodFailurePolicy)
	require.Equal(t, []int32{nodestep.ExitPermanent}, job.Spec.PodFailurePolicy.Rules[0].OnExitCodes.Values)
	require.Equal(t, batchv1.PodFailurePolicyActionFailJob, job.Spec.PodFailurePolicy.Rules[0].Action)
	require.Equal(t, corev1.TerminationMessageFallbackToLogsOnError, job.Spec.Template.Spec.Containers[0].TerminationMessagePolicy)
}

// A node Job's failure seen before its pod's status (their caches are fed by separate watches)
// waits a while for the step's words; a pod that never shows does not hold the plan for long.
func TestReconcileNodeJobFailureWaitsForTheStepsWords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		words, want string
	}{
		{"late", "node cp-1: the release's kube-apiserver did not come up within 5m0s (pod up-node-cp-1-abcde exited 86)"},
		{"never", "job upgrade-repo/up-node-cp-1 failed: Test played by the test"},
	} {
		t.Run(tc.words, func(t *testing.T) {
			t.Parallel()
			k := newCluster(t, newPlan("up", nil))
			k.stepWords = tc.words
			p := k.run("up", 300, "up-node-cp-1", 2, 2, nil)
			if tc.words == "never" {
				require.Equal(t, v1beta1.PhaseNodeUpgrading, p.Status.Phase, "the failure waits for the step's words")
				k.now = k.now.Add(30 * time.Second)
				p = k.run("up", 30, "up-node-cp-1", 2, 2, nil)
			}
			require.Equal(t, v1beta1.PhaseFailed, p.Status.Phase, "conditions: %+v", p.Status.Conditions)
			s := p.Status.NodeUpgradeStatuses["cp-1"]
			require.Equal(t, v1beta1.NodeUpgradeFailed, s.State)
			require.Contains(t, s.Message, tc.want)
		})
	}
}

func TestReconcileDrainBlockedByPDB(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("up", nil))
	k.blockEviction = "db"
	p := k.run("up", 120, "", 2, 2, nil)
	require.Equal(t, v1beta1.PhaseNodeUpgrading, p.Status.Phase)
	c := meta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionDegraded)
	require.Equal(t, metav1.ConditionTrue, c.Status)
	require.Equal(t, "DrainBlocked", c.Reason)
	require.Contains(t, c.Message, "apps/db")
	require.Equal(t, v1beta1.NodeCordoned, p.Status.NodeUpgradeStatuses["cp-2"].State)

	// Once the budget allows it, the plan goes on.
	k.blockEviction = ""
	p = k.run("up", 300, "", 2, 2, nil)
	require.Equal(t, v1beta1.PhaseSucceeded, p.Status.Phase)
}

func TestReconcileInteractive(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("up", func(p *v1beta1.UpgradePlan) { p.Spec.Mode = v1beta1.ModeInteractive }))
	approve := func(items string) {
		p := k.plan("up")
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[v1beta1.ApproveAnnotation] = items
		require.NoError(t, k.c.Update(t.Context(), p))
	}
	p := k.run("up", 100, "", 2, 2, nil)
	require.Equal(t, v1beta1.PhaseImagePreloaded, p.Status.Phase, "waits before ClusterUpgrading")
	require.Equal(t, "AwaitingApproval", meta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionProgressing).Reason)
	require.True(t, meta.IsStatusConditionFalse(p.Status.Conditions, v1beta1.ConditionDegraded))

	approve("cluster")
	p = k.run("up", 100, "", 2, 2, nil)
	require.Equal(t, v1beta1.PhaseNodeUpgrading, p.Status.Phase)
	for n, s := range p.Status.NodeUpgradeStatuses {
		require.NotEqual(t, v1beta1.NodeUpgraded, s.State, "node %s went without approval", n)
	}
	require.Equal(t, "AwaitingApproval", p.Status.NodeUpgradeStatuses["cp-1"].Reason)

	approve("cluster,cp-1,cp-2")
	p = k.run("up", 100, "", 2, 2, nil)
	require.Equal(t, v1beta1.NodeUpgraded, p.Status.NodeUpgradeStatuses["cp-2"].State)
	require.Equal(t, v1beta1.NodeUpgradePaused, p.Status.NodeUpgradeStatuses["w-1"].State)

	approve("cluster,cp-1,cp-2,w-1,w-2,w-3")
	p = k.run("up", 200, "", 2, 2, nil)
	require.Equal(t, v1beta1.PhaseSucceeded, p.Status.Phase)
}

func TestReconcilePauseNodes(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("up", func(p *v1beta1.UpgradePlan) { p.Spec.NodeUpgradeOption.PauseNodes = []string{"w-3"} }))
	p := k.run("up", 200, "", 2, 2, nil)
	require.Equal(t, v1beta1.PhaseNodeUpgrading, p.Status.Phase)
	require.Equal(t, v1beta1.NodeUpgradePaused, p.Status.NodeUpgradeStatuses["w-3"].State)
	require.Equal(t, v1beta1.NodeUpgraded, p.Status.NodeUpgradeStatuses["w-2"].State)
	require.Equal(t, "NodesHeld", meta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionProgressing).Reason)

	p.Spec.NodeUpgradeOption.PauseNodes = nil
	require.NoError(t, k.c.Update(t.Context(), p))
	p = k.run("up", 100, "", 2, 2, nil)
	require.Equal(t, v1beta1.PhaseSucceeded, p.Status.Phase)
}

func TestReconcileStalls(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("up", nil))
	// Nobody plays the agents: ISODownloading waits, then is Degraded once StallAfter passes.
	k.reconcile("up")
	k.reconcile("up")
	k.reconcile("up")
	require.Equal(t, v1beta1.PhaseISODownloading, k.plan("up").Status.Phase)
	k.now = k.now.Add(2 * time.Hour)
	k.reconcile("up")
	p := k.plan("up")
	c := meta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionDegraded)
	require.Equal(t, metav1.ConditionTrue, c.Status)
	require.Equal(t, "ISODownloading", c.Reason)
	require.Contains(t, c.Message, "no report from the agent")
}

func TestReconcileReleaseMismatchFails(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("up", nil))
	k.repoURL = releaseServer(t, "v1.5.9")
	p := k.run("up", 100, "", 2, 2, nil)
	require.Equal(t, v1beta1.PhaseFailed, p.Status.Phase)
	require.Equal(t, v1beta1.PhaseMetadataPopulating, p.Status.FailedPhase)
	require.Contains(t, meta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionDegraded).Message, "the ISO holds release v1.5.9")
}

func TestReconcileSecondPlanWaits(t *testing.T) {
	t.Parallel()
	first := newPlan("first", nil)
	first.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	second := newPlan("second", nil)
	second.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC))
	k := newCluster(t, first, second)
	k.reconcile("first")
	k.reconcile("first")
	k.reconcile("first")
	k.reconcile("second")
	k.reconcile("second")
	p := k.plan("second")
	require.Equal(t, v1beta1.PhaseInitializing, p.Status.Phase)
	c := meta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionDegraded)
	require.Equal(t, "PolicyCheckPending", c.Reason)
	require.Contains(t, c.Message, "other plans in flight: first")
	require.Equal(t, v1beta1.PhaseISODownloading, k.plan("first").Status.Phase)
}

func TestReconcileSystemUpgradeController(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("up", func(p *v1beta1.UpgradePlan) {
		p.Spec.NodeUpgradeOption.Executor = v1beta1.ExecutorSystemUpgradeController
	}))
	var created []string
	p := k.run("up", 300, "", 2, 2, func(p *v1beta1.UpgradePlan) {
		if p.Status.Phase != v1beta1.PhaseNodeUpgrading {
			return
		}
		// Play system-upgrade-controller: resolve a hash, then label every node as upgraded.
		var list unstructured.UnstructuredList
		list.SetGroupVersionKind(suc.PlanListGVK)
		require.NoError(t, k.c.List(t.Context(), &list, client.InNamespace("cattle-system")))
		for i := range list.Items {
			pl := &list.Items[i]
			if !slices.Contains(created, pl.GetName()) {
				created = append(created, pl.GetName())
			}
			if h, _, _ := unstructured.NestedString(pl.Object, "status", "latestHash"); h == "" {
				require.NoError(t, unstructured.SetNestedField(pl.Object, "hash-"+pl.GetName(), "status", "latestHash"))
				require.NoError(t, k.c.Update(t.Context(), pl))
				continue
			}
			var nodes corev1.NodeList
			require.NoError(t, k.c.List(t.Context(), &nodes))
			for j := range nodes.Items {
				n := &nodes.Items[j]
				server := sequencer.IsControlPlane(n)
				if server != strings.HasSuffix(pl.GetName(), "-server") {
					continue
				}
				if n.Labels == nil {
					n.Labels = map[string]string{}
				}
				n.Labels["plan.upgrade.cattle.io/"+pl.GetName()] = "hash-" + pl.GetName()
				require.NoError(t, k.c.Update(t.Context(), n))
			}
		}
	})
	require.Equal(t, v1beta1.PhaseSucceeded, p.Status.Phase, "conditions: %+v", p.Status.Conditions)
	require.ElementsMatch(t, []string{"up-server", "up-agent"}, created)
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(suc.PlanListGVK)
	require.NoError(t, k.c.List(t.Context(), &list, client.InNamespace("cattle-system")))
	require.Empty(t, list.Items, "CleaningUp removes the Plans")
}

func TestReconcileClusterJobStuck(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("up", nil))
	p := k.run("up", 100, "", 2, 2, func(p *v1beta1.UpgradePlan) {
		if p.Status.Phase != v1beta1.PhaseClusterUpgrading {
			return
		}
		// Play the Job controller and the kubelet: the Job's pod cannot pull its image, so the
		// Job never finishes.
		var jobs batchv1.JobList
		require.NoError(t, k.c.List(t.Context(), &jobs, client.InNamespace(testNS)))
		for i := range jobs.Items {
			j := &jobs.Items[i]
			j.Labels["hold"] = "true"
			require.NoError(t, k.c.Update(t.Context(), j))
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: j.Name + "-abcde", Labels: map[string]string{batchv1.JobNameLabel: j.Name}},
				Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
					Name: "upgrade", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}},
				}}},
			}
			if err := k.c.Create(t.Context(), pod); err != nil {
				require.True(t, apierrors.IsAlreadyExists(err))
			}
		}
	})
	require.Equal(t, v1beta1.PhaseClusterUpgrading, p.Status.Phase)
	c := meta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionDegraded)
	require.Equal(t, metav1.ConditionTrue, c.Status)
	require.Equal(t, "ClusterJobStuck", c.Reason)
	require.Contains(t, c.Message, "ImagePullBackOff: Back-off pulling image")
}

// TestReconcileJobsCarryForceAndKubeadmRelease: the Jobs learn spec.force, and the etcd and
// CoreDNS tags of a kubeadm release, which the installed version's record keeps.
func TestReconcileJobsCarryForceAndKubeadmRelease(t *testing.T) {
	t.Parallel()
	for _, force := range []bool{false, true} {
		t.Run(fmt.Sprintf("force=%t", force), func(t *testing.T) {
			t.Parallel()
			k := newCluster(t, newPlan("up", func(p *v1beta1.UpgradePlan) { p.Spec.Force = force }))
			rel := release.Release{Harvester: "v1.6.0", Kubernetes: "v1.34.1", Extra: map[string]any{"etcd": "3.6.4-0", "coredns": "v1.12.1"}}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(rel) }))
			t.Cleanup(srv.Close)
			k.repoURL = srv.URL
			setKubelet := func(node, v string) {
				var n corev1.Node
				require.NoError(t, k.c.Get(t.Context(), client.ObjectKey{Name: node}, &n))
				n.Status.NodeInfo.KubeletVersion = v
				require.NoError(t, k.c.Status().Update(t.Context(), &n))
			}
			for _, n := range []string{"cp-1", "cp-2", "w-1", "w-2", "w-3"} {
				setKubelet(n, "v1.33.5")
			}
			envs := map[string]map[string]string{}
			p := k.run("up", 300, "", 2, 2, func(*v1beta1.UpgradePlan) {
				var jobs batchv1.JobList
				require.NoError(t, k.c.List(t.Context(), &jobs, client.InNamespace(testNS)))
				for _, j := range jobs.Items {
					env := map[string]string{}
					for _, e := range j.Spec.Template.Spec.Containers[0].Env {
						env[e.Name] = e.Value
					}
					envs[j.Labels[sequencer.LabelComponent]+"/"+j.Labels[sequencer.LabelNode]] = env
					if n := j.Labels[sequencer.LabelNode]; n != "" {
						// The node step upgrades the kubelet.
						setKubelet(n, "v1.34.1")
					}
				}
			})
			require.Equal(t, v1beta1.PhaseSucceeded, p.Status.Phase, "conditions: %+v", p.Status.Conditions)
			for _, name := range []string{"cluster/", "node/w-1"} {
				require.Equal(t, fmt.Sprint(force), envs[name]["UPGRADE_FORCE"], name)
				require.Equal(t, "3.6.4-0", envs[name]["UPGRADE_RELEASE_ETCD"], name)
				require.Equal(t, "v1.12.1", envs[name]["UPGRADE_RELEASE_COREDNS"], name)
				require.Equal(t, "v1.34.1", envs[name]["UPGRADE_RELEASE_KUBERNETES"], name)
			}
			for n, s := range p.Status.NodeUpgradeStatuses {
				require.Equal(t, [3]string{"v1.33.5", "v1.34.1", "v1.34.1"}, [3]string{s.KubeletVersionBefore, s.KubeletVersion, s.TargetKubeletVersion}, n)
				require.NotNil(t, s.StateTime, n)
			}
			in, err := sequencer.ReadInstalled(t.Context(), k.c, testNS)
			require.NoError(t, err)
			require.Equal(t, "3.6.4-0", in.Release.Extra["etcd"])
		})
	}
}
