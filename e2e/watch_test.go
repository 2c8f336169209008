package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiv1beta1 "github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// instructionLatency is how soon an agent must act on what an UpgradePlan asks of it: the agents
// watch the plans, where they once read them every 10 s.
const instructionLatency = 2 * time.Second

// TestAgentsWatchPlans writes an instruction into an UpgradePlan's status, as the sequencer does
// (the sequencer is scaled to zero meanwhile, so that the test alone writes it), and measures how
// long each agent takes to act on it: an agent reports the checksum of its ISO as the plan that
// holds it writes it (an agent that follows the plans takes up the plan's ISO and reports its
// checksum at once), so a plan that writes it in capitals changes every agent's RepoNode.
// Deleting the plan changes it back.
func TestAgentsWatchPlans(t *testing.T) {
	c := env(t)
	rel := releaseISO(t)
	planned := "SHA512:" + strings.ToUpper(strings.TrimPrefix(rel.checksum, "sha512:"))
	// The agents hold the ISO of their command line (installed so), or none (they follow the
	// plans, as TestUpgrade leaves them): either way they run and report.
	agentsReport(t, c, 8*time.Minute, func(apiv1beta1.RepoNodeStatus) error { return nil })
	reported := func(ctx context.Context) (map[string]string, error) {
		var l apiv1beta1.RepoNodeList
		if err := c.cl.List(ctx, &l); err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, rn := range l.Items {
			out[rn.Name] = rn.Status.ISO.Checksum
		}
		return out, nil
	}

	// Deferred, not a Cleanup: the test's context, which the helpers use, is cancelled before
	// Cleanup functions run.
	defer stopSequencer(t, c)()
	plan := &apiv1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-watch"},
		Spec:       apiv1beta1.UpgradePlanSpec{Version: "v0.0.0-watch"},
	}
	recreate(t, c, plan)
	defer deleteObject(t, c, &apiv1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: plan.Name}})

	// measure waits, polling the RepoNodes every 50 ms, until every node reports want, and
	// returns how long each took from start.
	measure := func(what string, start time.Time, want func(string) bool) map[string]time.Duration {
		took := map[string]time.Duration{}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		err := poll(ctx, 50*time.Millisecond, func(ctx context.Context) error {
			got, err := reported(ctx)
			if err != nil {
				return err
			}
			for _, n := range c.nodes {
				if _, ok := took[n.Name]; !ok && want(got[n.Name]) {
					took[n.Name] = time.Since(start)
				}
			}
			if len(took) < len(c.nodes) {
				return fmt.Errorf("%d of %d agents: %v", len(took), len(c.nodes), got)
			}
			return nil
		})
		require.NoError(t, err, what)
		for node, d := range took {
			t.Logf("%s: %s after %s", what, node, d.Round(time.Millisecond))
		}
		return took
	}

	// Written again on a conflict: the API server may still add to a plan just created.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.cl.Get(t.Context(), client.ObjectKeyFromObject(plan), plan); err != nil {
			return err
		}
		plan.Status.Phase = apiv1beta1.PhaseISODownloading
		plan.Status.Agents = &apiv1beta1.AgentInstructions{ISOURL: originURL(c), ISOChecksum: planned, Hold: true}
		return c.cl.Status().Update(t.Context(), plan)
	}))
	start := time.Now()
	for node, d := range measure("the plan's instruction", start, func(s string) bool { return s == planned }) {
		require.Less(t, d, instructionLatency, "the agent on %s acted on the plan after %s", node, d)
	}

	require.NoError(t, c.cl.Delete(t.Context(), plan))
	start = time.Now()
	for node, d := range measure("the plan's deletion", start, func(s string) bool { return s != planned }) {
		require.Less(t, d, instructionLatency, "the agent on %s acted on the deletion after %s", node, d)
	}
}

// stopSequencer scales the sequencer to zero and waits until no replica is left (one still
// terminating could write a plan's status after the test does); the function it returns scales
// it back and waits for it to be ready. Call that deferred, not in a Cleanup: the test's context,
// which the helpers use, is cancelled before Cleanup functions run.
func stopSequencer(t *testing.T, c *cluster) (restore func()) {
	t.Helper()
	sequencer := c.release + "-sequencer"
	was, err := c.cs.AppsV1().Deployments(c.namespace).GetScale(t.Context(), sequencer, metav1.GetOptions{})
	require.NoError(t, err)
	scale(t, c, sequencer, 0)
	eventually(t, 2*time.Minute, "no sequencer pod left", func(ctx context.Context) error {
		pods, err := c.cs.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=sequencer,app.kubernetes.io/instance=" + c.release,
		})
		if err != nil {
			return err
		}
		if n := len(pods.Items); n > 0 {
			return fmt.Errorf("%d sequencer pods", n)
		}
		return nil
	})
	return func() {
		scale(t, c, sequencer, was.Spec.Replicas)
		eventuallyDeploymentReady(t, c, sequencer, 5*time.Minute)
	}
}

// scale sets the replicas of a Deployment in the chart's namespace.
func scale(t *testing.T, c *cluster, name string, replicas int32) {
	t.Helper()
	eventually(t, time.Minute, fmt.Sprintf("scale %s to %d", name, replicas), func(ctx context.Context) error {
		_, err := c.cs.AppsV1().Deployments(c.namespace).UpdateScale(ctx, name, &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.namespace},
			Spec:       autoscalingv1.ScaleSpec{Replicas: replicas},
		}, metav1.UpdateOptions{})
		return err
	})
}

// agentsReport waits until every node's agent has reported within the last minute and ok accepts
// its report.
func agentsReport(t *testing.T, c *cluster, timeout time.Duration, ok func(apiv1beta1.RepoNodeStatus) error) {
	t.Helper()
	eventually(t, timeout, "every agent reports", func(ctx context.Context) error {
		for _, n := range c.nodes {
			var rn apiv1beta1.RepoNode
			if err := c.cl.Get(ctx, client.ObjectKey{Name: n.Name}, &rn); err != nil {
				return err
			}
			if since := time.Since(rn.Status.HeartbeatTime.Time); since > time.Minute {
				return fmt.Errorf("RepoNode %s: last report %s ago", n.Name, since.Round(time.Second))
			}
			if err := ok(rn.Status); err != nil {
				return fmt.Errorf("RepoNode %s: %w", n.Name, err)
			}
		}
		return nil
	})
}
