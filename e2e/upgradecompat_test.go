package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	apiv1beta1 "github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/release/pack"
)

// compatPlanName is the plan of the compatibility test: a DNS label, as the names the product's
// scripts derive from it must be.
const compatPlanName = "e2e-compat"

// compatRequest is one request the script image made: a line of its requests.tsv.
type compatRequest struct {
	step, what, command, url, outcome, detail string
}

// TestCompatScriptSteps runs a whole plan in compatibility mode (the chart's compat.enabled,
// hack/e2e.sh) whose upgrade image (E2E_SCRIPT_IMAGE, hack/e2e-scriptimage.sh) makes the
// requests the product's own upgrade scripts make, with their tools, at the names they derive
// from the upgrade's name: http://upgrade-repo-<plan>.harvester-system/harvester-iso. While the
// plan uses its repo, the sequencer publishes an ExternalName Service aliasing the agents'
// Service and a zero-replica Deployment that is Available with no pod; the cluster step waits for
// that Deployment with `kubectl wait` and `kubectl rollout status`, reads the 15 keys with `yq -e`
// and every list, and makes the controller's GETs under /harvester-iso/ and /; each node step
// imports every archive with `curl -fL BUNDLE//ARCHIVE | zstdcat | ctr images import`, downloads
// rootfs.squashfs with --create-dirs, and gets a // path without -L. The plan Succeeds, every
// request succeeded with the bytes of the release, every node's containerd holds every image,
// and the compatibility objects are gone. The requests and their outcome go to the log and to
// E2E_ARTIFACTS/compat-requests-FORMATION.tsv.
func TestCompatScriptSteps(t *testing.T) {
	c := env(t)
	rel := releaseISO(t)
	image := os.Getenv("E2E_SCRIPT_IMAGE")
	if image == "" {
		t.Skip("E2E_SCRIPT_IMAGE is not set: hack/e2e-scriptimage.sh builds the script image and hack/e2e.sh enables compat mode")
	}
	compatNS := getenv("E2E_COMPAT_NAMESPACE", "harvester-system")
	meta := releaseMetadata(t, rel)
	if agentsFollow(t, c) {
		// Following the plans with none holding an ISO (TestUpgrade's released it), the agents
		// serve nothing and are not Ready: they run and report.
		agentsReport(t, c, 8*time.Minute, func(apiv1beta1.RepoNodeStatus) error { return nil })
	} else {
		waitDaemonSetReady(t, c, c.release+"-agent", 8*time.Minute)
	}
	requireCompatMode(t, c, compatNS)
	deployOrigin(t, c, rel)
	if !agentsFollow(t, c) {
		agentsFollowPlans(t, c, rel)
	}

	// A fresh start: no results or step records of an earlier run.
	deleteObject(t, c, &apiv1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: compatPlanName}})
	eventually(t, time.Minute, "remove earlier results", func(ctx context.Context) error {
		return c.cl.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(c.namespace), client.MatchingLabels{"e2e-compat": compatPlanName})
	})
	for _, n := range c.nodes {
		eventually(t, time.Minute, "remove the step records of "+n.Name, func(ctx context.Context) error {
			_, err := nodeCmd(ctx, n.Name, "rm", "-rf", "/var/lib/upgrade-repo-e2e/scripts")
			return err
		})
	}
	recreate(t, c, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: installedConfigMap, Namespace: c.namespace},
		Data:       map[string]string{"version": meta.MinUpgradableVersion},
	})
	recreate(t, c, &apiv1beta1.Version{
		ObjectMeta: metav1.ObjectMeta{Name: meta.Harvester},
		Spec:       apiv1beta1.VersionSpec{ISOURL: originURL(c), ISOChecksum: rel.checksum},
	})
	recreate(t, c, &apiv1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: compatPlanName},
		Spec: apiv1beta1.UpgradePlanSpec{
			Version: meta.Harvester, Upgrade: &image, Mode: apiv1beta1.ModeAutomatic,
			NodeUpgradeOption: &apiv1beta1.NodeUpgradeOption{Concurrency: 1},
		},
	})
	t.Logf("UpgradePlan %s with the script image %s, compatibility names in %s", compatPlanName, image, compatNS)

	// Follow the plan; while it uses its repo, check what the sequencer publishes.
	var plan apiv1beta1.UpgradePlan
	published := map[apiv1beta1.Phase]string{}
	eventually(t, 20*time.Minute, "plan "+compatPlanName+" finished", func(ctx context.Context) error {
		if err := c.cl.Get(ctx, client.ObjectKey{Name: compatPlanName}, &plan); err != nil {
			return err
		}
		ph := plan.Status.Phase
		if i := phaseIndex(ph); i > phaseIndex(apiv1beta1.PhaseRepoCreating) && i < phaseIndex(apiv1beta1.PhaseCleaningUp) {
			if _, seen := published[ph]; !seen {
				published[ph] = checkCompatObjects(ctx, c, compatNS, &plan)
			}
		}
		switch ph {
		case apiv1beta1.PhaseSucceeded, apiv1beta1.PhaseFailed:
			return nil
		}
		return fmt.Errorf("phase %s %s", ph, conditions(plan.Status.Conditions))
	})
	results := readCompatResults(t, c)
	writeCompatRequests(t, c, results)
	if plan.Status.Phase != apiv1beta1.PhaseSucceeded {
		dumpPlan(t, c, &plan)
	}
	require.Equal(t, apiv1beta1.PhaseSucceeded, plan.Status.Phase, "plan %s: %s", compatPlanName, conditions(plan.Status.Conditions))
	require.NotEmpty(t, published, "the plan was never seen between RepoCreated and CleaningUp")
	for ph, problem := range published {
		require.Empty(t, problem, "compatibility objects in phase %s", ph)
	}

	// CleaningUp removed the compatibility objects.
	name := "upgrade-repo-" + compatPlanName
	eventually(t, time.Minute, "compatibility objects removed", func(ctx context.Context) error {
		for _, o := range []client.Object{&corev1.Service{}, &appsv1.Deployment{}} {
			if err := c.cl.Get(ctx, client.ObjectKey{Namespace: compatNS, Name: name}, o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s/%s still there (%v)", o, compatNS, name, err)
			}
		}
		return nil
	})

	checkClusterStep(t, rel, results["cluster"])
	for _, n := range c.nodes {
		checkNodeStep(t, rel, n.Name, results["node-"+n.Name])
		requireImages(t, n.Name, rel.refs())
	}
}

// requireCompatMode checks that hack/e2e.sh installed the chart in compatibility mode.
func requireCompatMode(t *testing.T, c *cluster, ns string) {
	t.Helper()
	d, err := c.cs.AppsV1().Deployments(c.namespace).Get(t.Context(), c.release+"-sequencer", metav1.GetOptions{})
	require.NoError(t, err)
	require.Contains(t, d.Spec.Template.Spec.Containers[0].Args, "--compat-namespace="+ns,
		"the sequencer is not in compatibility mode: hack/e2e.sh installs the chart with compat.enabled=true")
	_, err = c.cs.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
	require.NoError(t, err, "namespace %s", ns)
}

// agentsFollow reports whether the agents already follow the plans (an earlier test turned them so).
func agentsFollow(t *testing.T, c *cluster) bool {
	t.Helper()
	ds, err := c.cs.AppsV1().DaemonSets(c.namespace).Get(t.Context(), c.release+"-agent", metav1.GetOptions{})
	require.NoError(t, err)
	return !slices.ContainsFunc(ds.Spec.Template.Spec.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--iso-url=") })
}

// checkCompatObjects says what is wrong with the plan's compatibility objects, or "" when the
// Service aliases the agents' Service and the Deployment is Available with no pod.
func checkCompatObjects(ctx context.Context, c *cluster, ns string, plan *apiv1beta1.UpgradePlan) string {
	name := "upgrade-repo-" + plan.Name
	svc, err := c.cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "service: " + err.Error()
	}
	want := fmt.Sprintf("%s.%s.svc.cluster.local", c.release, c.namespace)
	if svc.Spec.Type != corev1.ServiceTypeExternalName || svc.Spec.ExternalName != want {
		return fmt.Sprintf("service %s/%s is %s to %q, want ExternalName to %q", ns, name, svc.Spec.Type, svc.Spec.ExternalName, want)
	}
	if ref := metav1.GetControllerOf(svc); ref == nil || ref.UID != plan.UID {
		return "service " + name + " is not owned by the plan"
	}
	var problem string
	// The deployment controller needs a moment after the Deployment appears.
	err = poll(ctx, time.Second, func(ctx context.Context) error {
		d, err := c.cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
			problem = fmt.Sprintf("deployment %s has %v replicas, want 0", name, d.Spec.Replicas)
			return nil
		}
		for _, cond := range d.Status.Conditions {
			if cond.Type == appsv1.DeploymentAvailable && cond.Status == corev1.ConditionTrue {
				pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
				if err != nil {
					return err
				}
				if len(pods.Items) > 0 {
					problem = fmt.Sprintf("deployment %s runs %d pods", name, len(pods.Items))
				}
				return nil
			}
		}
		return fmt.Errorf("deployment %s is not Available: %+v", name, d.Status.Conditions)
	})
	if err != nil {
		return err.Error()
	}
	return problem
}

// readCompatResults reads the requests each step left in its ConfigMap, by step ("cluster",
// "node-NODE").
func readCompatResults(t *testing.T, c *cluster) map[string][]compatRequest {
	t.Helper()
	var cms corev1.ConfigMapList
	eventually(t, time.Minute, "list the steps' results", func(ctx context.Context) error {
		return c.cl.List(ctx, &cms, client.InNamespace(c.namespace), client.MatchingLabels{"e2e-compat": compatPlanName})
	})
	out := map[string][]compatRequest{}
	for _, cm := range cms.Items {
		step := strings.TrimPrefix(cm.Name, "e2e-compat-")
		sc := bufio.NewScanner(strings.NewReader(cm.Data["requests.tsv"]))
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), "\t", 5)
			if len(f) < 5 {
				continue
			}
			out[step] = append(out[step], compatRequest{step: step, what: f[0], command: f[1], url: f[2], outcome: f[3], detail: f[4]})
		}
	}
	return out
}

// writeCompatRequests logs every request and its outcome and writes them to
// E2E_ARTIFACTS/compat-requests-FORMATION.tsv.
func writeCompatRequests(t *testing.T, c *cluster, results map[string][]compatRequest) {
	t.Helper()
	steps := make([]string, 0, len(results))
	for s := range results {
		steps = append(steps, s)
	}
	slices.Sort(steps)
	var b strings.Builder
	b.WriteString("step\twhat\tcommand\turl\toutcome\tdetail\n")
	for _, s := range steps {
		for _, r := range results[s] {
			fmt.Fprintf(&b, "%s\t%s\t%s\t%s\t%s\t%s\n", r.step, r.what, r.command, r.url, r.outcome, r.detail)
		}
	}
	t.Logf("requests made by the script steps:\n%s", b.String())
	p := filepath.Join(c.artifacts, "compat-requests-"+c.formation+".tsv")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Logf("write %s: %v", p, err)
	}
}

// fileSum is the sha256 of a file of the release's tree, as the steps print it; "" when the
// release has no such file.
func fileSum(t *testing.T, rel *testRelease, p string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(rel.tree, filepath.FromSlash(p)))
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	require.NoError(t, err)
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

func requireNoFailure(t *testing.T, step string, reqs []compatRequest) {
	t.Helper()
	require.NotEmpty(t, reqs, "step %s left no results", step)
	for _, r := range reqs {
		require.NotEqual(t, "FAILED", r.outcome, "step %s: %s %s %s: %s", step, r.what, r.command, r.url, r.detail)
	}
}

func checkClusterStep(t *testing.T, rel *testRelease, reqs []compatRequest) {
	t.Helper()
	requireNoFailure(t, "cluster", reqs)
	count := func(what, outcome string) int {
		n := 0
		for _, r := range reqs {
			if r.what == what && (outcome == "" || r.outcome == outcome) {
				n++
			}
		}
		return n
	}
	require.Equal(t, 3, count("wait_repo", "ok"), "kubectl wait, kubectl rollout status and the release file")

	// The 15 keys the scripts read with yq -e hold the release's values.
	raw, err := os.ReadFile(filepath.Join(rel.tree, "harvester-release.yaml"))
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	keys := map[string]string{}
	for _, r := range reqs {
		if r.what == "release-key" && r.command == "yq -e e" {
			keys[r.url] = r.detail
		}
	}
	require.Len(t, keys, len(pack.ScriptReleaseKeys))
	for _, k := range pack.ScriptReleaseKeys {
		var v any = doc
		for _, part := range strings.Split(strings.TrimPrefix(k, "."), ".") {
			v = v.(map[string]any)[part]
		}
		require.Equal(t, fmt.Sprint(v), keys[k], "key %s", k)
	}

	// Every group of the metadata, and the controller's GETs with the release's bytes.
	bundleGroups := map[string]bool{}
	for _, a := range rel.res.Archives {
		bundleGroups[a.Group] = true
	}
	require.Equal(t, len(bundleGroups), count("bundle-group", "ok"))
	require.Equal(t, len(rel.res.Archives), count("image-list", "ok"))
	for _, r := range reqs {
		if r.what != "controller" {
			continue
		}
		p := r.url[strings.Index(r.url, "/bundle/")+1:]
		if strings.HasSuffix(r.url, "/harvester-release.yaml") {
			p = "harvester-release.yaml"
		}
		want := fileSum(t, rel, p)
		if want == "" {
			require.Equal(t, "absent", r.outcome, "%s is not in the release", r.url)
			continue
		}
		require.Equal(t, "ok", r.outcome, r.url)
		require.True(t, strings.HasSuffix(r.detail, want), "%s: %s, want sha256 %s", r.url, r.detail, want)
	}
	require.Equal(t, 6, count("controller", ""), "three GETs under /harvester-iso/ and three at /")
}

func checkNodeStep(t *testing.T, rel *testRelease, node string, reqs []compatRequest) {
	t.Helper()
	requireNoFailure(t, "node "+node, reqs)
	imported := map[string]bool{}
	var rootfs, slashes int
	for _, r := range reqs {
		switch {
		case r.what == "import":
			// The metadata's paths start with a slash: the URL holds bundle//.
			require.Contains(t, r.url, "/harvester-iso/bundle//", r.url)
			imported[strings.TrimPrefix(r.url[strings.Index(r.url, "/bundle//")+1:], "/")] = true
		case r.what == "download_file" && strings.HasSuffix(r.url, "/rootfs.squashfs"):
			if want := fileSum(t, rel, "rootfs.squashfs"); want != "" {
				require.True(t, strings.HasSuffix(r.detail, want), "rootfs.squashfs: %s, want sha256 %s", r.detail, want)
			}
			rootfs++
		case r.what == "double-slash":
			require.Contains(t, r.url, "bundle//")
			slashes++
		}
	}
	for _, a := range rel.res.Archives {
		require.True(t, imported[strings.Replace(a.Archive, "bundle/", "bundle//", 1)], "node %s did not import %s (imported %v)", node, a.Archive, imported)
	}
	require.Equal(t, 1, rootfs, "node %s: rootfs.squashfs downloads", node)
	require.Equal(t, 3, slashes, "node %s: GET, HEAD and a range on // paths without -L", node)
}
