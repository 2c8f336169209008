package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiv1beta1 "github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// rollbackUpgradePlan is the name of the upgrade plan TestKubeadmRollback rolls back.
const rollbackUpgradePlan = "e2e-kubeadm-soak"

// TestKubeadmRollback upgrades a kubeadm cluster (formation kubeadm) from the patch release it
// runs to the next patch of the same minor (E2E_KUBEADM_TARGET) with a soak, then rolls it back
// with `upgrade-repo upgrade rollback`: the rollback plan Succeeds, every kubelet and the API
// server are back at the version they started from, no image was pulled and no byte of any ISO
// was downloaded during the rollback (the soak kept the previous release's ISO and images), and
// the upgrade plan's soak ended RolledBack. It runs only with E2E_ROLLBACK=1, and needs the
// previous release packed as the target is (E2E_ROLLBACK_PREVIOUS_DIR with its release.iso, and
// E2E_ROLLBACK_PREVIOUS_CHECKSUM, sha512:HEX), as ../shared/tools/kind-offline.sh builds a second
// patch version of the target's minor.
func TestKubeadmRollback(t *testing.T) {
	if os.Getenv("E2E_ROLLBACK") != "1" {
		t.Skip("E2E_ROLLBACK=1 runs the rollback e2e")
	}
	c := env(t)
	if c.formation != "kubeadm" {
		t.Skip("formation kubeadm only (E2E_FORMATION=kubeadm E2E_ROLLBACK=1 make e2e)")
	}
	target, image := os.Getenv("E2E_KUBEADM_TARGET"), os.Getenv("E2E_KUBEADM_IMAGE")
	require.NotEmpty(t, target, "E2E_KUBEADM_TARGET: hack/e2e.sh packs the kubeadm release")
	require.NotEmpty(t, image, "E2E_KUBEADM_IMAGE: hack/e2e.sh builds the kubeadm upgrade image")
	prevDir, prevSum := os.Getenv("E2E_ROLLBACK_PREVIOUS_DIR"), os.Getenv("E2E_ROLLBACK_PREVIOUS_CHECKSUM")
	require.NotEmpty(t, prevDir, "E2E_ROLLBACK_PREVIOUS_DIR: the release of the version the cluster starts from")
	require.True(t, strings.HasPrefix(prevSum, "sha512:"), "E2E_ROLLBACK_PREVIOUS_CHECKSUM %q is not sha512:HEX", prevSum)
	rel := releaseISO(t)
	waitDaemonSetReady(t, c, c.release+"-agent", 8*time.Minute)

	from := serverVersion(t, c)
	before := kubeletVersions(t, c)
	t.Logf("before: API server %s, kubelets %v; target %s", from, before, target)
	for n, v := range before {
		require.Equal(t, from, v, "node %s: the rollback e2e starts from one version everywhere", n)
	}
	writeVersionTable(t, c, "before", before, nil)

	deployOrigin(t, c, rel)
	for _, n := range c.nodes {
		placeFile(t, n.Name, filepath.Join(prevDir, "release.iso"), originHostDir+"/previous.iso")
	}
	agentsFollowPlans(t, c, rel)
	recreate(t, c, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: installedConfigMap, Namespace: c.namespace},
		Data:       map[string]string{"version": from},
	})
	prevURL := strings.TrimSuffix(originURL(c), "release.iso") + "previous.iso"
	recreate(t, c, &apiv1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: from},
		Spec: apiv1beta1.VersionSpec{ISOURL: prevURL, ISOChecksum: prevSum}})
	recreate(t, c, &apiv1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: target},
		Spec: apiv1beta1.VersionSpec{ISOURL: originURL(c), ISOChecksum: rel.checksum}})

	// The upgrade, with a soak.
	upStart := time.Now()
	deleteObject(t, c, &apiv1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: rollbackUpgradePlan}})
	recreate(t, c, &apiv1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: rollbackUpgradePlan},
		Spec: apiv1beta1.UpgradePlanSpec{Version: target, Upgrade: &image, Mode: apiv1beta1.ModeAutomatic,
			Soak: &metav1.Duration{Duration: time.Hour}},
	})
	up := waitPlanEnd(t, c, rollbackUpgradePlan, nil)
	upTook := time.Since(upStart)
	require.Equal(t, apiv1beta1.PhaseSucceeded, up.Status.Phase, "upgrade: %s", conditions(up.Status.Conditions))
	for n, v := range kubeletVersions(t, c) {
		require.Equal(t, target, v, "kubelet of %s after the upgrade", n)
	}
	writeVersionTable(t, c, "after the upgrade", before, up)
	require.NotNil(t, up.Status.Soak, "the upgrade records its soak")
	require.Nil(t, up.Status.Soak.Ended, "soak: %s", up.Status.Soak.Message)
	require.Equal(t, from, up.Status.Soak.PreviousVersion)
	var tv apiv1beta1.Version
	require.NoError(t, c.cl.Get(t.Context(), client.ObjectKey{Name: target}, &tv))
	require.NotNil(t, tv.Status.Rollback, "the installed Version says until when a rollback is possible")
	require.Equal(t, from, tv.Status.Rollback.To)
	operatorView(t, c, rollbackUpgradePlan, "soaking")

	// The RepoNodes do not list the ISOs an agent keeps besides the one it works on: each node's
	// cache holds the kept copy, verified (a download in progress is NAME.partial), once the
	// soak's keeping is done. This cluster was not installed from that ISO, so the agents get it
	// now; on a cluster upgraded before, every node held it already. That the kept copy served
	// the rollback is measured below, as no ISO byte moved while it ran.
	eventually(t, 10*time.Minute, "every agent reports", func(ctx context.Context) error {
		return agentsHaveRepoNodes(ctx, c)
	})
	kept := agentCacheDir + "/" + strings.ToLower(strings.TrimPrefix(prevSum, "sha512:")) + ".iso"
	keptStart := time.Now()
	eventually(t, 10*time.Minute, "every node keeps the previous release's ISO", func(ctx context.Context) error {
		for _, n := range c.nodes {
			if _, err := nodeCmd(ctx, n.Name, "test", "-f", kept); err != nil {
				return fmt.Errorf("%s has no %s yet", n.Name, kept)
			}
		}
		return nil
	})
	t.Logf("every node kept the previous release's ISO %s after the upgrade's end", time.Since(keptStart).Round(time.Second))

	// The rollback, as an operator runs it.
	backStart := time.Now()
	bin := filepath.Join(c.artifacts, "upgrade-repo")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	out, err := exec.CommandContext(ctx, bin, "upgrade", "rollback", rollbackUpgradePlan, "--kubeconfig", os.Getenv("E2E_KUBECONFIG")).CombinedOutput()
	cancel()
	require.NoError(t, err, "upgrade rollback: %s", out)
	t.Logf("upgrade-repo upgrade rollback %s:\n%s", rollbackUpgradePlan, out)
	name := ""
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, rollbackUpgradePlan+"-rollback-") {
			name = strings.TrimSuffix(f, ":")
			break
		}
	}
	require.NotEmpty(t, name, "the rollback plan's name in %q", out)
	var isoBytes int64
	back := waitPlanEnd(t, c, name, func(rns []apiv1beta1.RepoNode) {
		for _, rn := range rns {
			if strings.EqualFold(strings.TrimPrefix(rn.Status.ISO.Checksum, "sha512:"), strings.TrimPrefix(prevSum, "sha512:")) {
				isoBytes = max(isoBytes, rn.Status.ISO.BytesFromOrigin+rn.Status.ISO.BytesFromPeers)
			}
		}
	})
	backTook := time.Since(backStart)
	require.Equal(t, apiv1beta1.PhaseSucceeded, back.Status.Phase, "rollback: %s", conditions(back.Status.Conditions))
	operatorView(t, c, name, "final")
	t.Logf("upgrade took %s, rollback %s", upTook.Round(time.Second), backTook.Round(time.Second))

	t.Run("every node is back at the previous version", func(t *testing.T) {
		require.Equal(t, from, serverVersion(t, c), "the API server's /version")
		for n, v := range kubeletVersions(t, c) {
			require.Equal(t, from, v, "kubelet of %s", n)
		}
		writeVersionTable(t, c, "after the rollback", before, back)
	})
	t.Run("no image pulled and no ISO byte downloaded during the rollback", func(t *testing.T) {
		require.Empty(t, pullEvents(t, c, backStart), "images pulled during the rollback")
		require.Zero(t, isoBytes, "ISO bytes from peers or the origin during the rollback")
	})
	t.Run("the upgrade's soak ended RolledBack", func(t *testing.T) {
		eventually(t, 3*time.Minute, "the soak ends", func(ctx context.Context) error {
			var p apiv1beta1.UpgradePlan
			if err := c.cl.Get(ctx, client.ObjectKey{Name: rollbackUpgradePlan}, &p); err != nil {
				return err
			}
			if s := p.Status.Soak; s == nil || s.EndReason != apiv1beta1.SoakRolledBack {
				return fmt.Errorf("soak %+v", s)
			}
			return nil
		})
	})
}

// agentsHaveRepoNodes returns an error until every node's agent has a RepoNode.
func agentsHaveRepoNodes(ctx context.Context, c *cluster) error {
	var rns apiv1beta1.RepoNodeList
	if err := c.cl.List(ctx, &rns); err != nil {
		return err
	}
	if len(rns.Items) < len(c.nodes) {
		return fmt.Errorf("%d of %d agents report", len(rns.Items), len(c.nodes))
	}
	return nil
}

// waitPlanEnd waits for plan name to Succeed or Fail, handing every read of the RepoNodes to
// sample (when not nil), and returns it as it ended.
func waitPlanEnd(t *testing.T, c *cluster, name string, sample func([]apiv1beta1.RepoNode)) *apiv1beta1.UpgradePlan {
	t.Helper()
	var plan apiv1beta1.UpgradePlan
	last := apiv1beta1.Phase("")
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute+time.Duration(len(c.nodes))*6*time.Minute)
	defer cancel()
	err := poll(ctx, 2*time.Second, func(ctx context.Context) error {
		if err := c.cl.Get(ctx, client.ObjectKey{Name: name}, &plan); err != nil {
			return err
		}
		if sample != nil {
			var rns apiv1beta1.RepoNodeList
			if err := c.cl.List(ctx, &rns); err == nil {
				sample(rns.Items)
			}
		}
		if plan.Status.Phase != last {
			t.Logf("+%s %s phase %s", time.Since(start).Round(time.Second), name, plan.Status.Phase)
			last = plan.Status.Phase
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
	require.NoError(t, err, "UpgradePlan %s ends", name)
	return &plan
}

// badReleasePlan is the name of the plan TestKubeadmBadRelease runs.
const badReleasePlan = "e2e-kubeadm-bad"

// TestKubeadmBadRelease runs a release whose API server exits at once (hack/e2e.sh packs it with
// BAD_COMPONENT=kube-apiserver) on a kubeadm cluster: the plan goes Failed within a bound, naming
// the first control-plane node, the component and that kubeadm restored the node's manifests; no
// other node was touched; the cluster still runs its version everywhere, with the node's own
// kubeadm; and `upgrade-repo upgrade abort` leaves no node cordoned. It runs with E2E_ROLLBACK=1
// after TestKubeadmRollback, on the cluster that test left.
func TestKubeadmBadRelease(t *testing.T) {
	if os.Getenv("E2E_ROLLBACK") != "1" {
		t.Skip("E2E_ROLLBACK=1 runs the bad release's e2e")
	}
	c := env(t)
	if c.formation != "kubeadm" {
		t.Skip("formation kubeadm only (E2E_FORMATION=kubeadm E2E_ROLLBACK=1 make e2e)")
	}
	dir, sum, version := os.Getenv("E2E_BAD_RELEASE_DIR"), os.Getenv("E2E_BAD_RELEASE_CHECKSUM"), os.Getenv("E2E_BAD_RELEASE_VERSION")
	image := os.Getenv("E2E_KUBEADM_IMAGE")
	require.NotEmpty(t, dir, "E2E_BAD_RELEASE_DIR: hack/e2e.sh packs the release built to fail")
	require.NotEmpty(t, version, "E2E_BAD_RELEASE_VERSION")
	require.True(t, strings.HasPrefix(sum, "sha512:"), "E2E_BAD_RELEASE_CHECKSUM %q is not sha512:HEX", sum)
	rel := releaseISO(t)
	waitDaemonSetReady(t, c, c.release+"-agent", 8*time.Minute)

	from := serverVersion(t, c)
	before := kubeletVersions(t, c)
	kubeadmBefore := kubeadmVersions(t, c)
	t.Logf("before: API server %s, kubelets %v, kubeadm %v", from, before, kubeadmBefore)

	deployOrigin(t, c, rel)
	for _, n := range c.nodes {
		placeFile(t, n.Name, filepath.Join(dir, "release.iso"), originHostDir+"/bad.iso")
	}
	// The release built to fail names its API server as the target's release does, and the nodes
	// still hold the target's own under that name from the upgrade TestKubeadmRollback rolled
	// back: the preload compares the digest the name points to with the release's and imports the
	// release's image, so the bad API server is what kubeadm starts.
	agentsFollowPlans(t, c, rel)
	// The installed version is the one the cluster runs (TestKubeadmRollback's plans record it
	// when it runs first; this test stands alone too).
	recreate(t, c, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: installedConfigMap, Namespace: c.namespace},
		Data:       map[string]string{"version": from},
	})
	badURL := strings.TrimSuffix(originURL(c), "release.iso") + "bad.iso"
	recreate(t, c, &apiv1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: version},
		Spec: apiv1beta1.VersionSpec{ISOURL: badURL, ISOChecksum: sum}})
	deleteObject(t, c, &apiv1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: badReleasePlan}})
	start := time.Now()
	recreate(t, c, &apiv1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: badReleasePlan},
		// The release built to fail is named as a pre-release of the target (vX.Y.Z-bad).
		Spec: apiv1beta1.UpgradePlanSpec{Version: version, Upgrade: &image, Mode: apiv1beta1.ModeAutomatic, AllowPrerelease: true},
	})
	p := waitPlanEnd(t, c, badReleasePlan, nil)
	took := time.Since(start)
	operatorView(t, c, badReleasePlan, "final")
	t.Logf("the bad release ended %s after its plan was created", took.Round(time.Second))
	require.Equal(t, apiv1beta1.PhaseFailed, p.Status.Phase, "the bad release: %s", conditions(p.Status.Conditions))
	require.Equal(t, apiv1beta1.PhaseNodeUpgrading, p.Status.FailedPhase)

	t.Run("it failed on its first control plane, saying which component and what kubeadm did", func(t *testing.T) {
		var failed []string
		for n, s := range p.Status.NodeUpgradeStatuses {
			if s.State == apiv1beta1.NodeUpgradeFailed {
				failed = append(failed, n)
				t.Logf("node %s: %s: %s", n, s.Reason, s.Message)
				for _, want := range []string{"kube-apiserver", "did not come up", "restored", "first control-plane node"} {
					require.Contains(t, s.Message, want, "node %s's message", n)
				}
			}
		}
		require.Len(t, failed, 1, "one node failed: %v", failed)
		var node corev1.Node
		require.NoError(t, c.cl.Get(t.Context(), client.ObjectKey{Name: failed[0]}, &node))
		require.Contains(t, node.Labels, "node-role.kubernetes.io/control-plane", "the first node is a control plane")
	})
	t.Run("no other node was touched", func(t *testing.T) {
		for n, s := range p.Status.NodeUpgradeStatuses {
			switch s.State {
			case apiv1beta1.NodeUpgradeFailed, "", apiv1beta1.NodeUpgradePending:
			default:
				t.Errorf("node %s: %s (%s)", n, s.State, s.Message)
			}
		}
	})
	t.Run("the cluster runs its version, with each node's own kubeadm", func(t *testing.T) {
		require.Equal(t, from, serverVersion(t, c), "the API server's /version")
		require.Equal(t, before, kubeletVersions(t, c))
		require.Equal(t, kubeadmBefore, kubeadmVersions(t, c))
	})
	t.Run("upgrade abort leaves nothing behind", func(t *testing.T) {
		bin := filepath.Join(c.artifacts, "upgrade-repo")
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		out, err := exec.CommandContext(ctx, bin, "upgrade", "abort", badReleasePlan, "--yes", "--kubeconfig", os.Getenv("E2E_KUBECONFIG")).CombinedOutput()
		cancel()
		t.Logf("upgrade-repo upgrade abort %s:\n%s", badReleasePlan, out)
		require.NoError(t, err, "upgrade abort: %s", out)
		eventually(t, 2*time.Minute, "no node cordoned", func(ctx context.Context) error {
			nodes, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, n := range nodes.Items {
				if n.Spec.Unschedulable {
					return fmt.Errorf("node %s is cordoned", n.Name)
				}
			}
			return nil
		})
		require.Equal(t, kubeadmBefore, kubeadmVersions(t, c))
		require.Equal(t, from, serverVersion(t, c))
	})
}

// kubeadmVersions maps each node to what its /usr/bin/kubeadm says it is.
func kubeadmVersions(t *testing.T, c *cluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range c.nodes {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		b, err := exec.CommandContext(ctx, "docker", "exec", n.Name, "kubeadm", "version", "-o", "short").CombinedOutput()
		cancel()
		require.NoError(t, err, "kubeadm version on %s: %s", n.Name, b)
		out[n.Name] = strings.TrimSpace(string(b))
	}
	return out
}
