package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestImageRunsOnEveryNode runs the project image's `version` on every node, from the copy
// `kind load` put into the node's containerd (pulling is forbidden), and checks it reports the
// version hack/e2e.sh stamped into the binary.
func TestImageRunsOnEveryNode(t *testing.T) {
	c := env(t)
	for _, n := range c.nodes {
		t.Run(n.Name, func(t *testing.T) {
			t.Parallel()
			out := runOnNode(t, c, n.Name, "version", jobSpec{args: []string{"version"}, uid: 65532})
			require.Contains(t, out, "upgrade-repo")
			if c.version != "" {
				require.Contains(t, out, c.version)
			}
		})
	}
}

// jobSpec is what a Job of runOnNode runs: the project image with args, as uid, with volumes.
type jobSpec struct {
	args    []string
	uid     int64
	volumes []corev1.Volume
	mounts  []corev1.VolumeMount
}

// runOnNode runs the project image as a Job pinned to node, waits for it to succeed and returns
// its output.
func runOnNode(t *testing.T, c *cluster, node, name string, spec jobSpec) string {
	t.Helper()
	jobName := trimName(fmt.Sprintf("e2e-%s-%s", name, node))
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: jobName, Namespace: c.namespace, Labels: map[string]string{"e2e": name}},
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To[int32](2),
			TTLSecondsAfterFinished: ptr.To[int32](600),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"e2e": name}},
				Spec: corev1.PodSpec{
					NodeName:      node,
					RestartPolicy: corev1.RestartPolicyNever,
					Tolerations:   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Volumes:       spec.volumes,
					Containers: []corev1.Container{{
						Name:            "run",
						Image:           c.image,
						ImagePullPolicy: corev1.PullNever,
						Args:            spec.args,
						SecurityContext: restricted(spec.uid),
						VolumeMounts:    spec.mounts,
					}},
				},
			},
		},
	}
	jobs := c.cs.BatchV1().Jobs(c.namespace)
	eventually(t, time.Minute, "create job "+jobName, func(ctx context.Context) error {
		_ = jobs.Delete(ctx, jobName, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		_, err := jobs.Create(ctx, job, metav1.CreateOptions{})
		return err
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = jobs.Delete(ctx, jobName, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	})
	eventually(t, 5*time.Minute, "job "+jobName+" to succeed", func(ctx context.Context) error {
		j, err := jobs.Get(ctx, jobName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range j.Status.Conditions {
			if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
				return fmt.Errorf("job failed: %s: %s", cond.Reason, cond.Message)
			}
		}
		if j.Status.Succeeded == 0 {
			return errors.New("not succeeded yet")
		}
		return nil
	})
	var out string
	eventually(t, time.Minute, "logs of job "+jobName, func(ctx context.Context) error {
		pods, err := c.cs.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + jobName})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodSucceeded {
				continue
			}
			rc, err := c.cs.CoreV1().Pods(c.namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).Stream(ctx)
			if err != nil {
				return err
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				return err
			}
			out = string(b)
			return nil
		}
		return errors.New("no succeeded pod yet")
	})
	return out
}

// trimName shortens a generated object name to the 63 characters a label value may hold.
func trimName(s string) string {
	s = strings.ToLower(s)
	if len(s) > 63 {
		s = s[:63]
	}
	return strings.TrimRight(s, "-.")
}
