package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	apiv1beta1 "github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// Names of the objects the upgrade test creates.
const (
	installedConfigMap = "upgrade-repo-installed"
	upgradePlanName    = "e2e-upgrade"
	markerDir          = "/var/lib/upgrade-repo-e2e/upgraded"
)

// upgradeWatch is what the upgrade test sees of the cluster while the plan runs: the phases the
// plan went through, when each node was cordoned and uncordoned, and the node Jobs' times.
type upgradeWatch struct {
	mu sync.Mutex
	// cordoned and uncordoned are the first times each node was seen unschedulable, and then
	// schedulable again.
	cordoned, uncordoned map[string]time.Time
	// jobs are the node Jobs of the plan by node, as last seen (they are removed at CleaningUp).
	jobs map[string]batchv1.Job
	// preload are the RepoNodes' preload states seen once the plan had left ImagePreloading.
	preload map[string]apiv1beta1.RepoNodePreload
	// iso are the RepoNodes' ISO states seen once the plan had left ISODownloading.
	iso map[string]apiv1beta1.RepoNodeISO
	// agentDeleted names the node whose agent pod was deleted during ImagePreloading.
	agentDeleted string
	// loss is the release image removed from a node after the preload, and what became of it.
	loss imageLoss
}

// TestUpgrade runs a whole upgrade on the cluster, whatever its formation (hack/e2e.sh). The
// agents are turned into agents that follow the UpgradePlans, with the ISO left in the seed
// node's cache only. A Version naming the release ISO at the in-cluster origin and an
// UpgradePlan with the test upgrade image go through every phase to Succeeded; with more than one
// node, an agent pod is deleted in the middle of ImagePreloading. The test upgrade image reboots
// each node after its work (E2E_REBOOT=1), as a release's node step does. Then every agent got
// the ISO (from its cache or its peers), every node's containerd holds the release's images, the
// upgrade image did its work once on every node and the node rebooted exactly once, management
// nodes were cordoned, upgraded and uncordoned one at a time before the others, every node is
// Ready and schedulable again, and CoreDNS and the origin (a workload the drains moved) are Ready.
// Disk pressure: once the images are preloaded (and pinned), one is removed from the last node's
// containerd, as the kubelet's image garbage collection would; that node's agent imports it again
// from its ISO, its RepoNode says so, and the image is there and pinned after the plan Succeeded.
// Cleaning: a previous release (an image nothing uses, a second name of the agents' image) is put
// on every node and its list written into each agent's image list archive before the plan; after
// the plan Succeeded, every agent removed the unused image, kept the used one and named it in its
// RepoNode. The cluster as its own registry: once the agents dropped the ISO, the release's
// runnable image is removed from a node and a pod of it still starts there, pulled through the
// node's agent from a peer (requireMirrorPull). The plan's phase timings go to E2E_ARTIFACTS/phases-FORMATION.tsv.
func TestUpgrade(t *testing.T) {
	c := env(t)
	rel := releaseISO(t)
	upgradeImage := os.Getenv("E2E_UPGRADE_IMAGE")
	if upgradeImage == "" {
		t.Skip("E2E_UPGRADE_IMAGE is not set: hack/e2e.sh builds the test upgrade image")
	}
	meta := releaseMetadata(t, rel)
	waitDaemonSetReady(t, c, c.release+"-agent", 8*time.Minute)
	deployOrigin(t, c, rel)
	agentsFollowPlans(t, c, rel)

	// Earlier tests preloaded the release by hand: remove its images so the plan has to preload.
	refs := rel.refs()
	for _, n := range c.nodes {
		eventually(t, time.Minute, "remove the release's images from "+n.Name, func(ctx context.Context) error {
			if _, err := nodeCmd(ctx, n.Name, append([]string{"ctr", "-n", "k8s.io", "images", "rm"}, refs...)...); err != nil &&
				!strings.Contains(err.Error(), "not found") {
				return err
			}
			_, err := nodeCmd(ctx, n.Name, "rm", "-rf", markerDir)
			return err
		})
	}

	deleteObject(t, c, &apiv1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: upgradePlanName}})
	for _, n := range c.nodes {
		node := getNode(t, c, n.Name)
		require.False(t, node.Spec.Unschedulable, "node %s is cordoned before the upgrade (hack/e2e.sh uncordons every node)", n.Name)
	}
	t.Logf("formation %s: %d nodes (%s), node reboots expected: %t", c.formation, len(c.nodes), describeNodes(c.nodes), c.reboot)
	recreate(t, c, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: installedConfigMap, Namespace: c.namespace},
		Data:       map[string]string{"version": meta.MinUpgradableVersion},
	})
	recreate(t, c, &apiv1beta1.Version{
		ObjectMeta: metav1.ObjectMeta{Name: meta.Harvester},
		Spec:       apiv1beta1.VersionSpec{ISOURL: originURL(c), ISOChecksum: rel.checksum},
	})
	// A plan whose ISO refuses the installed version fails before any download.
	refusedIn := refusedBeforeDownload(t, c, upgradeImage, meta.Harvester, meta.MinUpgradableVersion)
	// A node whose kubelet would collect the release's images fails the pre-flight, with its figures.
	diskRefusedBeforeDownload(t, c, upgradeImage, meta.Harvester)
	prev := installPreviousRelease(t, c)
	// Node containers started from here on are reboots (the upgrade image's).
	boots := watchNodeContainers(t, c)
	// What containerd holds before the plan, against what it holds once the preload is done.
	diskBefore := containerdBytes(t, c)
	var diskAfter map[string]int64
	var estimates []timeEstimate
	var phaseSeen time.Time
	estimated := map[apiv1beta1.Phase]int{}
	start := time.Now()
	recreate(t, c, &apiv1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: upgradePlanName},
		Spec: apiv1beta1.UpgradePlanSpec{
			Version: meta.Harvester,
			Upgrade: &upgradeImage,
			Mode:    apiv1beta1.ModeAutomatic,
			// One node at a time, so an agent can be deleted while the others still preload.
			ImagePreloadOption: &apiv1beta1.ImagePreloadOption{Concurrency: 1},
		},
	})
	t.Logf("installed version %s, Version %s at %s, UpgradePlan %s with upgrade image %s",
		meta.MinUpgradableVersion, meta.Harvester, originURL(c), upgradePlanName, upgradeImage)

	w := &upgradeWatch{
		cordoned: map[string]time.Time{}, uncordoned: map[string]time.Time{},
		jobs: map[string]batchv1.Job{}, preload: map[string]apiv1beta1.RepoNodePreload{},
		iso: map[string]apiv1beta1.RepoNodeISO{},
	}
	wctx, stop := context.WithCancel(t.Context())
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { defer bg.Done(); w.watchNodes(wctx, c) }()
	go func() { defer bg.Done(); w.watchJobs(wctx, c) }()
	defer func() { stop(); bg.Wait() }()

	var plan apiv1beta1.UpgradePlan
	lastPhase := apiv1beta1.Phase("")
	// Generous: every node drains and reboots, and a reboot of the kind control plane takes the
	// API server away for a minute or more.
	timeout := 10*time.Minute + time.Duration(len(c.nodes))*6*time.Minute
	err := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		return poll(ctx, time.Second, func(ctx context.Context) error {
			if err := c.cl.Get(ctx, client.ObjectKey{Name: upgradePlanName}, &plan); err != nil {
				return err
			}
			if plan.Status.Phase != lastPhase {
				t.Logf("+%s phase %s", time.Since(start).Round(time.Second), plan.Status.Phase)
				lastPhase, phaseSeen = plan.Status.Phase, time.Now()
			}
			// The time estimate as a phase begins, and again 10 s in (a rate measured).
			if n := estimated[plan.Status.Phase]; n == 0 || (n == 1 && time.Since(phaseSeen) > 10*time.Second) {
				if e, err := estimateNow(ctx, c, &plan); err == nil && e != nil {
					estimates = append(estimates, *e)
					estimated[plan.Status.Phase]++
				}
			}
			switch plan.Status.Phase {
			case apiv1beta1.PhaseImagePreloaded, apiv1beta1.PhaseClusterUpgrading, apiv1beta1.PhaseClusterUpgraded, apiv1beta1.PhaseNodeUpgrading:
				if diskAfter == nil {
					diskAfter = containerdBytes(t, c)
				}
			}
			w.observe(ctx, t, c, &plan)
			if plan.Status.Phase == apiv1beta1.PhaseSucceeded || plan.Status.Phase == apiv1beta1.PhaseFailed {
				return nil
			}
			return fmt.Errorf("plan %s in phase %q, conditions %s", plan.Name, plan.Status.Phase, conditions(plan.Status.Conditions))
		})
	}()
	if err != nil || plan.Status.Phase != apiv1beta1.PhaseSucceeded {
		dumpPlan(t, c, &plan)
	}
	require.NoError(t, err, "UpgradePlan %s reaches Succeeded", upgradePlanName)
	require.Equal(t, apiv1beta1.PhaseSucceeded, plan.Status.Phase, "UpgradePlan %s failed in phase %s: %s",
		upgradePlanName, plan.Status.FailedPhase, conditions(plan.Status.Conditions))
	stop()
	bg.Wait()
	t.Logf("plan %s succeeded after %s", upgradePlanName, time.Since(start).Round(time.Second))

	t.Run("phase timings", func(t *testing.T) {
		ts := plan.Status.PhaseTransitionTimestamps
		require.NotEmpty(t, ts)
		var seen []apiv1beta1.Phase
		for i, p := range ts {
			end := p.PhaseTransitionTimestamp.Time
			if i+1 < len(ts) {
				end = ts[i+1].PhaseTransitionTimestamp.Time
			}
			t.Logf("%-20s at %s  lasted %s", p.Phase, p.PhaseTransitionTimestamp.UTC().Format(time.RFC3339),
				end.Sub(p.PhaseTransitionTimestamp.Time).Round(time.Second))
			seen = append(seen, p.Phase)
		}
		t.Logf("total: %s", ts[len(ts)-1].PhaseTransitionTimestamp.Sub(ts[0].PhaseTransitionTimestamp.Time).Round(time.Second))
		writePhaseTimings(t, c, ts)
		writeNodeTimings(t, c, &plan.Status)
		for _, p := range ts {
			if p.Phase == apiv1beta1.PhaseMetadataPopulated {
				// Where the verified metadata is judged: what refusing a release cost before it
				// was read through ranges in Initializing.
				t.Logf("refusal: read from the ISO's URL %s after the plan's creation; judged from the verified metadata it would have come %s after",
					refusedIn.Round(time.Millisecond), p.PhaseTransitionTimestamp.Sub(ts[0].PhaseTransitionTimestamp.Time).Round(time.Second))
				break
			}
		}
		for _, p := range []apiv1beta1.Phase{
			apiv1beta1.PhaseInitializing, apiv1beta1.PhaseISODownloading, apiv1beta1.PhaseRepoCreating,
			apiv1beta1.PhaseMetadataPopulating, apiv1beta1.PhaseImagePreloading, apiv1beta1.PhaseClusterUpgrading,
			apiv1beta1.PhaseNodeUpgrading, apiv1beta1.PhaseCleaningUp, apiv1beta1.PhaseSucceeded,
		} {
			require.Contains(t, seen, p, "phase %s recorded in the plan's transitions", p)
		}
	})

	t.Run("the disk forecast against the bytes the preload wrote", func(t *testing.T) {
		require.NotNil(t, diskAfter, "containerd was measured after the preload")
		compareDisk(t, &plan, diskBefore, diskAfter)
	})

	t.Run("the time estimates against the time the plan took", func(t *testing.T) {
		require.NotEmpty(t, estimates)
		end := time.Now()
		for _, p := range plan.Status.PhaseTransitionTimestamps {
			if p.Phase == apiv1beta1.PhaseSucceeded {
				end = p.PhaseTransitionTimestamp.Time
			}
		}
		compareTime(t, estimates, end)
	})

	t.Run("every agent got the plan's ISO, from its cache or its peers", func(t *testing.T) {
		for _, n := range c.nodes {
			w.mu.Lock()
			iso, ok := w.iso[n.Name]
			w.mu.Unlock()
			require.True(t, ok, "RepoNode %s never seen after ISODownloading", n.Name)
			t.Logf("%s: ISO %s, %d bytes from peers, %d from the origin", n.Name, iso.State, iso.BytesFromPeers, iso.BytesFromOrigin)
			require.Equal(t, apiv1beta1.ISOReady, iso.State, "RepoNode %s: %s", n.Name, iso.Message)
			require.Equal(t, rel.checksum, iso.Checksum, "RepoNode %s: ISO checksum", n.Name)
			if rel.seeds[n.Name] {
				require.Zero(t, iso.BytesFromPeers+iso.BytesFromOrigin, "seed node %s had the ISO in its cache", n.Name)
				continue
			}
			require.Equal(t, rel.size, iso.BytesFromPeers+iso.BytesFromOrigin, "node %s fetched the whole ISO afresh", n.Name)
		}
	})

	t.Run("an agent pod deleted during ImagePreloading", func(t *testing.T) {
		if len(c.nodes) == 1 {
			t.Skip("one node: its agent is the seed and preloads alone, there is no other node's agent to delete")
		}
		w.mu.Lock()
		node := w.agentDeleted
		w.mu.Unlock()
		require.NotEmpty(t, node, "no agent pod was deleted: ImagePreloading was never seen in flight")
		t.Logf("the agent pod of %s was deleted during ImagePreloading and the plan still succeeded", node)
	})

	t.Run("every node preloaded every image", func(t *testing.T) {
		for _, n := range c.nodes {
			t.Run(n.Name, func(t *testing.T) {
				w.mu.Lock()
				p, ok := w.preload[n.Name]
				w.mu.Unlock()
				require.True(t, ok, "RepoNode %s never seen after ImagePreloading", n.Name)
				require.Equal(t, apiv1beta1.PreloadDone, p.State, "RepoNode %s preload: %s %s", n.Name, p.Reason, p.Message)
				require.Equal(t, int64(len(refs)), p.ImagesTotal, "RepoNode %s: images of the release", n.Name)
				require.Equal(t, p.ImagesTotal, p.ImagesDone, "RepoNode %s: images preloaded", n.Name)
				// The chart mounts containerd's content directory (agent.containerdContentDir).
				require.Equal(t, apiv1beta1.IngestDirect, p.Ingest, "RepoNode %s: how the blobs reached containerd", n.Name)
				// And its overlayfs snapshotter's (agent.containerdSnapshotterDir).
				require.Equal(t, apiv1beta1.UnpackOnePass, p.Unpack, "RepoNode %s: how the layers were unpacked", n.Name)
				requireImages(t, n.Name, refs)
				ns := plan.Status.NodeUpgradeStatuses[n.Name]
				require.Equal(t, apiv1beta1.NodeUpgraded, ns.State, "plan's state of node %s: %s", n.Name, ns.Message)
			})
		}
	})

	t.Run("a release image runs from the snapshot its one-pass preload committed", func(t *testing.T) {
		requireRunsFromPreload(t, c, c.nodes[0].Name)
	})
	t.Run("a release image removed after the preload is put back from the node's ISO", w.requireImageRestored)
	t.Run("the previous release's images nothing uses are gone from every node, those in use remain", func(t *testing.T) {
		requirePreviousCleaned(t, c, prev, meta.Harvester)
	})
	t.Run("after the plan, a release image a node lost is pulled through its agent from a peer", func(t *testing.T) {
		requireMirrorPull(t, c, meta.Harvester)
	})

	t.Run("the upgrade image did its work once on every node, management nodes first", func(t *testing.T) {
		ran := map[string]time.Time{}
		for _, n := range c.nodes {
			var out string
			eventually(t, time.Minute, "read the upgrade marker of "+n.Name, func(ctx context.Context) error {
				var err error
				out, err = nodeCmd(ctx, n.Name, "cat", markerDir+"/"+n.Name)
				return err
			})
			sc := bufio.NewScanner(strings.NewReader(out))
			var lines int
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				require.Len(t, f, 2, "marker of %s: %q", n.Name, sc.Text())
				at, err := time.Parse(time.RFC3339Nano, f[0])
				require.NoError(t, err, "marker of %s", n.Name)
				require.Equal(t, meta.Harvester, f[1], "release given to the upgrade image on %s", n.Name)
				if lines == 0 {
					ran[n.Name] = at
				}
				lines++
			}
			require.Equal(t, 1, lines, "the upgrade image did its work once on %s: %q", n.Name, out)
			t.Logf("%s: upgraded at %s", n.Name, ran[n.Name].Format(time.RFC3339Nano))
		}
		requireManagementFirst(t, c, func(node string) (time.Time, time.Time) { return ran[node], ran[node] })
	})

	t.Run("every node rebooted exactly once", func(t *testing.T) {
		if !c.reboot {
			t.Skip("E2E_REBOOT is not 1: the test upgrade image does not reboot")
		}
		starts := boots.stop()
		for _, n := range c.nodes {
			got := starts[n.Name]
			t.Logf("%s: container started %d times during the plan %v", n.Name, len(got), got)
			require.Len(t, got, 1, "node %s rebooted once", n.Name)
			require.True(t, got[0].After(start), "node %s restarted during the plan", n.Name)
			w.mu.Lock()
			j := w.jobs[n.Name]
			w.mu.Unlock()
			require.NotNil(t, j.Status.StartTime, "node Job of %s never started", n.Name)
			require.True(t, !got[0].Before(j.Status.StartTime.Add(-time.Second)),
				"node %s rebooted at %s, before its Job started at %s", n.Name, got[0], j.Status.StartTime)
			t.Logf("%s: node Job %s: %d pods failed (the reboot kills the first), %d succeeded", n.Name, j.Name, j.Status.Failed, j.Status.Succeeded)
		}
		if b, err := os.ReadFile(c.artifacts + "/node-restarts.log"); err == nil && len(b) > 0 {
			t.Logf("node containers the harness started (docker did not restart them):\n%s", b)
		}
	})

	t.Run("every node is Ready and schedulable, CoreDNS and the origin are Ready", func(t *testing.T) {
		for _, n := range c.nodes {
			eventually(t, 5*time.Minute, "node "+n.Name+" Ready and schedulable", func(ctx context.Context) error {
				node, err := c.cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if node.Spec.Unschedulable {
					return fmt.Errorf("node %s is cordoned", n.Name)
				}
				for _, cond := range node.Status.Conditions {
					if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
						return nil
					}
				}
				return fmt.Errorf("node %s is not Ready", n.Name)
			})
		}
		eventuallyDeploymentReadyIn(t, c, "kube-system", "coredns", 5*time.Minute)
		eventuallyDeploymentReady(t, c, originName, 5*time.Minute)
		// The plan released the ISO: the agents, which follow the plans, drop it and stop serving
		// (not Ready behind the Service), yet run and report.
		agentsReport(t, c, 5*time.Minute, func(st apiv1beta1.RepoNodeStatus) error {
			if st.ISO.State != apiv1beta1.ISOPending || st.Repo.Ready {
				return fmt.Errorf("ISO %s, repo ready %t: the released ISO is still held", st.ISO.State, st.Repo.Ready)
			}
			return nil
		})
	})

	t.Run("nodes were cordoned one at a time, management nodes first, and uncordoned", func(t *testing.T) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, n := range c.nodes {
			j, ok := w.jobs[n.Name]
			require.True(t, ok, "no node Job seen for %s", n.Name)
			require.NotNil(t, j.Status.StartTime, "node Job of %s never started", n.Name)
			require.NotNil(t, j.Status.CompletionTime, "node Job of %s never completed", n.Name)
			require.False(t, w.cordoned[n.Name].IsZero(), "node %s was never seen cordoned", n.Name)
			require.False(t, w.uncordoned[n.Name].IsZero(), "node %s was never seen uncordoned after its upgrade", n.Name)
			t.Logf("%s: cordoned %s, Job %s → %s, uncordoned %s", n.Name, w.cordoned[n.Name].Format(time.TimeOnly),
				j.Status.StartTime.Format(time.TimeOnly), j.Status.CompletionTime.Format(time.TimeOnly), w.uncordoned[n.Name].Format(time.TimeOnly))
		}
		jobSpan := func(node string) (time.Time, time.Time) {
			j := w.jobs[node]
			return j.Status.StartTime.Time, j.Status.CompletionTime.Time
		}
		cordonSpan := func(node string) (time.Time, time.Time) { return w.cordoned[node], w.uncordoned[node] }
		requireManagementFirst(t, c, jobSpan)
		requireManagementFirst(t, c, cordonSpan)
		// One at a time: the plan leaves nodeUpgradeOption.concurrency at its default, 1.
		requireOneAtATime(t, c, cordonSpan)
	})
}

// requireManagementFirst checks that every management node finished its upgrade before any other
// node started its own; span gives a node's start and end.
func requireManagementFirst(t *testing.T, c *cluster, span func(node string) (time.Time, time.Time)) {
	t.Helper()
	for _, m := range c.nodes {
		if !isManagement(m) {
			continue
		}
		_, mEnd := span(m.Name)
		for _, wk := range c.nodes {
			if isManagement(wk) {
				continue
			}
			wkStart, _ := span(wk.Name)
			require.False(t, wkStart.Before(mEnd), "worker %s (started %s) was upgraded before management node %s finished (%s)",
				wk.Name, wkStart.Format(time.RFC3339Nano), m.Name, mEnd.Format(time.RFC3339Nano))
		}
	}
}

// requireOneAtATime checks that no two nodes' spans overlap.
func requireOneAtATime(t *testing.T, c *cluster, span func(node string) (time.Time, time.Time)) {
	t.Helper()
	for i, a := range c.nodes {
		aStart, aEnd := span(a.Name)
		for _, b := range c.nodes[i+1:] {
			bStart, bEnd := span(b.Name)
			require.False(t, aStart.Before(bEnd) && bStart.Before(aEnd), "nodes %s (%s → %s) and %s (%s → %s) were upgraded at the same time",
				a.Name, aStart.Format(time.TimeOnly), aEnd.Format(time.TimeOnly), b.Name, bStart.Format(time.TimeOnly), bEnd.Format(time.TimeOnly))
		}
	}
}

// getNode gets a node, retrying while the API server is away.
func getNode(t *testing.T, c *cluster, name string) *corev1.Node {
	t.Helper()
	var node *corev1.Node
	eventually(t, 3*time.Minute, "get node "+name, func(ctx context.Context) error {
		var err error
		node, err = c.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err
	})
	return node
}

// describeNodes names each node with its role: management (m), witness (w) or worker.
func describeNodes(nodes []corev1.Node) string {
	var parts []string
	for _, n := range nodes {
		role := "worker"
		switch {
		case n.Labels["node-role.harvesterhci.io/witness"] == "true":
			role = "witness"
		case isManagement(n):
			role = "management"
		}
		parts = append(parts, n.Name+"="+role)
	}
	return strings.Join(parts, " ")
}

// mainPhases are the phases the phase timings report, in order; each lasts until the next begins
// (its "-ed" phase included).
var mainPhases = []apiv1beta1.Phase{
	apiv1beta1.PhaseInitializing, apiv1beta1.PhaseISODownloading, apiv1beta1.PhaseRepoCreating,
	apiv1beta1.PhaseMetadataPopulating, apiv1beta1.PhaseImagePreloading, apiv1beta1.PhaseClusterUpgrading,
	apiv1beta1.PhaseNodeUpgrading, apiv1beta1.PhaseCleaningUp,
}

// writePhaseTimings writes the seconds the plan spent in each main phase to
// E2E_ARTIFACTS/phases-FORMATION.tsv: a header line and one line for the formation, which
// hack/e2e-matrix.sh gathers into a table.
func writePhaseTimings(t *testing.T, c *cluster, ts []apiv1beta1.PhaseTransitionTimestamp) {
	t.Helper()
	at := map[apiv1beta1.Phase]time.Time{}
	for _, p := range ts {
		if _, ok := at[p.Phase]; !ok {
			at[p.Phase] = p.PhaseTransitionTimestamp.Time
		}
	}
	header := []string{"formation", "nodes"}
	row := []string{c.formation, strconv.Itoa(len(c.nodes))}
	ends := append(slices.Clone(mainPhases[1:]), apiv1beta1.PhaseSucceeded)
	for i, p := range mainPhases {
		header = append(header, string(p))
		begin, ok1 := at[p]
		end, ok2 := at[ends[i]]
		if !ok1 || !ok2 {
			row = append(row, "-")
			continue
		}
		row = append(row, strconv.Itoa(int(end.Sub(begin).Round(time.Second).Seconds())))
	}
	header = append(header, "total")
	row = append(row, strconv.Itoa(int(ts[len(ts)-1].PhaseTransitionTimestamp.Sub(ts[0].PhaseTransitionTimestamp.Time).Round(time.Second).Seconds())))
	out := strings.Join(header, "\t") + "\n" + strings.Join(row, "\t") + "\n"
	p := filepath.Join(c.artifacts, "phases-"+c.formation+".tsv")
	require.NoError(t, os.WriteFile(p, []byte(out), 0o644))
	t.Logf("phase timings written to %s", p)
}

// writeNodeTimings logs how each node's time in NodeUpgrading divided (sequencer.NodeTimings:
// the wait for its slot, its drain, its step and the sequencer's own time) with the distribution
// of the sequencer's time per node, and writes the nodes' lines to
// E2E_ARTIFACTS/nodes-FORMATION.tsv.
func writeNodeTimings(t *testing.T, c *cluster, st *apiv1beta1.UpgradePlanStatus) {
	t.Helper()
	ts := sequencer.NodeTimings(st)
	sec := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) }
	lines := []string{"formation\tnode\twait\tdrain\tstep\ttotal\tsequencer"}
	var own []time.Duration
	for _, n := range ts {
		t.Logf("node %-24s wait %5ss  drain %5ss  step %6ss  total %6ss  sequencer %5ss", n.Node, sec(n.Wait), sec(n.Drain), sec(n.Step), sec(n.Total), sec(n.Sequencer))
		if tm := st.NodeUpgradeStatuses[n.Node].Times; tm != nil {
			// Each transition, for where the sequencer's time went.
			b, _ := json.Marshal(tm)
			t.Logf("node %s times %s", n.Node, b)
		}
		lines = append(lines, strings.Join([]string{c.formation, n.Node, sec(n.Wait), sec(n.Drain), sec(n.Step), sec(n.Total), sec(n.Sequencer)}, "\t"))
		own = append(own, n.Sequencer)
	}
	t.Logf("sequencer time per node: %s", sequencer.Distribute(own))
	p := filepath.Join(c.artifacts, "nodes-"+c.formation+".tsv")
	require.NoError(t, os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
}

// nodeBoots records, from docker's event stream, when each node container of the cluster started
// (a node reboot in kind: the container exits and is started again).
type nodeBoots struct {
	mu     sync.Mutex
	starts map[string][]time.Time
	cancel context.CancelFunc
	done   chan struct{}
}

// watchNodeContainers follows docker's start and die events of the cluster's node containers
// until stop, or the end of the test.
func watchNodeContainers(t *testing.T, c *cluster) *nodeBoots {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	b := &nodeBoots{starts: map[string][]time.Time{}, cancel: cancel, done: make(chan struct{})}
	// --since replays what happened between now and the subscription, so no start is missed.
	cmd := exec.CommandContext(ctx, "docker", "events", "--since", strconv.FormatInt(time.Now().Unix(), 10),
		"--filter", "type=container", "--filter", "event=start", "--filter", "event=die",
		"--filter", "label=io.x-k8s.kind.cluster="+c.name,
		"--format", "{{.TimeNano}} {{.Action}} {{.Actor.Attributes.name}} {{.Actor.Attributes.exitCode}}")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start(), "docker events")
	go func() {
		defer close(b.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 3 {
				continue
			}
			ns, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				continue
			}
			at := time.Unix(0, ns)
			t.Logf("node container %s: %s at %s %s", f[2], f[1], at.Format(time.TimeOnly), strings.Join(f[3:], " "))
			if f[1] == "start" {
				b.mu.Lock()
				b.starts[f[2]] = append(b.starts[f[2]], at)
				b.mu.Unlock()
			}
		}
		_ = cmd.Wait() // killed by stop
	}()
	t.Cleanup(func() { b.stop() })
	return b
}

// stop ends the watch and returns the starts seen, by node container.
func (b *nodeBoots) stop() map[string][]time.Time {
	b.cancel()
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.starts)
}

// observe records what the plan's progress shows: the RepoNodes' preload state
// once the plan has left ImagePreloading, and deletes one agent pod while it preloads.
func (w *upgradeWatch) observe(ctx context.Context, t *testing.T, c *cluster, plan *apiv1beta1.UpgradePlan) {
	phase := plan.Status.Phase
	if phase == apiv1beta1.PhaseImagePreloading {
		w.deleteAgentWhilePreloading(ctx, t, c, plan)
	}
	w.removeReleaseImage(ctx, t, c, phase)
	if phaseIndex(phase) > phaseIndex(apiv1beta1.PhaseISODownloading) && phaseIndex(phase) <= phaseIndex(apiv1beta1.PhaseNodeUpgrading) {
		var rns apiv1beta1.RepoNodeList
		if err := c.cl.List(ctx, &rns); err == nil {
			w.mu.Lock()
			for _, rn := range rns.Items {
				if _, ok := w.iso[rn.Name]; !ok {
					w.iso[rn.Name] = rn.Status.ISO
				}
			}
			w.mu.Unlock()
		}
	}
	if phaseIndex(phase) > phaseIndex(apiv1beta1.PhaseImagePreloading) {
		var rns apiv1beta1.RepoNodeList
		if err := c.cl.List(ctx, &rns); err == nil {
			w.mu.Lock()
			for _, rn := range rns.Items {
				if _, ok := w.preload[rn.Name]; !ok {
					w.preload[rn.Name] = rn.Status.Preload
				}
			}
			w.mu.Unlock()
		}
	}
}

// deleteAgentWhilePreloading deletes, once, the agent pod of a node other than the seed while
// that node preloads.
func (w *upgradeWatch) deleteAgentWhilePreloading(ctx context.Context, t *testing.T, c *cluster, plan *apiv1beta1.UpgradePlan) {
	w.mu.Lock()
	done := w.agentDeleted != ""
	w.mu.Unlock()
	if done {
		return
	}
	rel := releaseISO(t)
	for _, n := range c.nodes {
		if rel.seeds[n.Name] {
			continue
		}
		if plan.Status.NodeUpgradeStatuses[n.Name].State != apiv1beta1.NodeImagePreloading {
			continue
		}
		pods, err := c.cs.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=agent,app.kubernetes.io/instance=" + c.release,
			FieldSelector: "spec.nodeName=" + n.Name,
		})
		if err != nil || len(pods.Items) == 0 {
			return
		}
		if err := c.cs.CoreV1().Pods(c.namespace).Delete(ctx, pods.Items[0].Name, metav1.DeleteOptions{}); err != nil {
			t.Logf("delete agent pod %s: %v", pods.Items[0].Name, err)
			return
		}
		t.Logf("deleted agent pod %s on %s during ImagePreloading (node state %q)", pods.Items[0].Name, n.Name,
			plan.Status.NodeUpgradeStatuses[n.Name].State)
		w.mu.Lock()
		w.agentDeleted = n.Name
		w.mu.Unlock()
		return
	}
}

// watchNodes records when each node turns unschedulable and schedulable again, until ctx ends.
func (w *upgradeWatch) watchNodes(ctx context.Context, c *cluster) {
	watchEach(ctx, func(ctx context.Context) (watch.Interface, error) {
		return c.cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	}, func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		switch {
		case n.Spec.Unschedulable && w.cordoned[n.Name].IsZero():
			w.cordoned[n.Name] = now
		case !n.Spec.Unschedulable && !w.cordoned[n.Name].IsZero() && w.uncordoned[n.Name].IsZero():
			w.uncordoned[n.Name] = now
		}
	})
}

// watchJobs keeps the last state of each node Job in the namespace until ctx ends: the plan
// removes its Jobs when it cleans up.
func (w *upgradeWatch) watchJobs(ctx context.Context, c *cluster) {
	watchEach(ctx, func(ctx context.Context) (watch.Interface, error) {
		return c.cs.BatchV1().Jobs(c.namespace).Watch(ctx, metav1.ListOptions{})
	}, func(obj any) {
		j, ok := obj.(*batchv1.Job)
		if !ok {
			return
		}
		for _, ctr := range j.Spec.Template.Spec.Containers {
			for _, e := range ctr.Env {
				if e.Name == "UPGRADE_NODE_NAME" && e.Value != "" {
					w.mu.Lock()
					w.jobs[e.Value] = *j
					w.mu.Unlock()
				}
			}
		}
	})
}

// watchEach calls seen with every object added or modified in the watches start opens, opening
// a new one whenever the last ends, until ctx ends.
func watchEach(ctx context.Context, start func(context.Context) (watch.Interface, error), seen func(any)) {
	for ctx.Err() == nil {
		wi, err := start(ctx)
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		for ev := range wi.ResultChan() {
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				seen(ev.Object)
			}
		}
		wi.Stop()
	}
}

// phaseIndex is the position of p in the order phases run; -1 when unknown.
func phaseIndex(p apiv1beta1.Phase) int {
	return slices.Index([]apiv1beta1.Phase{
		apiv1beta1.PhaseInitializing, apiv1beta1.PhaseInitialized, apiv1beta1.PhaseISODownloading,
		apiv1beta1.PhaseISODownloaded, apiv1beta1.PhaseRepoCreating, apiv1beta1.PhaseRepoCreated,
		apiv1beta1.PhaseMetadataPopulating, apiv1beta1.PhaseMetadataPopulated, apiv1beta1.PhaseImagePreloading,
		apiv1beta1.PhaseImagePreloaded, apiv1beta1.PhaseClusterUpgrading, apiv1beta1.PhaseClusterUpgraded,
		apiv1beta1.PhaseNodeUpgrading, apiv1beta1.PhaseNodeUpgraded, apiv1beta1.PhaseCleaningUp,
		apiv1beta1.PhaseCleanedUp, apiv1beta1.PhaseSucceeded,
	}, p)
}

// conditions prints a plan's conditions on one line.
func conditions(cs []metav1.Condition) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "[%s=%s %s: %s] ", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

// dumpPlan logs the plan and the RepoNodes, for a failed run.
func dumpPlan(t *testing.T, c *cluster, plan *apiv1beta1.UpgradePlan) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
	defer cancel()
	if out, err := yaml.Marshal(plan); err == nil {
		t.Logf("UpgradePlan %s:\n%s", plan.Name, out)
	}
	var rns apiv1beta1.RepoNodeList
	if err := c.cl.List(ctx, &rns); err != nil {
		t.Logf("list RepoNodes: %v", err)
		return
	}
	for _, rn := range rns.Items {
		out, _ := json.Marshal(rn.Status)
		t.Logf("RepoNode %s: %s", rn.Name, out)
	}
}

// releaseMetadata reads harvester-release.yaml of the release's tree.
func releaseMetadata(t *testing.T, rel *testRelease) apiv1beta1.ReleaseMetadata {
	t.Helper()
	data, err := os.ReadFile(rel.tree + "/harvester-release.yaml")
	require.NoError(t, err)
	var m apiv1beta1.ReleaseMetadata
	require.NoError(t, yaml.Unmarshal(data, &m), "harvester-release.yaml")
	require.NotEmpty(t, m.Harvester, "harvester-release.yaml names no harvester version")
	require.NotEmpty(t, m.MinUpgradableVersion, "harvester-release.yaml names no minUpgradableVersion")
	return m
}

// deleteObject deletes obj and waits until it is gone.
func deleteObject(t *testing.T, c *cluster, obj client.Object) {
	t.Helper()
	eventually(t, 2*time.Minute, fmt.Sprintf("delete %T %s", obj, obj.GetName()), func(ctx context.Context) error {
		err := c.cl.Delete(ctx, obj)
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		if err := c.cl.Get(ctx, client.ObjectKeyFromObject(obj), obj); client.IgnoreNotFound(err) != nil {
			return err
		} else if err != nil {
			return nil
		}
		return fmt.Errorf("%s is still being deleted", obj.GetName())
	})
}

// agentCacheDir is the agents' node cache, as hack/e2e.sh installs the chart.
const agentCacheDir = "/var/lib/upgrade-repo-e2e/agent"

// agentsFollowPlans turns the agents, installed with the release ISO on their command line, into
// agents that follow the UpgradePlans (the chart's default), all at once since none is Ready
// before a plan exists, and empties the node cache of every node but the seeds.
func agentsFollowPlans(t *testing.T, c *cluster, rel *testRelease) {
	t.Helper()
	name := c.release + "-agent"
	var gen int64
	eventually(t, 2*time.Minute, "agents without --iso-url", func(ctx context.Context) error {
		ds, err := c.cs.AppsV1().DaemonSets(c.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ctr := &ds.Spec.Template.Spec.Containers[0]
		ctr.Args = slices.DeleteFunc(ctr.Args, func(a string) bool {
			return strings.HasPrefix(a, "--iso-url=") || strings.HasPrefix(a, "--iso-checksum=")
		})
		all := intstr.FromString("100%")
		ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{
			Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &all},
		}
		up, err := c.cs.AppsV1().DaemonSets(c.namespace).Update(ctx, ds, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		gen = up.Generation
		return nil
	})
	eventually(t, 5*time.Minute, "agents following the plans on every node", func(ctx context.Context) error {
		ds, err := c.cs.AppsV1().DaemonSets(c.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := ds.Status
		if st.ObservedGeneration < gen || int(st.UpdatedNumberScheduled) != len(c.nodes) {
			return fmt.Errorf("daemonset %s: %d of %d pods updated", name, st.UpdatedNumberScheduled, len(c.nodes))
		}
		pods, err := c.cs.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=agent,app.kubernetes.io/instance=" + c.release,
		})
		if err != nil {
			return err
		}
		running := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || slices.ContainsFunc(p.Spec.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--iso-url=") }) {
				return fmt.Errorf("agent pod %s still has the ISO on its command line", p.Name)
			}
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running != len(c.nodes) {
			return fmt.Errorf("%d of %d agent pods running", running, len(c.nodes))
		}
		return nil
	})
	for _, n := range c.nodes {
		if rel.seeds[n.Name] {
			continue
		}
		eventually(t, time.Minute, "empty the agent cache of "+n.Name, func(ctx context.Context) error {
			_, err := nodeCmd(ctx, n.Name, "sh", "-c", "rm -f "+agentCacheDir+"/*.iso")
			return err
		})
	}
}
