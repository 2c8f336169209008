package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiv1beta1 "github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// Names of what the image GC test creates.
const (
	gcPlanName = "e2e-gc"
	// gcUnpinnedImage is the image the kubelet's garbage collection must take: imported, never
	// pinned, run by nothing.
	gcUnpinnedImage = "docker.io/upgrade-repo-e2e/gc-unpinned:v0"
	// gcFillFile takes the host disk past the kubelet's high threshold while the test watches;
	// on the node's /var, which is the host disk as is /var/lib/containerd.
	gcFillFile = "/var/lib/upgrade-repo-e2e/gc-fill"
	// gcWait covers two full passes of the kubelet's image garbage collection (every 5 minutes
	// from the kubelet's start): the first pass after the import may come before the kubelet
	// has seen the image (seen on kind: 0 bytes eligible at the first pass, the image removed
	// at the next, 5 minutes later).
	gcWait = 11 * time.Minute
)

// pinsHonouredSince is the first containerd that reports io.cri-containerd.pinned to the kubelet.
var pinsHonouredSince = [3]int{1, 7, 3}

// TestPinsHoldAgainstImageGC proves the pins against the kubelet's own image garbage collection,
// on a worker whose containerd honours them (1.7.3 and later; skipped on older ones, with the
// version) and whose kubelet has the low thresholds hack/e2e.sh sets with E2E_IMAGE_GC=1 (skipped
// without them). An UpgradePlan in interactive mode takes the release through ImagePreloading
// and waits before ClusterUpgrading: the worker's agent preloads the release's images and pins
// them, and its RepoNode counts them pinned. Then an unpinned image is imported into the worker's
// containerd and the host disk (the image filesystem of every kind node) is pushed past the
// kubelet's high threshold: within two passes of the kubelet's collection the unpinned image is
// gone while every release image stays, pinned. The kubelet's GC events and log lines and the
// worker's images before and after go to E2E_ARTIFACTS/gc-*.txt. The plan is deleted before it
// upgrades anything; what happens to the pins once a plan Succeeded is TestUpgrade's.
func TestPinsHoldAgainstImageGC(t *testing.T) {
	c := env(t)
	worker := gcWorker(t, c)
	requirePinsHonoured(t, worker)
	high, low := kubeletGCThresholds(t, worker)
	rel := releaseISO(t)
	upgradeImage := os.Getenv("E2E_UPGRADE_IMAGE")
	if upgradeImage == "" {
		t.Skip("E2E_UPGRADE_IMAGE is not set: hack/e2e.sh builds the test upgrade image")
	}
	meta := releaseMetadata(t, rel)
	refs := rel.refs()
	t.Logf("worker %s: kubelet image GC thresholds high %d%%, low %d%%", worker, high, low)

	waitDaemonSetReady(t, c, c.release+"-agent", 8*time.Minute)
	deployOrigin(t, c, rel)
	// The tests after this one find the agents as the chart left them: holding its ISO, Ready.
	defer restoreAgentArgs(t, c, agentArgs(t, c))
	agentsFollowPlans(t, c, rel)
	// The plan must preload them: a previous test may have put them there by hand, unpinned.
	for _, n := range c.nodes {
		eventually(t, time.Minute, "remove the release's images from "+n.Name, func(ctx context.Context) error {
			if out, err := nodeCmd(ctx, n.Name, append([]string{"ctr", "-n", "k8s.io", "images", "rm"}, refs...)...); err != nil &&
				!strings.Contains(out, "not found") {
				return err
			}
			return nil
		})
	}
	deleteObject(t, c, &apiv1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: upgradePlanName}})
	recreate(t, c, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: installedConfigMap, Namespace: c.namespace},
		Data:       map[string]string{"version": meta.MinUpgradableVersion},
	})
	recreate(t, c, &apiv1beta1.Version{
		ObjectMeta: metav1.ObjectMeta{Name: meta.Harvester},
		Spec:       apiv1beta1.VersionSpec{ISOURL: originURL(c), ISOChecksum: rel.checksum},
	})
	recreate(t, c, &apiv1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: gcPlanName},
		Spec: apiv1beta1.UpgradePlanSpec{
			Version: meta.Harvester,
			Upgrade: &upgradeImage,
			// Waits before ClusterUpgrading for an approval that never comes: the release stays
			// preloaded and pinned, and no node is upgraded.
			Mode: apiv1beta1.ModeInteractive,
		},
	})
	// Deferred, not a Cleanup: the helpers use the test's context, cancelled before Cleanups.
	defer deleteObject(t, c, &apiv1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: gcPlanName}})

	eventually(t, 10*time.Minute, "the release preloaded and pinned on "+worker, func(ctx context.Context) error {
		var rn apiv1beta1.RepoNode
		if err := c.cl.Get(ctx, client.ObjectKey{Name: worker}, &rn); err != nil {
			return err
		}
		p := rn.Status.Preload
		if p.State != apiv1beta1.PreloadDone || p.ImagesDone != int64(len(refs)) || p.ImagesPinned != int64(len(refs)) {
			return fmt.Errorf("RepoNode %s: preload %q, %d of %d images present, %d pinned", worker, p.State, p.ImagesDone, len(refs), p.ImagesPinned)
		}
		return nil
	})
	requirePinnedOn(t, worker, refs)

	importUnpinned(t, worker)
	before := nodeImages(t, worker)
	writeArtifact(t, c, "gc-images-before.txt", before)
	t.Logf("images on %s before the collection:\n%s", worker, before)

	start := time.Now()
	fill := pushPastThreshold(t, worker, high)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := nodeCmd(ctx, worker, "rm", "-f", gcFillFile); err != nil {
			t.Errorf("free the disk: %v", err)
		}
	}()
	t.Logf("host disk pushed past %d%% with %d MiB on %s", high, fill>>20, worker)

	eventually(t, gcWait, "the kubelet's image GC to collect "+gcUnpinnedImage+" on "+worker, func(ctx context.Context) error {
		out, err := nodeCmd(ctx, worker, "ctr", "-n", "k8s.io", "images", "ls", "-q")
		if err != nil {
			return err
		}
		for _, l := range strings.Fields(out) {
			if l == gcUnpinnedImage {
				return errors.New("still there")
			}
		}
		return nil
	})
	collectedAfter := time.Since(start)
	after := nodeImages(t, worker)
	writeArtifact(t, c, "gc-images-after.txt", after)
	events := gcEvents(t, c, worker, start)
	writeArtifact(t, c, "gc-events.txt", events)
	kubelet := kubeletGCLog(t, worker, start)
	writeArtifact(t, c, "gc-kubelet.txt", kubelet)
	t.Logf("images on %s after the collection:\n%s", worker, after)
	t.Logf("the kubelet's image GC events on %s:\n%s", worker, events)
	t.Logf("the kubelet's image GC log on %s:\n%s", worker, kubelet)

	requireImages(t, worker, refs)
	requirePinnedOn(t, worker, refs)
	t.Logf("%s: %s collected by the kubelet %s after the disk passed %d%%; the release's %d images stayed, pinned",
		worker, gcUnpinnedImage, collectedAfter.Round(time.Second), high, len(refs))
}

// gcWorker returns the last node that is not a management node, or skips the test.
func gcWorker(t *testing.T, c *cluster) string {
	t.Helper()
	for i := len(c.nodes) - 1; i >= 0; i-- {
		if !isManagement(c.nodes[i]) {
			return c.nodes[i].Name
		}
	}
	t.Skipf("formation %s has no worker node", c.formation)
	return ""
}

// requirePinsHonoured skips the test unless node's containerd reports pinned images to the kubelet.
func requirePinsHonoured(t *testing.T, node string) {
	t.Helper()
	var out string
	eventually(t, time.Minute, "containerd --version on "+node, func(ctx context.Context) error {
		var err error
		out, err = nodeCmd(ctx, node, "containerd", "--version")
		return err
	})
	v, err := containerdVersion(out)
	require.NoError(t, err)
	if !versionAtLeast(v, pinsHonouredSince) {
		t.Skipf("%s runs containerd %d.%d.%d (%s), which ignores io.cri-containerd.pinned (1.7.3 and later honour it): run with the containerd 2 node image (CONTAINERD=2.1.9 ../shared/tools/kind-offline.sh image)",
			node, v[0], v[1], v[2], strings.TrimSpace(out))
	}
}

// containerdVersionRE finds the version in `containerd --version`: "containerd
// github.com/containerd/containerd/v2 v2.1.9 abc" or Debian's "... 1.6.20~ds1 1.6.20~ds1-1+deb12u3".
var containerdVersionRE = regexp.MustCompile(`\sv?(\d+)\.(\d+)\.(\d+)`)

// containerdVersion parses the output of `containerd --version`.
func containerdVersion(out string) ([3]int, error) {
	m := containerdVersionRE.FindStringSubmatch(out)
	if m == nil {
		return [3]int{}, fmt.Errorf("no version in %q", out)
	}
	var v [3]int
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	return v, nil
}

// versionAtLeast reports whether v is least or later.
func versionAtLeast(v, least [3]int) bool {
	for i := range v {
		if v[i] != least[i] {
			return v[i] > least[i]
		}
	}
	return true
}

// The node images' containerd versions, as `containerd --version` prints them, against the first
// that honours pins; no cluster needed.
func TestContainerdVersionHonoursPins(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, out string
		want      [3]int
		honours   bool
	}{
		{name: "debian 1.6", out: "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n", want: [3]int{1, 6, 20}},
		{name: "containerd 2.1", out: "containerd github.com/containerd/containerd/v2 v2.1.9 \n", want: [3]int{2, 1, 9}, honours: true},
		{name: "1.7.2", out: "containerd github.com/containerd/containerd v1.7.2 abc", want: [3]int{1, 7, 2}},
		{name: "1.7.3", out: "containerd containerd.io 1.7.3 7880925", want: [3]int{1, 7, 3}, honours: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := containerdVersion(tt.out)
			require.NoError(t, err)
			require.Equal(t, tt.want, v)
			require.Equal(t, tt.honours, versionAtLeast(v, pinsHonouredSince))
		})
	}
}

// kubeletGCThresholds returns the image GC thresholds of node's kubelet, or skips the test when
// they were left at the kubelet's defaults (hack/e2e.sh sets them with E2E_IMAGE_GC=1).
func kubeletGCThresholds(t *testing.T, node string) (high, low int) {
	t.Helper()
	var out string
	eventually(t, time.Minute, "read the kubelet configuration of "+node, func(ctx context.Context) error {
		var err error
		out, err = nodeCmd(ctx, node, "cat", "/var/lib/kubelet/config.yaml")
		return err
	})
	field := func(name string) (int, bool) {
		m := regexp.MustCompile(`(?m)^` + name + `:\s*(\d+)\s*$`).FindStringSubmatch(out)
		if m == nil {
			return 0, false
		}
		n, _ := strconv.Atoi(m[1])
		return n, true
	}
	high, okHigh := field("imageGCHighThresholdPercent")
	low, okLow := field("imageGCLowThresholdPercent")
	if !okHigh || !okLow {
		t.Skipf("the kubelet of %s keeps its default image GC thresholds: run hack/e2e.sh with E2E_IMAGE_GC=1", node)
	}
	return high, low
}

// requirePinnedOn checks, with the node's own ctr, that every ref carries the CRI pinned label.
func requirePinnedOn(t *testing.T, node string, refs []string) {
	t.Helper()
	for _, ref := range refs {
		var out string
		eventually(t, time.Minute, "list "+ref+" on "+node, func(ctx context.Context) error {
			var err error
			out, err = nodeCmd(ctx, node, "ctr", "-n", "k8s.io", "images", "ls", "name=="+ref)
			return err
		})
		require.Contains(t, out, pinnedLabel, "release image %s is pinned on %s", ref, node)
	}
}

// importUnpinned imports gcUnpinnedImage into node's containerd, with no pin.
func importUnpinned(t *testing.T, node string) {
	t.Helper()
	archive := oneImageArchive(t, gcUnpinnedImage, 1<<20)
	eventually(t, time.Minute, "import "+gcUnpinnedImage+" into "+node, func(ctx context.Context) error {
		imp := exec.CommandContext(ctx, "docker", "exec", "-i", node, "ctr", "-n", "k8s.io", "images", "import", "-")
		imp.Stdin = bytes.NewReader(archive)
		if out, err := imp.CombinedOutput(); err != nil {
			return fmt.Errorf("import: %w: %s", err, out)
		}
		out, err := nodeCmd(ctx, node, "ctr", "-n", "k8s.io", "images", "ls", "name=="+gcUnpinnedImage)
		if err != nil {
			return err
		}
		if strings.Contains(out, pinnedLabel) {
			return fmt.Errorf("%s is pinned: %s", gcUnpinnedImage, out)
		}
		return nil
	})
}

// pushPastThreshold fills node's /var until the image filesystem's usage, counted as the kubelet
// counts it (100 - available*100/capacity), is past high, and returns the bytes it allocated.
func pushPastThreshold(t *testing.T, node string, high int) int64 {
	t.Helper()
	size, avail := imageFSSpace(t, node)
	// Available bytes at most those of usage high+1, and 64 MiB of slack for what gets freed.
	fill := avail - size*int64(99-high)/100 + 64<<20
	if fill <= 0 {
		t.Logf("the image filesystem of %s is past %d%% already", node, high)
		return 0
	}
	require.Less(t, fill, avail-(1<<30), "pushing the host disk past %d%% would leave it less than 1 GiB", high)
	eventually(t, time.Minute, "allocate "+gcFillFile+" on "+node, func(ctx context.Context) error {
		if _, err := nodeCmd(ctx, node, "mkdir", "-p", filepath.Dir(gcFillFile)); err != nil {
			return err
		}
		_, err := nodeCmd(ctx, node, "fallocate", "-l", strconv.FormatInt(fill, 10), gcFillFile)
		return err
	})
	size, avail = imageFSSpace(t, node)
	usage := 100 - int(avail*100/size)
	require.GreaterOrEqual(t, usage, high, "the image filesystem of %s at %d%% after the fill", node, usage)
	return fill
}

// imageFSSpace returns the capacity and available bytes of node's image filesystem.
func imageFSSpace(t *testing.T, node string) (size, avail int64) {
	t.Helper()
	var out string
	eventually(t, time.Minute, "df on "+node, func(ctx context.Context) error {
		var err error
		out, err = nodeCmd(ctx, node, "df", "-B1", "--output=size,avail", "/var/lib/containerd")
		return err
	})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	f := strings.Fields(lines[len(lines)-1])
	require.Len(t, f, 2, "df: %q", out)
	size, err := strconv.ParseInt(f[0], 10, 64)
	require.NoError(t, err)
	avail, err = strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)
	require.Positive(t, size)
	return size, avail
}

// nodeImages lists node's images in the kubelet's namespace, labels included, and what the CRI
// says of them (its pinned flag), as far as crictl answers.
func nodeImages(t *testing.T, node string) string {
	t.Helper()
	var out string
	eventually(t, time.Minute, "list the images of "+node, func(ctx context.Context) error {
		var err error
		out, err = nodeCmd(ctx, node, "ctr", "-n", "k8s.io", "images", "ls")
		return err
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cri, err := nodeCmd(ctx, node, "sh", "-c", `crictl images -o json | grep -E '"(repoTags|pinned)"|^ *"[a-z0-9./:-]+:[^"]*",?$'`)
	if err != nil {
		cri = "crictl: " + err.Error()
	}
	return "ctr -n k8s.io images ls:\n" + out + "\ncrictl images -o json (tags, pinned):\n" + cri
}

// gcEvents returns the kubelet's image GC events about node since start.
func gcEvents(t *testing.T, c *cluster, node string, start time.Time) string {
	t.Helper()
	var b strings.Builder
	eventually(t, time.Minute, "list the events of "+node, func(ctx context.Context) error {
		b.Reset()
		evs, err := c.cs.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			switch e.Reason {
			case "FreeDiskSpaceFailed", "ImageGCFailed", "ContainerGCFailed":
			default:
				continue
			}
			last := e.LastTimestamp.Time
			if last.IsZero() {
				last = e.EventTime.Time
			}
			if last.Before(start.Add(-time.Minute)) {
				continue
			}
			fmt.Fprintf(&b, "%s %s %s x%d: %s\n", last.UTC().Format(time.RFC3339), e.Type, e.Reason, e.Count, e.Message)
		}
		return nil
	})
	if b.Len() == 0 {
		return "(no FreeDiskSpaceFailed or ImageGCFailed event: the collection freed what it was asked to)\n"
	}
	return b.String()
}

// kubeletGCLogRE picks the kubelet's log lines of its image garbage collection.
var kubeletGCLogRE = regexp.MustCompile(`(?i)image_gc_manager|garbage collect|Removing image|imageGC|FreeDiskSpace|disk usage`)

// kubeletGCLog returns node's kubelet log lines of its image garbage collection since start.
func kubeletGCLog(t *testing.T, node string, start time.Time) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := nodeCmd(ctx, node, "journalctl", "-u", "kubelet", "--no-pager", "-o", "short-iso",
		"--since", "@"+strconv.FormatInt(start.Add(-time.Minute).Unix(), 10))
	if err != nil {
		return "journalctl: " + err.Error() + "\n"
	}
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if kubeletGCLogRE.MatchString(l) {
			b.WriteString(l + "\n")
		}
	}
	if b.Len() == 0 {
		return "(no kubelet log line of the image garbage collection at this log level)\n"
	}
	return b.String()
}

// writeArtifact writes a file for the post-mortem into E2E_ARTIFACTS.
func writeArtifact(t *testing.T, c *cluster, name, content string) {
	t.Helper()
	p := filepath.Join(c.artifacts, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Logf("write %s: %v", p, err)
	}
}

// agentArgs returns the arguments of the agents' container.
func agentArgs(t *testing.T, c *cluster) []string {
	t.Helper()
	var args []string
	eventually(t, time.Minute, "read the agents' arguments", func(ctx context.Context) error {
		ds, err := c.cs.AppsV1().DaemonSets(c.namespace).Get(ctx, c.release+"-agent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		args = slices.Clone(ds.Spec.Template.Spec.Containers[0].Args)
		return nil
	})
	return args
}

// restoreAgentArgs gives the agents' container args again and waits for every agent to be
// Ready with them.
func restoreAgentArgs(t *testing.T, c *cluster, args []string) {
	t.Helper()
	eventually(t, 2*time.Minute, "restore the agents' arguments", func(ctx context.Context) error {
		ds, err := c.cs.AppsV1().DaemonSets(c.namespace).Get(ctx, c.release+"-agent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ds.Spec.Template.Spec.Containers[0].Args = args
		_, err = c.cs.AppsV1().DaemonSets(c.namespace).Update(ctx, ds, metav1.UpdateOptions{})
		return err
	})
	waitDaemonSetReady(t, c, c.release+"-agent", 8*time.Minute)
}
