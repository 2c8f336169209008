package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiv1beta1 "github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// releaseCheckImage is the release's runnable image: hack/e2e.sh builds it from the test image
// (`testimage hello`: it starts, prints and exits 0) and packs it into the release ISO, never
// into the nodes, so a node only gets it from the preload or through the mirror.
const releaseCheckImage = "docker.io/rancher/harvester-release-check:v1.5.2"

// mirrorPort is the chart's mirror.port, which hack/e2e.sh leaves at its default.
const mirrorPort = 5050

// manifestAccept is what containerd accepts when it resolves a tag.
var manifestAccept = strings.Join([]string{
	"application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
	"application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.docker.distribution.manifest.v2+json",
}, ", ")

// requireMirrorPull checks the cluster as its own registry, after the plan Succeeded and the
// agents dropped its ISO: the release's runnable image is removed from the last node's containerd
// (its content with it), a pod of that image with pull policy IfNotPresent is started on that
// node and runs to completion, which with no registry in reach means the node's containerd pulled
// it through its own agent (hosts.toml written by the chart, config_path set by hack/e2e.sh); that
// agent's metrics show the blob bytes came from a peer. That node's agent first loses its own
// image lists and restarts, as on a node that joined after the upgrade: it serves the release
// from what the cluster records on the Version. The node's mirror answers a release image
// by tag and refuses (404) an image that is not the release's; a pod that names the release
// image by its manifest digest starts there too, the image removed again first.
func requireMirrorPull(t *testing.T, c *cluster, version string) {
	t.Helper()
	require.Contains(t, releaseISO(t).refs(), releaseCheckImage, "the release ISO lacks its runnable image (hack/e2e.sh packs it)")
	n := c.nodes[len(c.nodes)-1]
	ip := internalIP(t, n)
	mirror := fmt.Sprintf("http://%s:%d", ip, mirrorPort)

	// The agents dropped the ISO once the plan ended: no repo, and nothing to import again from.
	eventually(t, 3*time.Minute, "the agent of "+n.Name+" dropped the plan's ISO", func(ctx context.Context) error {
		body, err := agentGetOnNode(ctx, c, n.Name, "/v1/status")
		if err != nil {
			return err
		}
		var st agentStatus
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			return err
		}
		if st.Ready || st.ISO.SHA512 != "" {
			return fmt.Errorf("agent of %s still holds an ISO (%s, %s)", n.Name, st.ISO.State, st.ISO.SHA512)
		}
		return nil
	})

	// As a node that joined after the upgrade: its agent never preloaded the release, so it has no
	// image list of its own and learns the release's images from the cluster (the Version's
	// status.images, recorded by the sequencer from the verified ISO).
	var v apiv1beta1.Version
	require.NoError(t, c.cl.Get(t.Context(), client.ObjectKey{Name: version}, &v))
	require.Contains(t, v.Status.Images, releaseCheckImage, "Version %s: the release's images recorded by the sequencer", version)
	eventually(t, time.Minute, "remove the image lists of the agent of "+n.Name, func(ctx context.Context) error {
		_, err := nodeCmd(ctx, n.Name, "rm", "-rf", agentCacheDir+"/mirror-lists")
		return err
	})
	restartAgent(t, c, n.Name)
	t.Logf("the agent of %s restarted without image lists of its own", n.Name)

	t.Run("the mirror serves the release's images only", func(t *testing.T) {
		for _, tc := range []struct {
			path string
			want int
		}{
			{"/v2/", http.StatusOK},
			{"/v2/rancher/harvester-release-check/manifests/v1.5.2?ns=docker.io", http.StatusOK},
			{"/v2/library/busybox/manifests/latest?ns=docker.io", http.StatusNotFound},
			{"/v2/rancher/harvester-release-check/manifests/latest?ns=docker.io", http.StatusNotFound},
			{"/v2/rancher/harvester-release-check/blobs/sha256:" + strings.Repeat("0", 64) + "?ns=docker.io", http.StatusNotFound},
		} {
			eventually(t, time.Minute, "GET "+mirror+tc.path, func(ctx context.Context) error {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, mirror+tc.path, nil)
				if err != nil {
					return err
				}
				req.Header.Set("Accept", manifestAccept)
				resp, err := httpClient.Do(req)
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != tc.want {
					return fmt.Errorf("GET %s: %s, want %d", tc.path, resp.Status, tc.want)
				}
				return nil
			})
		}
	})

	removeImage(t, n.Name, releaseCheckImage)
	before := agentMetricsOnNode(t, c, n.Name)[`upgrade_repo_registry_sent_bytes_total{source="peer"}`]
	t.Logf("removed %s from %s; its agent had sent %.0f blob bytes from peers", releaseCheckImage, n.Name, before)

	pod, events, err := runReleaseCheck(t, c, n.Name, "e2e-mirror-pull", releaseCheckImage, corev1.PullIfNotPresent)
	if err != nil {
		out, _ := nodeCmd(t.Context(), n.Name, "sh", "-c", "ls -R /etc/containerd/certs.d; cat /etc/containerd/certs.d/docker.io/hosts.toml; grep -n config_path /etc/containerd/config.toml")
		t.Logf("containerd's registry configuration on %s:\n%s", n.Name, out)
	}
	require.NoError(t, err, "a pod of %s on %s with the image removed; events:\n%s", releaseCheckImage, n.Name, strings.Join(events, "\n"))
	require.True(t, slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, "Pulled") }),
		"the kubelet pulled %s on %s; events:\n%s", releaseCheckImage, n.Name, strings.Join(events, "\n"))
	after := agentMetricsOnNode(t, c, n.Name)[`upgrade_repo_registry_sent_bytes_total{source="peer"}`]
	t.Logf("pod %s ran %s on %s after a pull through its agent: %.0f blob bytes from peers; events: %s",
		pod.Name, releaseCheckImage, n.Name, after-before, strings.Join(events, "; "))
	// The image's one layer is the test program, megabytes of it.
	require.Greater(t, after-before, float64(1<<20), "blob bytes the agent of %s passed on from peers", n.Name)
	requireImages(t, n.Name, []string{releaseCheckImage})
	require.NoError(t, c.cs.CoreV1().Pods(c.namespace).Delete(t.Context(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))

	t.Run("a pod that names the release image by digest starts too", func(t *testing.T) {
		// The manifest digest another node's import wrote (the one a pod spec would name), and
		// the one the Version records where the ISO's archive names it.
		digest := manifestDigest(t, c.nodes[0].Name, releaseCheckImage)
		for _, d := range v.Status.ImageDigests {
			if d.Ref == releaseCheckImage && d.Manifest != "" {
				require.Equal(t, d.Manifest, digest, "the manifest digest the Version records")
			}
		}
		byDigest := strings.TrimSuffix(releaseCheckImage, ":v1.5.2") + "@" + digest
		// Every name of the image (its tag, the NAME@DIGEST and image ID references the CRI
		// adds on a pull), so that its content goes too.
		removeImageNamed(t, n.Name, digest)
		before := agentMetricsOnNode(t, c, n.Name)[`upgrade_repo_registry_sent_bytes_total{source="peer"}`]
		pod, events, err := runReleaseCheck(t, c, n.Name, "e2e-mirror-pull-digest", byDigest, corev1.PullIfNotPresent)
		require.NoError(t, err, "a pod of %s on %s with the image removed; events:\n%s", byDigest, n.Name, strings.Join(events, "\n"))
		after := agentMetricsOnNode(t, c, n.Name)[`upgrade_repo_registry_sent_bytes_total{source="peer"}`]
		t.Logf("pod %s ran %s on %s after a pull through its agent: %.0f blob bytes from peers; events: %s", pod.Name, byDigest, n.Name, after-before, strings.Join(events, "; "))
		require.True(t, slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, "Pulled: Successfully pulled") }),
			"the kubelet pulled %s on %s; events:\n%s", byDigest, n.Name, strings.Join(events, "\n"))
		// No registry is in reach: the pull that succeeded went through the node's agent, whose layer may
		// come from a peer or from what the node's own store still holds.
		require.NoError(t, c.cs.CoreV1().Pods(c.namespace).Delete(t.Context(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
		// The node as it was: the release image under its tag.
		pod, events, err = runReleaseCheck(t, c, n.Name, "e2e-mirror-pull", releaseCheckImage, corev1.PullIfNotPresent)
		require.NoError(t, err, "the tag again; events:\n%s", strings.Join(events, "\n"))
		require.NoError(t, c.cs.CoreV1().Pods(c.namespace).Delete(t.Context(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	})
}

// manifestDigest is the digest of the manifest node's containerd holds for image ref.
func manifestDigest(t *testing.T, node, ref string) string {
	t.Helper()
	var d string
	eventually(t, time.Minute, "the manifest digest of "+ref+" on "+node, func(ctx context.Context) error {
		out, err := nodeCmd(ctx, node, "ctr", "-n", "k8s.io", "images", "ls", "name=="+ref)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 2 && f[0] == ref && strings.HasPrefix(f[2], "sha256:") {
				d = f[2]
				return nil
			}
		}
		return fmt.Errorf("%s not listed on %s:\n%s", ref, node, out)
	})
	return d
}

// removeImageNamed removes every reference of node's containerd whose manifest digest is digest,
// and with the last the image's content, as the image garbage collection removes an image.
func removeImageNamed(t *testing.T, node, digest string) {
	t.Helper()
	eventually(t, time.Minute, "remove every name of "+digest+" from "+node, func(ctx context.Context) error {
		out, err := nodeCmd(ctx, node, "ctr", "-n", "k8s.io", "images", "ls")
		if err != nil {
			return err
		}
		var refs []string
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 2 && f[2] == digest {
				refs = append(refs, f[0])
			}
		}
		if len(refs) == 0 {
			return nil
		}
		if _, err := nodeCmd(ctx, node, append([]string{"ctr", "-n", "k8s.io", "images", "rm", "--sync"}, refs...)...); err != nil {
			return err
		}
		return fmt.Errorf("removed %v; listing again", refs)
	})
}

// removeImage removes image ref and its content from node's containerd, as the image garbage
// collection would.
func removeImage(t *testing.T, node, ref string) {
	t.Helper()
	eventually(t, time.Minute, "remove "+ref+" from "+node, func(ctx context.Context) error {
		if _, err := nodeCmd(ctx, node, "ctr", "-n", "k8s.io", "images", "rm", "--sync", ref); err != nil &&
			!strings.Contains(err.Error(), "not found") {
			return err
		}
		out, err := nodeCmd(ctx, node, "ctr", "-n", "k8s.io", "images", "ls", "-q")
		if err != nil {
			return err
		}
		if slices.Contains(strings.Fields(out), ref) {
			return errors.New("still listed")
		}
		return nil
	})
}

// runReleaseCheck runs a pod of the release's runnable image on node with the pull policy given
// and waits up to three minutes for it to succeed; it returns the pod, its events and, when it
// did not succeed, why (the waiting containers' reasons logged). The pod printed its greeting
// when err is nil.
func runReleaseCheck(t *testing.T, c *cluster, node, name, image string, policy corev1.PullPolicy) (*corev1.Pod, []string, error) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.namespace},
		Spec: corev1.PodSpec{
			NodeName:      node,
			RestartPolicy: corev1.RestartPolicyNever,
			Tolerations:   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "release-check", Image: image, ImagePullPolicy: policy,
				SecurityContext: restricted(65534),
			}},
		},
	}
	recreate(t, c, pod)
	var last *corev1.Pod
	err := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		return poll(ctx, time.Second, func(ctx context.Context) error {
			p, err := c.cs.CoreV1().Pods(c.namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			last = p
			if p.Status.Phase == corev1.PodSucceeded {
				return nil
			}
			return fmt.Errorf("pod %s is %s", pod.Name, p.Status.Phase)
		})
	}()
	events := podEvents(t, c, pod.Name)
	if err != nil {
		if last != nil {
			for _, s := range last.Status.ContainerStatuses {
				if s.State.Waiting != nil {
					t.Logf("container %s waiting: %s %s", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message)
				}
			}
		}
		return pod, events, err
	}
	logs, err := c.cs.CoreV1().Pods(c.namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(t.Context())
	if err != nil {
		return pod, events, err
	}
	if !strings.Contains(string(logs), "hello from the release image") {
		return pod, events, fmt.Errorf("pod %s printed %q", pod.Name, logs)
	}
	return pod, events, nil
}

// chainIDOnNode returns the chain ID of the top layer of ref's image for linux/amd64 as the node's
// containerd holds it: the name of the snapshot a container of it starts from.
func chainIDOnNode(t *testing.T, node, ref string) string {
	t.Helper()
	get := func(dgst string, v any) {
		out, err := nodeCmd(t.Context(), node, "ctr", "-n", "k8s.io", "content", "get", dgst)
		require.NoError(t, err, "%s: content %s", node, dgst)
		require.NoError(t, json.Unmarshal([]byte(out), v), "%s: content %s", node, dgst)
	}
	out, err := nodeCmd(t.Context(), node, "ctr", "-n", "k8s.io", "images", "ls", "name=="+ref)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, "%s: image %s: %s", node, ref, out)
	target := strings.Fields(lines[1])[2]
	var m struct {
		Manifests []struct {
			Digest   string `json:"digest"`
			Platform struct {
				OS, Architecture string
			} `json:"platform"`
		} `json:"manifests"`
		Config struct {
			Digest string `json:"digest"`
		} `json:"config"`
	}
	get(target, &m)
	for _, d := range m.Manifests {
		if d.Platform.OS == "linux" && d.Platform.Architecture == "amd64" {
			get(d.Digest, &m)
			break
		}
	}
	require.NotEmpty(t, m.Config.Digest, "%s: no config for linux/amd64 in %s", node, ref)
	var cfg struct {
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	get(m.Config.Digest, &cfg)
	require.NotEmpty(t, cfg.RootFS.DiffIDs, "%s: %s has no layers", node, ref)
	diffIDs := make([]digest.Digest, len(cfg.RootFS.DiffIDs))
	for i, d := range cfg.RootFS.DiffIDs {
		diffIDs[i] = digest.Digest(d)
	}
	return identity.ChainID(diffIDs).String()
}

// requireRunsFromPreload runs the release's runnable image on a node whose agent preloaded it in
// one pass, without letting the kubelet pull it: the container starts from the snapshot the
// preload committed under the image's chain ID, which is there before the pod.
func requireRunsFromPreload(t *testing.T, c *cluster, node string) {
	t.Helper()
	chain := chainIDOnNode(t, node, releaseCheckImage)
	info, err := nodeCmd(t.Context(), node, "ctr", "-n", "k8s.io", "snapshots", "--snapshotter", "overlayfs", "info", chain)
	require.NoError(t, err, "%s: no snapshot %s of %s before its first container: %s", node, chain, releaseCheckImage, info)
	pod, events, err := runReleaseCheck(t, c, node, "e2e-from-preload", releaseCheckImage, corev1.PullNever)
	require.NoError(t, err, "a pod of %s on %s, never pulled; events:\n%s", releaseCheckImage, node, strings.Join(events, "\n"))
	require.False(t, slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, "Pulling") }),
		"the kubelet pulled %s on %s; events:\n%s", releaseCheckImage, node, strings.Join(events, "\n"))
	t.Logf("pod %s ran %s on %s from its preloaded snapshot; events: %s", pod.Name, releaseCheckImage, node, strings.Join(events, "; "))
	require.NoError(t, c.cs.CoreV1().Pods(c.namespace).Delete(t.Context(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
}

// podEvents returns the events of a pod of the tests' namespace, each as "Reason: message".
func podEvents(t *testing.T, c *cluster, name string) []string {
	t.Helper()
	var out []string
	eventually(t, time.Minute, "events of pod "+name, func(ctx context.Context) error {
		evs, err := c.cs.CoreV1().Events(c.namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return err
		}
		out = out[:0]
		for _, e := range evs.Items {
			out = append(out, e.Reason+": "+e.Message)
		}
		return nil
	})
	return out
}

// restartAgent deletes the agent pod of node and waits until its successor runs.
func restartAgent(t *testing.T, c *cluster, node string) {
	t.Helper()
	old := deleteAgentPod(t, c, node)
	eventually(t, 3*time.Minute, "a new agent pod running on "+node, func(ctx context.Context) error {
		pods, err := agentPods(ctx, c, node)
		if err != nil {
			return err
		}
		if len(pods) != 1 || string(pods[0].UID) == old {
			return fmt.Errorf("%d agent pods on %s, the old one among them", len(pods), node)
		}
		for _, s := range pods[0].Status.ContainerStatuses {
			if s.Name == "agent" && s.State.Running != nil {
				return nil
			}
		}
		return fmt.Errorf("agent pod %s is %s", pods[0].Name, pods[0].Status.Phase)
	})
}

// agentPods lists the agent pods of the chart's release on node.
func agentPods(ctx context.Context, c *cluster, node string) ([]corev1.Pod, error) {
	pods, err := c.cs.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=agent,app.kubernetes.io/instance=" + c.release, FieldSelector: "spec.nodeName=" + node,
	})
	if err != nil {
		return nil, err
	}
	return pods.Items, nil
}

// deleteAgentPod deletes the one agent pod on node and returns its UID.
func deleteAgentPod(t *testing.T, c *cluster, node string) string {
	t.Helper()
	var old string
	eventually(t, time.Minute, "delete the agent pod of "+node, func(ctx context.Context) error {
		pods, err := agentPods(ctx, c, node)
		if err != nil {
			return err
		}
		if len(pods) != 1 {
			return fmt.Errorf("%d agent pods on %s", len(pods), node)
		}
		old = string(pods[0].UID)
		return c.cs.CoreV1().Pods(c.namespace).Delete(ctx, pods[0].Name, metav1.DeleteOptions{})
	})
	return old
}

// agentMetricsOnNode reads the metrics of node's agent from the node itself (agentGetOnNode).
func agentMetricsOnNode(t *testing.T, c *cluster, node string) map[string]float64 {
	t.Helper()
	var body string
	eventually(t, time.Minute, "metrics of the agent of "+node, func(ctx context.Context) error {
		var err error
		body, err = agentGetOnNode(ctx, c, node, "/metrics")
		return err
	})
	return parseMetrics(t, []byte(body))
}

// agentGetOnNode GETs path of node's agent from the node itself, at the pod's own address: an
// agent that holds no ISO is not Ready, so the Service does not lead to it.
func agentGetOnNode(ctx context.Context, c *cluster, node, path string) (string, error) {
	pods, err := agentPods(ctx, c, node)
	if err != nil {
		return "", err
	}
	if len(pods) != 1 || pods[0].Status.PodIP == "" {
		return "", fmt.Errorf("%d agent pods on %s, or no address yet", len(pods), node)
	}
	p := pods[0]
	var port int32
	for _, cp := range p.Spec.Containers[0].Ports {
		if cp.Name == "http" {
			port = cp.ContainerPort
		}
	}
	return nodeCmd(ctx, node, "curl", "-sf", "--max-time", "10", fmt.Sprintf("http://%s:%d%s", p.Status.PodIP, port, path))
}
