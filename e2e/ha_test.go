package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiv1beta1 "github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/nodestep/kubeadm"
)

// haNodes names formation kubeadm-ha's nodes: its control planes in the order the sequencer
// upgrades them (by name), and its worker.
type haNodes struct {
	cps    []string
	worker string
}

func haFormation(t *testing.T, c *cluster) haNodes {
	t.Helper()
	var h haNodes
	for _, n := range c.nodes {
		if _, ok := n.Labels["node-role.kubernetes.io/control-plane"]; ok {
			h.cps = append(h.cps, n.Name)
		} else {
			h.worker = n.Name
		}
	}
	slices.Sort(h.cps)
	require.Len(t, h.cps, 3, "formation kubeadm-ha has three control planes")
	require.NotEmpty(t, h.worker, "formation kubeadm-ha has a worker")
	return h
}

// faults injects, while a plan runs on formation kubeadm-ha, the faults operators hit, each when
// the plan reaches the moment it names, and records what each did to the plan:
//   - the worker stopped for good (its container paused) once NodeUpgrading starts;
//   - the first control plane's container restarted during its kubelet swap;
//   - the third control plane's container paused (its etcd member with it) for 75 s before the
//     second control plane's turn;
//   - the sequencer's leader deleted while the second control plane runs `kubeadm upgrade node`;
//   - the third control plane's agent killed during its step;
//   - once every control plane is upgraded and the plan says the worker is lost,
//     `upgrade-repo upgrade skip` run for it.
type faults struct {
	t    *testing.T
	c    *cluster
	h    haNodes
	plan string

	mu   sync.Mutex
	log  []string
	done map[string]time.Time
	// pauseSeen are the rows of the second control plane and the plan's conditions seen while
	// the third was paused.
	pauseSeen []string
	// changedDuringPause is set when the second control plane's kube-apiserver manifest changed
	// while the third's etcd member was away.
	changedDuringPause string
	// lostAfter is how long after the worker stopped the plan first named it.
	lostAfter time.Duration
	lostMsg   string
	// workerPaused is when the worker was stopped.
	workerPaused time.Time
	// windows are when a control plane was paused or restarting, with a minute to recover.
	windows [][2]time.Time
	// cp1Restarted is when the first control plane was restarted; cp1Back when its row next
	// showed it Rejoining or Upgraded.
	cp1Restarted time.Time
	// cp3Paused is when the third control plane was paused.
	cp3Paused time.Time
	// etcdWaitSeen is the row of the second control plane while its step waited for etcd.
	etcdWaitSeen string
	cancel       context.CancelFunc
	finished     chan struct{}
}

func (f *faults) note(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	line := fmt.Sprintf("%s "+format, append([]any{time.Now().UTC().Format(time.TimeOnly)}, args...)...)
	f.log = append(f.log, line)
	f.t.Log("fault: " + line)
}

func (f *faults) did(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.done[name]
	return ok
}

func (f *faults) mark(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done[name] = time.Now()
}

func docker(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// injectFaults starts the injector; stop ends it and returns its record.
func injectFaults(t *testing.T, c *cluster, h haNodes, plan string) *faults {
	ctx, cancel := context.WithCancel(t.Context())
	f := &faults{t: t, c: c, h: h, plan: plan, done: map[string]time.Time{}, cancel: cancel, finished: make(chan struct{})}
	go func() {
		defer close(f.finished)
		for {
			f.step(ctx)
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second):
			}
		}
	}()
	t.Cleanup(func() {
		f.stop()
		// Whatever happened, leave no node paused.
		for _, n := range append(slices.Clone(h.cps), h.worker) {
			_ = docker(context.Background(), "unpause", n)
		}
	})
	return f
}

// windowsList returns the faults' windows.
func (f *faults) windowsList() [][2]time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.windows)
}

func (f *faults) window(from time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.windows = append(f.windows, [2]time.Time{from, time.Now().Add(time.Minute)})
}

func (f *faults) stop() {
	f.cancel()
	<-f.finished
}

// step looks at the plan once and injects what is due.
func (f *faults) step(ctx context.Context) {
	var p apiv1beta1.UpgradePlan
	if err := f.c.cl.Get(ctx, client.ObjectKey{Name: f.plan}, &p); err != nil {
		return // the API server restarts during the upgrade
	}
	rows := p.Status.NodeUpgradeStatuses
	cp1, cp2, cp3, w := f.h.cps[0], f.h.cps[1], f.h.cps[2], f.h.worker
	switch {
	case p.Status.Phase == apiv1beta1.PhaseNodeUpgrading && !f.did("worker-stopped"):
		f.mark("worker-stopped")
		f.workerPaused = time.Now()
		f.note("worker %s stopped for good (container paused) as NodeUpgrading starts: %v", w, docker(ctx, "pause", w))
	case !f.did("cp1-restarted") && isStepping(rows[cp1]) && strings.HasPrefix(rows[cp1].Message, "kubelet v") && strings.Contains(rows[cp1].Message, " -> "):
		// The step reports "kubelet vOLD -> vNEW" once kubeadm is done, as it swaps the binaries.
		f.mark("cp1-restarted")
		f.cp1Restarted = time.Now()
		f.note("control plane %s restarted during its kubelet swap (row: %s %s): %v", cp1, rows[cp1].State, rows[cp1].Message, docker(ctx, "restart", cp1))
	case f.did("cp1-restarted") && !f.did("cp1-back") && (rows[cp1].State == apiv1beta1.NodeRejoining || rows[cp1].State == apiv1beta1.NodeUpgraded):
		f.mark("cp1-back")
		f.window(f.cp1Restarted)
	case !f.did("cp3-paused") && rows[cp1].State == apiv1beta1.NodeUpgraded && (rows[cp2].State == apiv1beta1.NodeCordoned || isStepping(rows[cp2])):
		// Once the gate let the second control plane go (cordoned and drained, its Job next):
		// its step must see the third's member away and wait.
		f.mark("cp3-paused")
		f.cp3Paused = time.Now()
		before := manifestTag(ctx, cp2)
		f.note("control plane %s paused (its etcd member unhealthy) before %s's turn; %s's kube-apiserver at %s: %v", cp3, cp2, cp2, before, docker(ctx, "pause", cp3))
		go f.holdPaused(ctx, cp2, cp3, before)
	case f.did("cp3-unpaused") && !f.did("leader-deleted") && isStepping(rows[cp2]) && strings.Contains(rows[cp2].Message, "kubeadm upgrade node") &&
		!strings.Contains(rows[cp2].Message, "waiting"):
		f.mark("leader-deleted")
		f.note("sequencer leader deleted while %s runs kubeadm upgrade node: %s", cp2, f.deleteLeader(ctx))
	case !f.did("agent-killed") && isStepping(rows[cp3]):
		f.mark("agent-killed")
		f.note("agent of %s killed during its step (row: %s %s): %s", cp3, rows[cp3].State, rows[cp3].Message, f.killAgent(ctx, cp3))
	case f.did("worker-stopped") && !f.did("worker-skipped"):
		deg := degraded(p)
		if deg != nil && deg.Reason == "NodeNotReady" && strings.Contains(deg.Message, w) {
			f.mu.Lock()
			if f.lostMsg == "" {
				f.lostAfter, f.lostMsg = time.Since(f.workerPaused).Round(time.Second), deg.Message
			}
			f.mu.Unlock()
		}
		allCP := true
		for _, n := range f.h.cps {
			allCP = allCP && rows[n].State == apiv1beta1.NodeUpgraded
		}
		if allCP && f.lostMsg != "" {
			f.mark("worker-skipped")
			out, err := upgradeRepo(ctx, "skip", f.plan, w)
			f.note("every control plane upgraded; the plan said after %s: %q; upgrade-repo upgrade skip %s %s: err=%v\n%s", f.lostAfter, f.lostMsg, f.plan, w, err, out)
		}
	}
}

// holdPaused keeps cp3 paused for 75 s, watching cp2's row and kube-apiserver manifest, then
// unpauses it.
func (f *faults) holdPaused(ctx context.Context, cp2, cp3, before string) {
	end := time.Now().Add(75 * time.Second)
	seen := map[string]bool{}
	for time.Now().Before(end) && ctx.Err() == nil {
		var p apiv1beta1.UpgradePlan
		if err := f.c.cl.Get(ctx, client.ObjectKey{Name: f.plan}, &p); err == nil {
			r := p.Status.NodeUpgradeStatuses[cp2]
			if strings.Contains(r.Message, "waiting for every etcd member to be healthy") {
				f.mu.Lock()
				f.etcdWaitSeen = r.Message
				f.mu.Unlock()
			}
			line := fmt.Sprintf("%s %s: %s %s %s", cp2, r.State, r.Reason, r.Message, "| plan: "+conditions(p.Status.Conditions))
			if !seen[line] {
				seen[line] = true
				f.mu.Lock()
				f.pauseSeen = append(f.pauseSeen, line)
				f.mu.Unlock()
			}
		}
		if now := manifestTag(ctx, cp2); now != "" && before != "" && now != before {
			f.mu.Lock()
			f.changedDuringPause = fmt.Sprintf("%s's kube-apiserver went %s -> %s while %s was paused", cp2, before, now, cp3)
			f.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(3 * time.Second):
		}
	}
	f.note("control plane %s unpaused after 75 s: %v", cp3, docker(context.Background(), "unpause", cp3))
	f.mark("cp3-unpaused")
	f.window(end.Add(-75 * time.Second))
}

// isStepping reports whether a row is in its node step.
func isStepping(r apiv1beta1.NodeUpgradeStatus) bool {
	return r.State == apiv1beta1.NodeKubernetesUpgrading || r.State == apiv1beta1.NodeUpgrading
}

func degraded(p apiv1beta1.UpgradePlan) *metav1.Condition {
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == apiv1beta1.ConditionDegraded && c.Status == metav1.ConditionTrue {
			return c
		}
	}
	return nil
}

// manifestTag is the tag of the kube-apiserver image in node's static pod manifest; "" when it
// cannot be read.
func manifestTag(ctx context.Context, node string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := nodeCmd(ctx, node, "grep", "-o", "kube-apiserver:[^\"' ]*", "/etc/kubernetes/manifests/kube-apiserver.yaml")
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(strings.TrimSpace(out), "kube-apiserver:")
}

func (f *faults) deleteLeader(ctx context.Context) string {
	lease, err := f.c.cs.CoordinationV1().Leases(f.c.namespace).Get(ctx, "upgrade-repo-sequencer", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return fmt.Sprintf("no leader read: %v", err)
	}
	pod, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
	err = f.c.cs.CoreV1().Pods(f.c.namespace).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	return fmt.Sprintf("pod %s (lease holder %s): %v", pod, *lease.Spec.HolderIdentity, err)
}

func (f *faults) killAgent(ctx context.Context, node string) string {
	pods, err := f.c.cs.CoreV1().Pods(f.c.namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, f.c.release+"-agent-") {
			err := f.c.cs.CoreV1().Pods(f.c.namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			return fmt.Sprintf("pod %s: %v", p.Name, err)
		}
	}
	return "no agent pod on the node"
}

// upgradeRepo runs `upgrade-repo upgrade VERB --kubeconfig FILE ARGS...`, the CLI built for the
// e2e, against the cluster (the flags before the arguments, as Go's flag package reads them).
func upgradeRepo(ctx context.Context, verb string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	bin := filepath.Join(os.Getenv("E2E_ARTIFACTS"), "upgrade-repo")
	argv := append([]string{"upgrade", verb, "--kubeconfig", os.Getenv("E2E_KUBECONFIG")}, args...)
	out, err := exec.CommandContext(ctx, bin, argv...).CombinedOutput()
	return string(out), err
}

// etcdReading reads every etcd member's health from the host, with the certificates of node's
// member, as the node step does.
func etcdReading(t *testing.T, node string) kubeadm.EtcdQuorum {
	t.Helper()
	root := t.TempDir()
	for _, f := range []string{"etc/kubernetes/manifests/etcd.yaml", "etc/kubernetes/pki/etcd/ca.crt",
		"etc/kubernetes/pki/etcd/healthcheck-client.crt", "etc/kubernetes/pki/etcd/healthcheck-client.key"} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755))
		var out string
		eventually(t, time.Minute, "read "+f+" on "+node, func(ctx context.Context) error {
			var err error
			out, err = nodeCmd(ctx, node, "cat", "/"+f)
			return err
		})
		require.NoError(t, os.WriteFile(filepath.Join(root, f), []byte(out), 0o600))
	}
	ec, err := kubeadm.NewEtcdClient(root)
	require.NoError(t, err)
	var q kubeadm.EtcdQuorum
	var members []kubeadm.EtcdMember
	eventually(t, 3*time.Minute, "every etcd member healthy", func(ctx context.Context) error {
		m, err := ec.Members(ctx)
		if err != nil {
			return err
		}
		members, q = m, kubeadm.JudgeEtcd(m)
		if !q.OK() {
			return fmt.Errorf("%s", q)
		}
		return nil
	})
	t.Logf("etcd read through %s: %s (members %v)", node, q, members)
	return q
}

// componentVersions maps each control-plane node to the tags of its static pods' images.
func componentVersions(t *testing.T, c *cluster) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	eventually(t, 2*time.Minute, "list kube-system pods", func(ctx context.Context) error {
		pods, err := c.cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "tier=control-plane"})
		if err != nil {
			return err
		}
		clear(out)
		for _, p := range pods.Items {
			comp := p.Labels["component"]
			if out[p.Spec.NodeName] == nil {
				out[p.Spec.NodeName] = map[string]string{}
			}
			img := specImage(p, comp)
			if img == "" && len(p.Spec.Containers) > 0 {
				img = p.Spec.Containers[0].Image
			}
			out[p.Spec.NodeName][comp] = img[strings.LastIndex(img, ":")+1:]
		}
		return nil
	})
	return out
}

// kubeadmTimes sums, per node, the seconds the kubeadm commands of a plan's steps took, from
// the steps' logs (steps-PLAN.log: `msg=done command="kubeadm upgrade ..." seconds=...`).
func kubeadmTimes(t *testing.T, c *cluster, plan string) (map[string]float64, map[string]int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.artifacts, "steps-"+plan+".log"))
	require.NoError(t, err)
	secs, runs := map[string]float64{}, map[string]int{}
	node := ""
	header := regexp.MustCompile(`^===== \S+ on (\S+) `)
	done := regexp.MustCompile(`command="kubeadm upgrade (apply|node)[^"]*" seconds=([0-9.]+)`)
	for _, line := range strings.Split(string(b), "\n") {
		if m := header.FindStringSubmatch(line); m != nil {
			node = m[1]
			continue
		}
		if m := done.FindStringSubmatch(line); m != nil {
			s, _ := strconv.ParseFloat(m[2], 64)
			secs[node] += s
			runs[node]++
		}
	}
	return secs, runs
}

// phaseDuration is how long the plan spent in phase.
func phaseDuration(p *apiv1beta1.UpgradePlan, phase apiv1beta1.Phase) time.Duration {
	ts := p.Status.PhaseTransitionTimestamps
	for i, x := range ts {
		if x.Phase == phase && i+1 < len(ts) {
			return ts[i+1].PhaseTransitionTimestamp.Sub(x.PhaseTransitionTimestamp.Time)
		}
	}
	return 0
}

// waitNodePlan waits for the plan that `upgrade-repo upgrade node NODE` created to succeed.
func waitNodePlan(t *testing.T, c *cluster, node string) *apiv1beta1.UpgradePlan {
	t.Helper()
	var found apiv1beta1.UpgradePlan
	eventually(t, 20*time.Minute, "the plan of node "+node+" succeeds", func(ctx context.Context) error {
		var plans apiv1beta1.UpgradePlanList
		if err := c.cl.List(ctx, &plans); err != nil {
			return err
		}
		for _, p := range plans.Items {
			if o := p.Spec.NodeUpgradeOption; o != nil && slices.Equal(o.Nodes, []string{node}) {
				found = p
				if p.Status.Phase == apiv1beta1.PhaseSucceeded {
					return nil
				}
				if p.Status.Phase == apiv1beta1.PhaseFailed {
					return fmt.Errorf("plan %s failed: %s", p.Name, conditions(p.Status.Conditions))
				}
				return fmt.Errorf("plan %s in %s: %s", p.Name, p.Status.Phase, conditions(p.Status.Conditions))
			}
		}
		return fmt.Errorf("no plan limited to node %s", node)
	})
	return &found
}

// waitNodeReady waits for node to be Ready.
func waitNodeReady(t *testing.T, c *cluster, node string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "node "+node+" Ready", func(ctx context.Context) error {
		n, err := c.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s not Ready", node)
	})
}

// haChecks checks, after the plan of formation kubeadm-ha, what each fault did, the rows of the
// control planes and of the skipped worker, etcd, and the timings; then brings the worker back
// and upgrades it alone with `upgrade-repo upgrade node`.
func haChecks(t *testing.T, c *cluster, h haNodes, f *faults, plan *apiv1beta1.UpgradePlan, before map[string]string, target string) {
	t.Helper()
	writeVersionTable(t, c, "after-plan", before, plan)
	t.Run("HA: every fault was injected and the plan rode it out", func(t *testing.T) {
		f.mu.Lock()
		defer f.mu.Unlock()
		_ = os.WriteFile(filepath.Join(c.artifacts, "faults-kubeadm-ha.log"), []byte(strings.Join(f.log, "\n")+"\n\nwhile paused:\n"+strings.Join(f.pauseSeen, "\n")+"\n"), 0o644)
		for _, name := range []string{"worker-stopped", "cp1-restarted", "cp3-paused", "cp3-unpaused", "leader-deleted", "agent-killed", "worker-skipped"} {
			_, ok := f.done[name]
			require.True(t, ok, "fault %s was never injected: the plan did not reach its moment (log: %v)", name, f.log)
		}
		t.Logf("while %s was paused, %s and the plan showed:\n%s", h.cps[2], h.cps[1], strings.Join(f.pauseSeen, "\n"))
		if checked := etcdCheckedBefore(t, c, plan.Name, h.cps[1]); f.changedDuringPause != "" && !checked.IsZero() && checked.Before(f.cp3Paused) {
			// The step checks every etcd member before it changes anything; a fault injected
			// after that check, while kubeadm already runs, does not test that gate.
			t.Logf("the pause came late: %s's step found every etcd member healthy at %s, before the pause at %s (%s)",
				h.cps[1], checked.UTC().Format(time.RFC3339), f.cp3Paused.UTC().Format(time.RFC3339), f.changedDuringPause)
		} else {
			require.Empty(t, f.changedDuringPause, "no control plane is taken down while an etcd member is away")
		}
		// Which gate holds the second control plane depends on timing: its drain, the
		// sequencer's gate (the third node's pods, then the node, not Ready), or its step's etcd
		// reading (unit-tested in nodestep/kubeadm); what must hold is that it did not go down.
		t.Logf("the second control plane's step, while the third was paused: %q (empty: held before its step)", f.etcdWaitSeen)
		require.Contains(t, f.lostMsg, "upgrade-repo upgrade skip "+h.worker, "the plan names the lost worker and the command")
		require.Less(t, f.lostAfter, 5*time.Minute, "the plan names a lost worker within minutes")
	})
	t.Run("HA: the control planes' rows carry their components at the target; the worker's says Skipped", func(t *testing.T) {
		etcdTag := os.Getenv("E2E_KUBEADM_ETCD")
		for _, n := range h.cps {
			r := plan.Status.NodeUpgradeStatuses[n]
			require.Equal(t, apiv1beta1.NodeUpgraded, r.State, "row of %s: %s", n, r.Message)
			require.NotNil(t, r.ControlPlane, "row of %s has its components' versions", n)
			require.Equal(t, [3]string{target, target, target}, [3]string{r.ControlPlane.APIServer, r.ControlPlane.ControllerManager, r.ControlPlane.Scheduler}, "row of %s", n)
			if etcdTag != "" {
				require.Equal(t, etcdTag, r.ControlPlane.Etcd, "row of %s: etcd", n)
			}
		}
		w := plan.Status.NodeUpgradeStatuses[h.worker]
		require.Equal(t, apiv1beta1.NodeSkipped, w.State, "row of %s: %s", h.worker, w.Message)
		require.Equal(t, before[h.worker], w.KubeletVersion, "the skipped worker stays at its version")
	})
	t.Run("HA: etcd has every member healthy after the plan", func(t *testing.T) {
		q := etcdReading(t, h.cps[0])
		require.Equal(t, 3, q.Members)
	})
	t.Run("HA: NodeUpgrading against the kubeadm commands' own time", func(t *testing.T) {
		secs, runs := kubeadmTimes(t, c, plan.Name)
		var sum float64
		for _, s := range secs {
			sum += s
		}
		wall := phaseDuration(plan, apiv1beta1.PhaseNodeUpgrading)
		ratio := 0.0
		if sum > 0 {
			ratio = wall.Seconds() / sum
		}
		line := fmt.Sprintf("NodeUpgrading %s; kubeadm commands %.0fs in all (per node %v, runs %v); ratio %.2f (faults included)", wall.Round(time.Second), sum, secs, runs, ratio)
		t.Log(line)
		_ = os.WriteFile(filepath.Join(c.artifacts, "ha-timings.txt"), []byte(line+"\n"), 0o644)
		for _, n := range h.cps {
			require.NotZero(t, runs[n], "the step of %s ran kubeadm", n)
		}
	})
	t.Run("HA: the worker, back, is upgraded alone by upgrade-repo upgrade node", func(t *testing.T) {
		require.NoError(t, docker(t.Context(), "unpause", h.worker))
		waitNodeReady(t, c, h.worker, 5*time.Minute)
		out, err := upgradeRepo(t.Context(), "node", h.worker)
		t.Logf("upgrade-repo upgrade node %s: err=%v\n%s", h.worker, err, out)
		require.NoError(t, err)
		start := time.Now()
		p := waitNodePlan(t, c, h.worker)
		t.Logf("plan %s of node %s succeeded in %s", p.Name, h.worker, time.Since(start).Round(time.Second))
		stepLogs(t, c, p.Name)
		require.Len(t, p.Status.NodeUpgradeStatuses, 1, "the plan touched the worker alone")
		require.Equal(t, apiv1beta1.NodeUpgraded, p.Status.NodeUpgradeStatuses[h.worker].State)
		require.Equal(t, target, kubeletVersions(t, c)[h.worker])
		writeVersionTable(t, c, "after-node", before, p)
	})
}

// etcdCheckedBefore is when node's step of plan last found every etcd member healthy before it
// ran kubeadm, from the step's log; zero when the log does not say.
func etcdCheckedBefore(t *testing.T, c *cluster, plan, node string) time.Time {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.artifacts, "steps-"+plan+".log"))
	if err != nil {
		return time.Time{}
	}
	re := regexp.MustCompile(`^time=(\S+) .*msg="etcd healthy" .*node=` + regexp.QuoteMeta(node) + ` .*when="before kubeadm upgrade`)
	var at time.Time
	for _, line := range strings.Split(string(b), "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			if ts, err := time.Parse(time.RFC3339Nano, m[1]); err == nil && ts.After(at) {
				at = ts
			}
		}
	}
	return at
}
