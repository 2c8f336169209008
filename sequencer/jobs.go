package sequencer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/nodestep"
)

func jobState(j *batchv1.Job) JobState {
	st := JobState{Exists: true}
	if t := j.Status.StartTime; t != nil {
		st.Started = t.Time
	}
	if t := j.Status.CompletionTime; t != nil {
		st.Completed = t.Time
	}
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			st.Succeeded = true
		case batchv1.JobFailed:
			st.Failed, st.FailedAt = true, c.LastTransitionTime.Time
			st.Message = fmt.Sprintf("job %s/%s failed: %s %s", j.Namespace, j.Name, c.Reason, c.Message)
		}
	}
	return st
}

// stepWordsWait is how long after a node Job failed the sequencer waits for the step's own words
// (its pod's termination message) before it takes the Job's failure without them. The Job's and
// the pods' caches are fed by separate watches: after an API server restart, which a failed
// control-plane step often brings, the Job's failure can be seen before the pod status that says
// why.
const stepWordsWait = 20 * time.Second

// failedSteps says what the failed pods of Job j said as they ended (their termination
// messages, the step's error or the end of its log), the last one's, followed by the pod and its
// exit status, or "".
func (r *Reconciler) failedSteps(ctx context.Context, j *batchv1.Job) (string, error) {
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods, client.InNamespace(j.Namespace), client.MatchingLabels{batchv1.JobNameLabel: j.Name}); err != nil {
		return "", fmt.Errorf("list pods of job %s/%s: %w", j.Namespace, j.Name, err)
	}
	var last time.Time
	msg := ""
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			t := cs.State.Terminated
			if t == nil || t.ExitCode == 0 || strings.TrimSpace(t.Message) == "" || t.FinishedAt.Time.Before(last) {
				continue
			}
			last, msg = t.FinishedAt.Time, fmt.Sprintf("%s (pod %s exited %d)", strings.TrimSpace(t.Message), p.Name, t.ExitCode)
		}
	}
	return msg, nil
}

// stuckReasons are the container waiting reasons that do not clear without a change.
var stuckReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "CrashLoopBackOff": true,
}

// jobPods lists the pods of Job j from the cache, uncopied: they are only read.
func (r *Reconciler) jobPods(ctx context.Context, j *batchv1.Job) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods, client.InNamespace(j.Namespace), client.MatchingLabels{batchv1.JobNameLabel: j.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list pods of job %s/%s: %w", j.Namespace, j.Name, err)
	}
	return pods.Items, nil
}

// stuck says why a running Job's pod, of pods, cannot make progress, or returns "".
func stuck(pods []corev1.Pod) string {
	for _, p := range pods {
		for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			if w := cs.State.Waiting; w != nil && stuckReasons[w.Reason] {
				return fmt.Sprintf("pod %s/%s container %s: %s: %s", p.Namespace, p.Name, cs.Name, w.Reason, w.Message)
			}
		}
	}
	return ""
}

// orphanAfter is how long a node Job's pod may stay Pending, with a container that was created
// but never started, after its node came back Ready, before it is taken for lost to a reboot.
const orphanAfter = time.Minute

// orphanedPods names the pods, of a node Job's pods, that a reboot of their node left behind:
// Pending, with a container containerd had created but never started, while the node has been
// Ready again for orphanAfter. The kubelet never fails such a pod, so the Job would not replace
// it. node finds a Node by name (nil when there is none): only the nodes of the Job's pods are
// looked at, not every node of the cluster for every Job.
func orphanedPods(pods []corev1.Pod, node func(string) *corev1.Node, now time.Time) []string {
	var out []string
	for _, p := range pods {
		if p.Status.Phase != corev1.PodPending || p.DeletionTimestamp != nil {
			continue
		}
		since, ready := readySince(node(p.Spec.NodeName))
		if !ready || !since.After(p.CreationTimestamp.Time) || now.Sub(since) < orphanAfter {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; cs.ContainerID != "" && w != nil && w.Reason == "" {
				out = append(out, p.Name)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// readySince returns when node n last became Ready, and whether it is Ready; a nil n is not.
func readySince(n *corev1.Node) (time.Time, bool) {
	if n == nil {
		return time.Time{}, false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

// jobName names a plan's Job for an attempt, within the 63 characters a label value may have.
func jobName(plan, node string, attempt int) string {
	name := plan + "-cluster"
	if node != "" {
		name = plan + "-node-" + node
	}
	if attempt > 0 {
		name += "-retry" + strconv.Itoa(attempt)
	}
	if len(name) > 63 {
		name = strings.TrimRight(name[:54], "-.") + "-" + shortHash(name)
	}
	return name
}

// nodeRepoURL is the base URL a node Job reaches its own node's agent at without cluster DNS:
// the cluster IP of the local Service when there is one, else the agent's own URL from its
// RepoNode, else the repo Service's URL.
func (r *Reconciler) nodeRepoURL(ctx context.Context, node string) (string, error) {
	if r.localService != "" {
		var svc corev1.Service
		err := r.c.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: r.localService}, &svc)
		switch {
		case err == nil && svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone && len(svc.Spec.Ports) > 0:
			return "http://" + net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port))), nil
		case err != nil && !apierrors.IsNotFound(err):
			return "", fmt.Errorf("get service %s/%s: %w", r.namespace, r.localService, err)
		}
	}
	var rn v1beta1.RepoNode
	if err := r.c.Get(ctx, client.ObjectKey{Name: node}, &rn); err == nil && rn.Status.Repo.URL != "" {
		return rn.Status.Repo.URL, nil
	}
	return r.repoURL, nil
}

func (r *Reconciler) createJob(ctx context.Context, plan *v1beta1.UpgradePlan, node string) error {
	image := r.upgradeImage(plan)
	if image == "" {
		return errors.New("no upgrade image: set spec.upgrade or the sequencer's default")
	}
	component := "cluster"
	repoURL := r.repoURL
	if node != "" {
		component = "node"
		var err error
		if repoURL, err = r.nodeRepoURL(ctx, node); err != nil {
			return err
		}
	}
	labels := map[string]string{LabelPlan: plan.Name, LabelComponent: component, LabelAttempt: strconv.Itoa(plan.Status.Retries)}
	env := []corev1.EnvVar{
		{Name: "UPGRADE_REPO_URL", Value: repoURL},
		{Name: "UPGRADE_REPO_SERVICE_URL", Value: r.repoURL},
		{Name: "UPGRADE_VERSION", Value: plan.Spec.Version},
		{Name: "UPGRADE_PREVIOUS_VERSION", Value: plan.Status.PreviousVersion},
		{Name: "UPGRADE_STEP", Value: component},
		{Name: "UPGRADE_PLAN", Value: plan.Name},
		{Name: "UPGRADE_ATTEMPT", Value: strconv.Itoa(plan.Status.Retries)},
		{Name: "HARVESTER_UPGRADE_NAME", Value: plan.Name},
		{Name: "UPGRADE_FORCE", Value: strconv.FormatBool(plan.Spec.Force)},
		// A rollback's node step downgrades within one minor version, which it refuses otherwise.
		{Name: "UPGRADE_ROLLBACK", Value: strconv.FormatBool(plan.Spec.Rollback != nil)},
	}
	if m := plan.Status.ReleaseMetadata; m != nil {
		env = append(env,
			corev1.EnvVar{Name: "UPGRADE_RELEASE_HARVESTER", Value: m.Harvester},
			corev1.EnvVar{Name: "UPGRADE_RELEASE_HARVESTER_CHART", Value: m.HarvesterChart},
			corev1.EnvVar{Name: "UPGRADE_RELEASE_OS", Value: m.OS},
			corev1.EnvVar{Name: "UPGRADE_RELEASE_KUBERNETES", Value: m.Kubernetes},
			corev1.EnvVar{Name: "UPGRADE_RELEASE_RANCHER", Value: m.Rancher},
			corev1.EnvVar{Name: "UPGRADE_RELEASE_MONITORING_CHART", Value: m.MonitoringChart},
			corev1.EnvVar{Name: "UPGRADE_RELEASE_LOGGING_CHART", Value: m.LoggingChart},
			corev1.EnvVar{Name: "UPGRADE_RELEASE_KUBEVIRT", Value: m.Kubevirt},
		)
		if m.Etcd != "" {
			env = append(env, corev1.EnvVar{Name: "UPGRADE_RELEASE_ETCD", Value: m.Etcd})
		}
		if m.CoreDNS != "" {
			env = append(env, corev1.EnvVar{Name: "UPGRADE_RELEASE_COREDNS", Value: m.CoreDNS})
		}
	}
	// A node step that reboots its node loses its pod to the reboot and runs again in a new
	// one, which must find its work done (the step's contract): room for that and for one
	// genuine retry.
	backoff := int32(3)
	spec := corev1.PodSpec{
		RestartPolicy:      corev1.RestartPolicyNever,
		ServiceAccountName: r.jobAccount,
		// The step's error, or the end of its log, is what the plan says of a failed step.
		Containers: []corev1.Container{{Name: "upgrade", Image: image, Env: env,
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError}},
	}
	if node != "" {
		labels[LabelNode] = node
		// The step proves to its node's agent that it is this node's step with a token of its
		// own audience, bound to the pod (and so to the node): the agent reviews it.
		env = append(env, corev1.EnvVar{Name: "UPGRADE_NODE_NAME", Value: node}, corev1.EnvVar{Name: "HARVESTER_UPGRADE_NODE_NAME", Value: node},
			corev1.EnvVar{Name: "UPGRADE_STEP_TOKEN_FILE", Value: nodestep.TokenPath})
		privileged := true
		spec.Containers[0].Env = env
		spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &privileged}
		tokenSeconds := int64(3600)
		spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "host", MountPath: "/host"},
			{Name: "step-token", MountPath: path.Dir(nodestep.TokenPath), ReadOnly: true}}
		spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}},
			{Name: "step-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
				ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: nodestep.TokenAudience, ExpirationSeconds: &tokenSeconds, Path: path.Base(nodestep.TokenPath)},
			}}}}}}
		spec.HostPID = true
		// Pinned to the node by name; it runs on the cordoned node, so it tolerates every taint.
		spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}},
		}}
		spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.namespace, Name: jobName(plan.Name, node, plan.Status.Retries), Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit: &backoff,
			// A step that says running it again would repeat its failure (nodestep.ExitPermanent)
			// fails its Job at once: a release that does not come up is not applied again.
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:      batchv1.PodFailurePolicyActionFailJob,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{nodestep.ExitPermanent}},
			}}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
	if r.jobTimeout > 0 {
		secs := int64(r.jobTimeout / time.Second)
		job.Spec.ActiveDeadlineSeconds = &secs
	}
	if err := controllerutil.SetControllerReference(plan, job, r.c.Scheme()); err != nil {
		return fmt.Errorf("own job %s: %w", job.Name, err)
	}
	if err := r.c.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create job %s/%s: %w", job.Namespace, job.Name, err)
	}
	return nil
}
