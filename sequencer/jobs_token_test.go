package sequencer_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/nodestep"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// A node Job's pod holds a token of the step's own audience, projected where its environment
// says: the proof its node's agent asks of a step report. The cluster Job reports to no agent and
// holds none.
func TestReconcileNodeJobsCarryTheStepToken(t *testing.T) {
	t.Parallel()
	k := newCluster(t, newPlan("up", nil))
	var clusterJob, nodeJob *batchv1.Job
	k.run("up", 300, "", 2, 2, func(*v1beta1.UpgradePlan) {
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
	spec := nodeJob.Spec.Template.Spec
	var tokenFile string
	for _, e := range spec.Containers[0].Env {
		if e.Name == "UPGRADE_STEP_TOKEN_FILE" {
			tokenFile = e.Value
		}
	}
	require.Equal(t, nodestep.TokenPath, tokenFile)
	var mounted bool
	for _, m := range spec.Containers[0].VolumeMounts {
		if m.Name == "step-token" {
			mounted = m.MountPath+"/token" == tokenFile && m.ReadOnly
		}
	}
	require.True(t, mounted, "the token's volume is mounted read-only where the environment says")
	var projected *int
	for i, v := range spec.Volumes {
		if v.Name == "step-token" {
			projected = &i
		}
	}
	require.NotNil(t, projected)
	src := spec.Volumes[*projected].Projected.Sources[0].ServiceAccountToken
	require.Equal(t, nodestep.TokenAudience, src.Audience)
	require.Equal(t, "token", src.Path)
	require.LessOrEqual(t, *src.ExpirationSeconds, int64(3600))
	for _, v := range clusterJob.Spec.Template.Spec.Volumes {
		require.NotEqual(t, "step-token", v.Name)
	}
}
