package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The origin: the release's download site, inside the cluster. hack/e2e.sh builds its image.
const (
	serveName     = "e2e-serve"
	originName    = "e2e-origin"
	originHostDir = "/var/lib/upgrade-repo-e2e/origin"
)

// originURL is the URL of the release ISO at the in-cluster origin.
func originURL(c *cluster) string {
	return fmt.Sprintf("http://%s.%s.svc.cluster.local/release.iso", originName, c.namespace)
}

// deployOrigin copies the release ISO into every node and serves it with a plain HTTP file
// server, behind a Service, as a release's download site would. The server may run on any node
// that is schedulable: a drain during an upgrade moves it to another node.
func deployOrigin(t *testing.T, c *cluster, rel *testRelease) {
	t.Helper()
	testImage := os.Getenv("E2E_TEST_IMAGE")
	if testImage == "" {
		t.Skip("E2E_TEST_IMAGE is not set: hack/e2e.sh builds the test image")
	}
	for _, n := range c.nodes {
		placeFile(t, n.Name, rel.iso, originHostDir+"/release.iso")
	}
	labels := map[string]string{"app.kubernetes.io/name": originName}
	recreate(t, c, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: originName, Namespace: c.namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					// Not the unschedulable taint of a cordoned node: a drain must be able to move it.
					Tolerations: []corev1.Toleration{{
						Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule,
					}},
					Containers: []corev1.Container{{
						Name:            "origin",
						Image:           testImage,
						ImagePullPolicy: corev1.PullNever,
						Args:            []string{"origin", "/srv", ":8080"},
						Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe:  httpProbe("/healthz", 8080),
						SecurityContext: restricted(65532),
						VolumeMounts:    []corev1.VolumeMount{{Name: "srv", MountPath: "/srv", ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{hostDir("srv", originHostDir)},
				},
			},
		},
	})
	recreate(t, c, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: originName, Namespace: c.namespace},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	})
	eventuallyDeploymentReady(t, c, originName, 3*time.Minute)
}

// TestServeAndPreload runs the release's way onto the nodes with the standalone subcommands:
// an in-cluster origin, `upgrade-repo serve --iso-url` on every node, then `upgrade-repo preload`
// on every node from the Service, into the node's containerd.
func TestServeAndPreload(t *testing.T) {
	c := env(t)
	rel := releaseISO(t)
	deployOrigin(t, c, rel)
	if !t.Run("serve from origin", func(t *testing.T) { serveFromOrigin(t, c, rel) }) {
		t.FailNow()
	}
	t.Run("preload from the Service", func(t *testing.T) { preloadFromService(t, c, rel) })
}

// serveFromOrigin: each node downloads the ISO into a hostPath cache, verifies its sha512, and
// then serves the release byte for byte, ranges and metadata included, through a NodePort Service
// that answers on each node from that node's server.
func serveFromOrigin(t *testing.T, c *cluster, rel *testRelease) {
	const name, cacheDir = serveName, "/var/lib/upgrade-repo-e2e/serve-cache"
	for _, n := range c.nodes { // every node downloads afresh, also on a reused cluster
		eventually(t, time.Minute, "empty the cache of "+n.Name, func(ctx context.Context) error {
			_, err := nodeCmd(ctx, n.Name, "rm", "-rf", cacheDir)
			return err
		})
	}
	labels := map[string]string{"app.kubernetes.io/name": name}
	recreate(t, c, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.namespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name:            "serve",
						Image:           c.image,
						ImagePullPolicy: corev1.PullNever,
						Args: []string{"serve", "--listen=:8080", "--iso-url=" + originURL(c),
							"--iso-checksum=" + rel.checksum, "--cache-dir=/cache"},
						Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe:  httpProbe("/readyz", 8080),
						SecurityContext: restricted(0),
						VolumeMounts:    []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}},
					}},
					Volumes: []corev1.Volume{hostDir("cache", cacheDir)},
				},
			},
		},
	})
	recreate(t, c, nodePortService(c, name, labels, 8080))
	waitDaemonSetReady(t, c, name, 5*time.Minute)
	port := nodePort(t, c, name)
	for _, n := range c.nodes {
		t.Run(n.Name, func(t *testing.T) {
			checkServes(t, fmt.Sprintf("http://%s:%d", internalIP(t, n), port), rel)
			requireLeanServe(t, n.Name)
		})
	}
}

// requireLeanServe checks, from the node, that the serve pod's process (the upgrade-repo process
// given the cache directory) runs the image's upgrade-repo-serve: the pod ran `upgrade-repo serve`, which
// replaced itself with the lean binary. It logs the process's peak RSS.
func requireLeanServe(t *testing.T, node string) {
	t.Helper()
	const script = `for p in /proc/[0-9]*; do
  exe=$(readlink "$p/exe" 2>/dev/null) || continue
  case $exe in */upgrade-repo*) ;; *) continue ;; esac
  if tr '\0' ' ' < "$p/cmdline" | grep -q -- '--cache-dir=/cache'; then
    echo "$exe $(grep VmHWM "$p/status" | tr -s ' \t' ' ')"
  fi
done`
	var out string
	eventually(t, time.Minute, "find the serve process on "+node, func(ctx context.Context) error {
		var err error
		if out, err = nodeCmd(ctx, node, "sh", "-c", script); err != nil {
			return err
		}
		if strings.TrimSpace(out) == "" {
			return errors.New("no process was given --cache-dir=/cache")
		}
		return nil
	})
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		require.True(t, strings.HasPrefix(line, "/usr/local/bin/upgrade-repo-serve "), "the serve pod runs %q, not the lean binary", line)
	}
	t.Logf("serve on %s: %s", node, strings.TrimSpace(out))
}

// preloadFromService runs `upgrade-repo preload --repo` on every node, through the Service of
// the serve DaemonSet, as root without any capability (what the agent's pod spec allows), and
// checks with the node's own ctr that containerd holds every image of the release.
func preloadFromService(t *testing.T, c *cluster, rel *testRelease) {
	refs := rel.refs()
	repoURL := fmt.Sprintf("http://%s.%s.svc.cluster.local", serveName, c.namespace)
	const sock = "/run/containerd/containerd.sock"
	for _, n := range c.nodes {
		t.Run(n.Name, func(t *testing.T) {
			t.Parallel()
			// A reused cluster may hold the images from a previous run: start without them.
			eventually(t, time.Minute, "remove the release's images from "+n.Name, func(ctx context.Context) error {
				out, err := nodeCmd(ctx, n.Name, append([]string{"ctr", "-n", "k8s.io", "images", "rm"}, refs...)...)
				if err != nil && !strings.Contains(out, "not found") {
					return err
				}
				return nil
			})
			out := runOnNode(t, c, n.Name, "preload", jobSpec{
				args: []string{"preload", "--repo=" + repoURL, "--containerd-sock=" + sock},
				uid:  0,
				// The same mounts as the chart's agent: the socket and a writable /tmp.
				volumes: []corev1.Volume{
					{Name: "sock", VolumeSource: corev1.VolumeSource{
						HostPath: &corev1.HostPathVolumeSource{Path: sock, Type: ptr.To(corev1.HostPathSocket)},
					}},
					{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				},
				mounts: []corev1.VolumeMount{{Name: "sock", MountPath: sock}, {Name: "tmp", MountPath: "/tmp"}},
			})
			t.Logf("preload on %s:\n%s", n.Name, out)
			requireImages(t, n.Name, refs)
		})
	}
}
