package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiv1beta1 "github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// Names of what the kubeadm upgrade test creates.
const (
	kubeadmPlan      = "e2e-kubeadm"
	kubeadmPlanAgain = "e2e-kubeadm-again"
	workloadName     = "e2e-workload"
)

// TestKubeadmUpgrade upgrades a real kubeadm cluster (formation kubeadm: a kind cluster started
// from an older Kubernetes version) to the Kubernetes version of the release ISO that
// hack/kubeadm-release.sh packed from the target version's images and binaries, with the kubeadm
// upgrade image, and no registry in reach. A Deployment with a PodDisruptionBudget and a
// DaemonSet run through it. Then: every kubelet and the API server report the target; the
// control plane, kube-proxy and CoreDNS run the release's images (their config digests against
// the ISO's archives); no image was pulled; the workload stayed available as the budget allows;
// the plan Succeeded with every node's row Upgraded at the target; and a second plan to the same
// release succeeds without changing any node, its time estimate at ImagePreloading logged
// against the time it then took.
func TestKubeadmUpgrade(t *testing.T) {
	c := env(t)
	if c.formation != "kubeadm" && c.formation != "kubeadm-ha" {
		t.Skip("formations kubeadm and kubeadm-ha only (E2E_FORMATION=kubeadm make e2e)")
	}
	ha := c.formation == "kubeadm-ha"
	target, image := os.Getenv("E2E_KUBEADM_TARGET"), os.Getenv("E2E_KUBEADM_IMAGE")
	require.NotEmpty(t, target, "E2E_KUBEADM_TARGET: hack/e2e.sh packs the kubeadm release")
	require.NotEmpty(t, image, "E2E_KUBEADM_IMAGE: hack/e2e.sh builds the kubeadm upgrade image")
	rel := releaseISO(t)
	waitDaemonSetReady(t, c, c.release+"-agent", 8*time.Minute)

	from := serverVersion(t, c)
	before := kubeletVersions(t, c)
	t.Logf("before: API server %s, kubelets %v; target %s", from, before, target)
	for n, v := range before {
		require.NotEqual(t, target, v, "node %s is at the target already: start from an older node image (E2E_KUBEADM_FROM_IMAGE)", n)
	}
	writeVersionTable(t, c, "before", before, nil)
	if ha {
		etcdReading(t, haFormation(t, c).cps[0])
	}

	deployWorkload(t, c)
	deployOrigin(t, c, rel)
	agentsFollowPlans(t, c, rel)
	recreate(t, c, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: installedConfigMap, Namespace: c.namespace},
		Data:       map[string]string{"version": from},
	})
	recreate(t, c, &apiv1beta1.Version{
		ObjectMeta: metav1.ObjectMeta{Name: target},
		Spec:       apiv1beta1.VersionSpec{ISOURL: originURL(c), ISOChecksum: rel.checksum},
	})

	avail := watchAvailability(t, c)
	start := time.Now()
	var f *faults
	var h haNodes
	if ha {
		h = haFormation(t, c)
		f = injectFaults(t, c, h, kubeadmPlan)
	}
	plan := runKubeadmPlan(t, c, kubeadmPlan, target, image)
	t.Logf("plan %s succeeded after %s", kubeadmPlan, time.Since(start).Round(time.Second))
	logPhases(t, c, plan)
	if ha {
		f.stop()
		haChecks(t, c, h, f, plan, before, target)
	}
	minReady, samples := avail.stop()
	if ha {
		// A paused or restarted node takes its replicas down whatever the budget says (an
		// involuntary disruption): the budget is held to outside those windows, and the
		// drains, which are voluntary, go through the Eviction API, which enforces it.
		windows := f.windowsList()
		outside, n := avail.minOutside(windows)
		t.Logf("Deployment %s: at least %d ready in %d samples in all; at least %d ready in the %d samples outside the faults' windows %v", workloadName, minReady, samples, outside, n, windows)
		minReady, samples = outside, n
	}

	t.Run("every kubelet and the API server are at the target", func(t *testing.T) {
		require.Equal(t, target, serverVersion(t, c), "the API server's /version")
		after := kubeletVersions(t, c)
		for n, v := range after {
			require.Equal(t, target, v, "kubelet of %s", n)
		}
		writeVersionTable(t, c, "after", before, plan)
	})

	t.Run("the plan's rows say Upgraded at the target", func(t *testing.T) {
		for _, n := range c.nodes {
			if ha && n.Name == h.worker {
				continue // skipped in this plan, upgraded by its own (haChecks)
			}
			ns, ok := plan.Status.NodeUpgradeStatuses[n.Name]
			require.True(t, ok, "no row for %s", n.Name)
			require.Equal(t, apiv1beta1.NodeUpgraded, ns.State, "row of %s: %s", n.Name, ns.Message)
			require.Equal(t, target, ns.KubeletVersion, "row of %s: kubelet now", n.Name)
			require.Equal(t, before[n.Name], ns.KubeletVersionBefore, "row of %s: kubelet before", n.Name)
			require.Equal(t, target, ns.TargetKubeletVersion, "row of %s: target", n.Name)
		}
	})

	t.Run("the control plane, kube-proxy and CoreDNS run the release's images", func(t *testing.T) {
		configs := map[string]string{} // ref -> config digest, from the ISO's archives
		for _, a := range rel.res.Archives {
			for _, im := range a.Images {
				configs[im.Ref] = im.ConfigDigest
			}
		}
		// A node back from a fault (the HA formation's paused worker, upgraded by its own plan
		// just before) starts its kube-proxy after its plan ends: the pods are judged once every
		// one of them runs, within minutes.
		pods := systemPodsRunning(t, c, 4*time.Minute)
		seen := map[string]int{}
		for _, p := range pods {
			component := systemComponent(p)
			for _, cs := range p.Status.ContainerStatuses {
				ref := specImage(p, cs.Name)
				want, ok := configs[normalizeRef(ref)]
				require.True(t, ok, "pod %s runs %s, which the release does not hold", p.Name, ref)
				got := imageConfig(t, p.Spec.NodeName, cs.ImageID)
				require.Equal(t, want, got, "pod %s container %s (%s) image config", p.Name, cs.Name, ref)
				seen[component]++
			}
		}
		t.Logf("containers running the release's images, by component: %v", seen)
		for _, comp := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd", "kube-proxy", "kube-dns"} {
			require.NotZero(t, seen[comp], "no %s container seen", comp)
		}
		require.Equal(t, len(c.nodes), seen["kube-proxy"], "a kube-proxy on every node")
	})

	t.Run("no image was pulled: every image came from the preload", func(t *testing.T) {
		pulls := pullEvents(t, c, start)
		t.Logf("image pulls during the plan: %d", len(pulls))
		require.Empty(t, pulls, "images pulled during the plan")
	})

	t.Run("the workload stayed available and runs", func(t *testing.T) {
		t.Logf("Deployment %s: at least %d ready replicas in %d samples during the plan", workloadName, minReady, samples)
		require.NotZero(t, samples, "the Deployment was never sampled")
		require.GreaterOrEqual(t, minReady, int32(1), "the PodDisruptionBudget keeps one replica ready")
		eventuallyDeploymentReady(t, c, workloadName, 5*time.Minute)
		waitDaemonSetReadyIn(t, c, c.namespace, workloadName+"-ds", 5*time.Minute)
	})

	t.Run("a second plan to the same release, applied with upgrade-repo upgrade apply, changes no node", func(t *testing.T) {
		snap := nodeSnapshots(t, c)
		// The estimate of a second plan, with the first one recorded, as the plan enters
		// ImagePreloading, against the time it then took.
		taken := estimateWhenEntering(t, c, kubeadmPlanAgain, apiv1beta1.PhaseImagePreloading)
		again := applyPlan(t, c, kubeadmPlanAgain, target, image, rel)
		est := taken()
		reportEstimate(t, c, again, est)
		require.False(t, est.est.First, "the second plan's estimate rests on the cluster's first plan")
		for _, n := range c.nodes {
			ns := again.Status.NodeUpgradeStatuses[n.Name]
			require.Equal(t, apiv1beta1.NodeUpgraded, ns.State, "row of %s in the second plan", n.Name)
		}
		require.Equal(t, snap, nodeSnapshots(t, c), "kubelet restarts, binaries and static pod manifests are unchanged")
	})
}

// runKubeadmPlan creates the plan and waits for it to succeed, logging each phase and each change
// of a node's row.
func runKubeadmPlan(t *testing.T, c *cluster, name, version, image string) *apiv1beta1.UpgradePlan {
	t.Helper()
	deleteObject(t, c, &apiv1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: name}})
	_ = os.Remove(filepath.Join(c.artifacts, "status-"+name+".log")) // a log of this run only
	_ = os.Remove(filepath.Join(c.artifacts, "steps-"+name+".log"))
	start := time.Now()
	defer keepStepLogs(t, c, name)()
	recreate(t, c, &apiv1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       apiv1beta1.UpgradePlanSpec{Version: version, Upgrade: &image, Mode: apiv1beta1.ModeAutomatic},
	})
	var plan apiv1beta1.UpgradePlan
	lastPhase := apiv1beta1.Phase("")
	rows := map[string]string{}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute+time.Duration(len(c.nodes))*6*time.Minute)
	defer cancel()
	err := poll(ctx, 2*time.Second, func(ctx context.Context) error {
		if err := c.cl.Get(ctx, client.ObjectKey{Name: name}, &plan); err != nil {
			return err
		}
		if plan.Status.Phase != lastPhase {
			t.Logf("+%s %s phase %s", time.Since(start).Round(time.Second), name, plan.Status.Phase)
			lastPhase = plan.Status.Phase
			operatorView(t, c, name, fmt.Sprintf("+%s", time.Since(start).Round(time.Second)))
		}
		stepLogs(t, c, name, true)
		for n, ns := range plan.Status.NodeUpgradeStatuses {
			row := fmt.Sprintf("%s kubelet %s -> %s (target %s) %s %s", ns.State, ns.KubeletVersionBefore, ns.KubeletVersion, ns.TargetKubeletVersion, ns.Reason, ns.Message)
			if rows[n] != row {
				t.Logf("+%s %s node %s: %s", time.Since(start).Round(time.Second), name, n, row)
				rows[n] = row
			}
		}
		if plan.Status.Phase == apiv1beta1.PhaseSucceeded || plan.Status.Phase == apiv1beta1.PhaseFailed {
			return nil
		}
		return fmt.Errorf("plan %s in phase %q, conditions %s", name, plan.Status.Phase, conditions(plan.Status.Conditions))
	})
	if err != nil || plan.Status.Phase != apiv1beta1.PhaseSucceeded {
		dumpPlan(t, c, &plan)
		stepLogs(t, c, name)
	}
	require.NoError(t, err, "UpgradePlan %s reaches Succeeded", name)
	require.Equal(t, apiv1beta1.PhaseSucceeded, plan.Status.Phase, "UpgradePlan %s failed in phase %s: %s",
		name, plan.Status.FailedPhase, conditions(plan.Status.Conditions))
	stepLogs(t, c, name)
	operatorView(t, c, name, "final")
	return &plan
}

// operatorView runs `upgrade-repo upgrade status PLAN`, as an operator would from outside the
// cluster, and appends its output to the artifacts (status-PLAN.log).
func operatorView(t *testing.T, c *cluster, plan, when string) {
	t.Helper()
	bin := filepath.Join(c.artifacts, "upgrade-repo")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "upgrade", "status", plan, "--kubeconfig", os.Getenv("E2E_KUBECONFIG")).CombinedOutput()
	f, ferr := os.OpenFile(filepath.Join(c.artifacts, "status-"+plan+".log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if ferr != nil {
		t.Logf("status log: %v", ferr)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "===== %s (err=%v)\n%s\n", when, err, out)
	if when == "final" {
		t.Logf("upgrade-repo upgrade status %s:\n%s", plan, out)
	}
}

// applyPlan drives a plan as an operator does, from outside the cluster: `upgrade-repo upgrade
// apply` with the release ISO's URL and checksum (the Version of that name and ISO exists and is
// reused), which judges, creates the plan and follows it to its end. Its exit status must be 0
// and its line output (not a terminal) must name the plan's phases and Succeeded.
func applyPlan(t *testing.T, c *cluster, name, version, image string, rel *testRelease) *apiv1beta1.UpgradePlan {
	t.Helper()
	deleteObject(t, c, &apiv1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: name}})
	bin := filepath.Join(c.artifacts, "upgrade-repo")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute+time.Duration(len(c.nodes))*6*time.Minute)
	defer cancel()
	args := []string{"upgrade", "apply", "--iso-url", originURL(c), "--iso-checksum", rel.checksum, "--version", version,
		"--name", name, "--upgrade-image", image, "--yes", "--timeout", "40m",
		"--namespace", c.namespace, "--kubeconfig", os.Getenv("E2E_KUBECONFIG")}
	start := time.Now()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	_ = os.WriteFile(filepath.Join(c.artifacts, "apply-"+name+".log"), out, 0o644)
	t.Logf("upgrade-repo %s\n(%s, err=%v)\n%s", strings.Join(args, " "), time.Since(start).Round(time.Second), err, tail(string(out), 40))
	stepLogs(t, c, name)
	require.NoError(t, err, "upgrade-repo upgrade apply exits 0 once the plan Succeeded")
	require.Contains(t, string(out), string(apiv1beta1.PhaseSucceeded), "apply's output names the end of the plan")
	var plan apiv1beta1.UpgradePlan
	eventually(t, time.Minute, "read plan "+name, func(ctx context.Context) error { return c.cl.Get(ctx, client.ObjectKey{Name: name}, &plan) })
	require.Equal(t, apiv1beta1.PhaseSucceeded, plan.Status.Phase)
	return &plan
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// stepLogs appends the logs of the plan's Jobs' pods to the artifacts (steps-PLAN.log): with
// finished set, only of the pods that finished and are not there yet (the plan deletes its Jobs
// when it ends, so a plan's poll saves each pod as it finishes); else of every pod not there yet.
func stepLogs(t *testing.T, c *cluster, plan string, finished ...bool) {
	t.Helper()
	stepLogsMu.Lock()
	defer stepLogsMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods, err := c.cs.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: "management.harvesterhci.io/upgrade-plan=" + plan})
	if err != nil {
		t.Logf("list the pods of plan %s: %v", plan, err)
		return
	}
	p := filepath.Join(c.artifacts, "steps-"+plan+".log")
	have, _ := os.ReadFile(p)
	var b strings.Builder
	for _, pod := range pods.Items {
		done := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
		if (len(finished) > 0 && finished[0] && !done) || strings.Contains(string(have), "===== "+pod.Name+" ") {
			continue
		}
		out, err := c.cs.CoreV1().Pods(c.namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		fmt.Fprintf(&b, "===== %s on %s (%s) err=%v\n%s\n", pod.Name, pod.Spec.NodeName, pod.Status.Phase, err, out)
	}
	f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Logf("write %s: %v", p, err)
		return
	}
	defer f.Close()
	_, _ = f.WriteString(b.String())
}

// stepLogsMu keeps stepLogs' reads and appends of a plan's log from interleaving.
var stepLogsMu sync.Mutex

// keepStepLogs saves the log of each of plan's step pods the moment it ends, as a watch reports
// it, until the function it returns is called. The plan's last node step ends seconds before
// the plan's clean-up deletes its Jobs, and the pods with them: a poll can miss it.
func keepStepLogs(t *testing.T, c *cluster, plan string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := c.cs.CoreV1().Pods(c.namespace).Watch(ctx, metav1.ListOptions{LabelSelector: "management.harvesterhci.io/upgrade-plan=" + plan})
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			for ev := range w.ResultChan() {
				if pod, ok := ev.Object.(*corev1.Pod); ok && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) {
					stepLogs(t, c, plan, true)
				}
			}
			w.Stop()
		}
	}()
	return func() { cancel(); <-done }
}

// logPhases logs how long the plan spent in each phase and writes the phase timings.
func logPhases(t *testing.T, c *cluster, plan *apiv1beta1.UpgradePlan) {
	t.Helper()
	ts := plan.Status.PhaseTransitionTimestamps
	for i, p := range ts {
		end := p.PhaseTransitionTimestamp.Time
		if i+1 < len(ts) {
			end = ts[i+1].PhaseTransitionTimestamp.Time
		}
		t.Logf("%-20s lasted %s", p.Phase, end.Sub(p.PhaseTransitionTimestamp.Time).Round(time.Second))
	}
	if len(ts) > 0 {
		writePhaseTimings(t, c, ts)
		writeNodeTimings(t, c, &plan.Status)
	}
}

// serverVersion is the API server's /version.
func serverVersion(t *testing.T, c *cluster) string {
	t.Helper()
	var v string
	eventually(t, 2*time.Minute, "read the API server's /version", func(context.Context) error {
		info, err := c.cs.Discovery().ServerVersion()
		if err != nil {
			return err
		}
		v = info.GitVersion
		return nil
	})
	return v
}

// kubeletVersions maps each node to the kubelet version it reports.
func kubeletVersions(t *testing.T, c *cluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	eventually(t, 2*time.Minute, "list the nodes", func(ctx context.Context) error {
		nodes, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, n := range nodes.Items {
			out[n.Name] = n.Status.NodeInfo.KubeletVersion
		}
		return nil
	})
	return out
}

// writeVersionTable logs the nodes' version table and writes it to the artifacts
// (versions-WHEN.txt): the kubelet version before, now, the target and the plan's state.
func writeVersionTable(t *testing.T, c *cluster, when string, before map[string]string, plan *apiv1beta1.UpgradePlan) {
	t.Helper()
	now := kubeletVersions(t, c)
	comps := componentVersions(t, c)
	var b strings.Builder
	fmt.Fprintf(&b, "%-36s %-12s %-12s %-12s %-14s %-12s %-12s %-12s %-12s %s\n", "NODE", "BEFORE", "NOW", "TARGET", "STATE",
		"APISERVER", "CTRL-MGR", "SCHEDULER", "ETCD", "MESSAGE")
	names := make([]string, 0, len(now))
	for n := range now {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		state, msg, tgt := "-", "", os.Getenv("E2E_KUBEADM_TARGET")
		if plan != nil {
			ns := plan.Status.NodeUpgradeStatuses[n]
			state, msg = string(ns.State), ns.Message
		}
		cv := comps[n]
		dash := func(s string) string {
			if s == "" {
				return "-"
			}
			return s
		}
		fmt.Fprintf(&b, "%-36s %-12s %-12s %-12s %-14s %-12s %-12s %-12s %-12s %s\n", n, before[n], now[n], tgt, state,
			dash(cv["kube-apiserver"]), dash(cv["kube-controller-manager"]), dash(cv["kube-scheduler"]), dash(cv["etcd"]), msg)
	}
	t.Logf("versions %s:\n%s", when, b.String())
	_ = os.WriteFile(filepath.Join(c.artifacts, "versions-"+when+".txt"), []byte(b.String()), 0o644)
}

// deployWorkload runs a Deployment of two replicas with a PodDisruptionBudget of one, and a
// DaemonSet, on the test image (loaded into every node: no registry needed).
func deployWorkload(t *testing.T, c *cluster) {
	t.Helper()
	testImage := os.Getenv("E2E_TEST_IMAGE")
	require.NotEmpty(t, testImage, "E2E_TEST_IMAGE")
	labels := map[string]string{"app.kubernetes.io/name": workloadName}
	// Two replicas and a budget of one; three on several control planes, where a node may be
	// lost for good: the budget must still allow the drain of another.
	replicas := int32(2)
	if c.formation == "kubeadm-ha" {
		replicas = 3
	}
	pod := corev1.PodSpec{
		Containers: []corev1.Container{{
			Name: "web", Image: testImage, ImagePullPolicy: corev1.PullIfNotPresent,
			Args:            []string{"origin", "/", ":8080"},
			Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			ReadinessProbe:  httpProbe("/healthz", 8080),
			SecurityContext: restricted(65532),
		}},
	}
	recreate(t, c, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: workloadName, Namespace: c.namespace},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}},
	})
	recreate(t, c, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: workloadName, Namespace: c.namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		},
	})
	dsLabels := map[string]string{"app.kubernetes.io/name": workloadName + "-ds"}
	dsPod := *pod.DeepCopy()
	dsPod.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	recreate(t, c, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: workloadName + "-ds", Namespace: c.namespace, Labels: dsLabels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: dsLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: dsLabels}, Spec: dsPod},
		},
	})
	eventuallyDeploymentReady(t, c, workloadName, 3*time.Minute)
	waitDaemonSetReadyIn(t, c, c.namespace, workloadName+"-ds", 3*time.Minute)
}

// systemComponents are the kube-system components whose pods the kubeadm tests judge.
var systemComponents = map[string]bool{
	"kube-apiserver": true, "kube-controller-manager": true, "kube-scheduler": true,
	"etcd": true, "kube-proxy": true, "kube-dns": true,
}

// systemComponent is the component a kube-system pod runs: its "component" label (static pods)
// or its "k8s-app" label (kube-proxy, CoreDNS).
func systemComponent(p corev1.Pod) string {
	if c := p.Labels["component"]; c != "" {
		return c
	}
	return p.Labels["k8s-app"]
}

// systemPodsRunning waits until every pod of systemComponents that has not ended is Running with
// every container ready and none is being deleted, and returns them; it fails naming the pods
// that were not.
func systemPodsRunning(t *testing.T, c *cluster, timeout time.Duration) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	var terminal []string
	eventually(t, timeout, "the control plane, kube-proxy and CoreDNS pods running", func(ctx context.Context) error {
		list, err := c.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		pods, terminal = pods[:0], terminal[:0]
		var waiting []string
		for _, p := range list.Items {
			if !systemComponents[systemComponent(p)] {
				continue
			}
			if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
				// A pod a node restart ended (reason Terminated or NodeShutdown) stays as a
				// record until garbage-collected; its replacement is what runs.
				terminal = append(terminal, fmt.Sprintf("%s on %s: %s %s", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Reason))
				continue
			}
			pods = append(pods, p)
			ready := p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil
			for _, cs := range p.Status.ContainerStatuses {
				ready = ready && cs.Ready
			}
			if !ready {
				waiting = append(waiting, fmt.Sprintf("%s on %s: %s", p.Name, p.Spec.NodeName, p.Status.Phase))
			}
		}
		if len(waiting) > 0 {
			return fmt.Errorf("not running and ready: %s", strings.Join(waiting, "; "))
		}
		return nil
	})
	if len(terminal) > 0 {
		t.Logf("ended pods left as records, not judged: %s", strings.Join(terminal, "; "))
	}
	return pods
}

// waitDaemonSetReadyIn waits until the DaemonSet in namespace has a ready pod on every node.
func waitDaemonSetReadyIn(t *testing.T, c *cluster, namespace, name string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "DaemonSet "+name+" ready on every node", func(ctx context.Context) error {
		ds, err := c.cs.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ds.Status.DesiredNumberScheduled == 0 || ds.Status.NumberReady != ds.Status.DesiredNumberScheduled {
			return fmt.Errorf("daemonset %s: %d of %d ready", name, ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
		}
		return nil
	})
}

// availability samples the workload Deployment's ready replicas until stop.
type availability struct {
	mu      sync.Mutex
	min     int32
	samples int
	// at and ready are the samples, in order.
	at       []time.Time
	ready    []int32
	cancel   context.CancelFunc
	finished chan struct{}
}

func watchAvailability(t *testing.T, c *cluster) *availability {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	a := &availability{min: 1 << 30, cancel: cancel, finished: make(chan struct{})}
	go func() {
		defer close(a.finished)
		for {
			// The API server restarts during the upgrade: a failed read is no sample.
			d, err := c.cs.AppsV1().Deployments(c.namespace).Get(ctx, workloadName, metav1.GetOptions{})
			if err == nil {
				a.mu.Lock()
				a.min = min(a.min, d.Status.ReadyReplicas)
				a.samples++
				a.at, a.ready = append(a.at, time.Now()), append(a.ready, d.Status.ReadyReplicas)
				a.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-a.finished })
	return a
}

// minOutside is the fewest ready replicas sampled outside windows, and how many samples that is.
func (a *availability) minOutside(windows [][2]time.Time) (int32, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	least, n := int32(1<<30), 0
	for i, at := range a.at {
		inside := false
		for _, w := range windows {
			inside = inside || (!at.Before(w[0]) && !at.After(w[1]))
		}
		if !inside {
			least, n = min(least, a.ready[i]), n+1
		}
	}
	return least, n
}

func (a *availability) stop() (int32, int) {
	a.cancel()
	<-a.finished
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.min, a.samples
}

// specImage is the image the pod's spec names for container name.
func specImage(p corev1.Pod, name string) string {
	for _, ctr := range p.Spec.Containers {
		if ctr.Name == name {
			return ctr.Image
		}
	}
	return ""
}

// normalizeRef writes ref as containerd names images (docker.io/library/ for short names).
func normalizeRef(ref string) string {
	first, _, found := strings.Cut(ref, "/")
	if !found {
		return "docker.io/library/" + ref
	}
	if !strings.ContainsAny(first, ".:") && first != "localhost" {
		return "docker.io/" + ref
	}
	return ref
}

// imageConfig is the config digest (the image ID) of the image a container runs, from its
// status's imageID: the CRI reports either that ID itself (sha256:HEX), or a repository digest
// (NAME@sha256:HEX, the manifest's), whose manifest the node's containerd is asked for.
func imageConfig(t *testing.T, node, imageID string) string {
	t.Helper()
	_, manifest, ok := strings.Cut(imageID, "@")
	if !ok {
		return imageID
	}
	var id string
	eventually(t, time.Minute, "read manifest "+manifest+" on "+node, func(ctx context.Context) error {
		out, err := nodeCmd(ctx, node, "ctr", "-n", "k8s.io", "content", "get", manifest)
		if err != nil {
			return err
		}
		var m struct {
			Config struct {
				Digest string `json:"digest"`
			} `json:"config"`
		}
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			return fmt.Errorf("manifest %s: %w", manifest, err)
		}
		id = m.Config.Digest
		return nil
	})
	return id
}

// pullEvents lists the kubelets' image pulls (events "Pulling") since start, in every namespace.
func pullEvents(t *testing.T, c *cluster, start time.Time) []string {
	t.Helper()
	var out []string
	eventually(t, time.Minute, "list events", func(ctx context.Context) error {
		evs, err := c.cs.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=Pulling"})
		if err != nil {
			return err
		}
		out = out[:0]
		for _, e := range evs.Items {
			at := e.LastTimestamp.Time
			if at.IsZero() {
				at = e.EventTime.Time
			}
			if at.Before(start.Add(-time.Second)) {
				continue
			}
			out = append(out, fmt.Sprintf("%s %s/%s: %s", at.Format(time.TimeOnly), e.InvolvedObject.Namespace, e.InvolvedObject.Name, e.Message))
		}
		return nil
	})
	return out
}

// nodeSnapshots records, on every node, what an upgrade changes: when the kubelet last
// started, the binaries' digests and the static pod manifests' digests.
func nodeSnapshots(t *testing.T, c *cluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range c.nodes {
		eventually(t, time.Minute, "snapshot "+n.Name, func(ctx context.Context) error {
			s, err := nodeCmd(ctx, n.Name, "sh", "-c",
				"systemctl show kubelet --property=ExecMainStartTimestamp; sha256sum /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl 2>/dev/null; "+
					"sha256sum /etc/kubernetes/manifests/*.yaml 2>/dev/null; true")
			if err != nil {
				return err
			}
			lines := strings.Split(strings.TrimSpace(s), "\n")
			slices.Sort(lines)
			out[n.Name] = strings.Join(lines, "\n")
			return nil
		})
	}
	return out
}
