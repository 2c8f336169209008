package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiv1beta1 "github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// refusedPlanName is the plan that names an ISO refusing the installed version.
const refusedPlanName = "e2e-refused"

// refusedBeforeDownload creates a plan for the release while the installed version is one the
// release refuses (below its minUpgradableVersion), and checks that it fails in Initializing,
// within seconds, from a few range reads of the ISO at the origin and without any agent being
// told to fetch it. It returns the time from the plan's creation to Failed.
func refusedBeforeDownload(t *testing.T, c *cluster, upgradeImage, target, minUpgradable string) time.Duration {
	t.Helper()
	installed := minUpgradable + "-rc0" // sorts before minUpgradableVersion
	recreate(t, c, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: installedConfigMap, Namespace: c.namespace},
		Data:       map[string]string{"version": installed},
	})
	since := metav1.Now()
	start := time.Now()
	recreate(t, c, &apiv1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: refusedPlanName},
		Spec:       apiv1beta1.UpgradePlanSpec{Version: target, Upgrade: &upgradeImage, Mode: apiv1beta1.ModeAutomatic},
	})
	var plan apiv1beta1.UpgradePlan
	var took time.Duration
	eventually(t, time.Minute, "plan "+refusedPlanName+" Failed", func(ctx context.Context) error {
		if err := c.cl.Get(ctx, client.ObjectKey{Name: refusedPlanName}, &plan); err != nil {
			return err
		}
		if plan.Status.Phase != apiv1beta1.PhaseFailed {
			return fmt.Errorf("phase %q", plan.Status.Phase)
		}
		took = time.Since(start)
		return nil
	})
	require.Equal(t, apiv1beta1.PhaseInitializing, plan.Status.FailedPhase, "refused before ISODownloading")
	cond := meta.FindStatusCondition(plan.Status.Conditions, apiv1beta1.ConditionDegraded)
	require.NotNil(t, cond)
	require.Contains(t, cond.Message, minUpgradable, "the reason names the release's minimum version")
	judged := meta.FindStatusCondition(plan.Status.Conditions, apiv1beta1.ConditionReleaseJudged)
	require.NotNil(t, judged)
	require.Equal(t, metav1.ConditionTrue, judged.Status, judged.Message)
	require.True(t, plan.Status.Agents == nil || !plan.Status.Agents.Hold, "no agent is told to fetch the ISO")
	for _, p := range plan.Status.PhaseTransitionTimestamps {
		require.NotEqual(t, apiv1beta1.PhaseISODownloading, p.Phase)
	}
	// What the origin sent: range reads only, none of them the whole ISO.
	reqs, bytes := originRequestsSince(t, c, since)
	t.Logf("plan %s refused in %s (%s); origin requests since its creation: %d, ranges asking for %d bytes",
		refusedPlanName, took.Round(time.Millisecond), cond.Message, reqs, bytes)
	// The ISO's directories and release metadata, and each image archive's first block, whose
	// zstd frame header says the archive's unpacked size for the disk forecast: a few blocks.
	require.LessOrEqual(t, bytes, int64(2<<20), "at most 2 MiB of the ISO read to refuse it")
	deleteObject(t, c, &apiv1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: refusedPlanName}})
	recreate(t, c, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: installedConfigMap, Namespace: c.namespace},
		Data:       map[string]string{"version": minUpgradable},
	})
	return took
}

// originRequestsSince counts the origin's requests for the ISO logged since t0 and the bytes
// their ranges ask for; a request without a Range fails the test (it would be the whole ISO).
func originRequestsSince(t *testing.T, c *cluster, t0 metav1.Time) (int, int64) {
	t.Helper()
	pods, err := c.cs.CoreV1().Pods(c.namespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + originName})
	require.NoError(t, err)
	n, total := 0, int64(0)
	for _, p := range pods.Items {
		out, err := c.cs.CoreV1().Pods(c.namespace).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &t0}).DoRaw(t.Context())
		require.NoError(t, err)
		for _, line := range strings.Split(string(out), "\n") {
			var rec struct {
				Msg, Path, Range string
			}
			if json.Unmarshal([]byte(line), &rec) != nil || rec.Msg != "request" || !strings.HasSuffix(rec.Path, ".iso") {
				continue
			}
			n++
			a, b, ok := strings.Cut(strings.TrimPrefix(rec.Range, "bytes="), "-")
			start, err1 := strconv.ParseInt(a, 10, 64)
			end, err2 := strconv.ParseInt(b, 10, 64)
			require.True(t, ok && err1 == nil && err2 == nil, "origin request %q asks for an open or no range", rec.Range)
			total += end - start + 1
		}
	}
	return n, total
}
