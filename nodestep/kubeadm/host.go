package kubeadm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// NodeHost runs programs in the namespaces of the node's PID 1: from a pod with the node's / at
// Root and the node's PID namespace, it runs the node's own nsenter, chrooted into Root, which
// enters PID 1's mount, UTS, IPC, network and PID namespaces before it runs the program. The
// program thus sees the node's files, network (the API server's name resolves as on the node)
// and systemd. It needs a privileged container.
type NodeHost struct {
	// Root is where the node's / is seen (/host).
	Root string
}

var _ Host = NodeHost{}

// hostPATH is the PATH programs run with on the node.
const hostPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Run implements Host.
func (h NodeHost) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	nsenter := ""
	for _, p := range []string{"usr/bin/nsenter", "bin/nsenter", "usr/sbin/nsenter"} {
		if _, err := os.Stat(filepath.Join(h.Root, p)); err == nil {
			nsenter = "/" + p
			break
		}
	}
	if nsenter == "" {
		return nil, fmt.Errorf("run %s: the node has no nsenter (util-linux) in /usr/bin or /bin", name)
	}
	argv := append([]string{"--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid", "--", name}, args...)
	cmd := exec.CommandContext(ctx, nsenter, argv...)
	cmd.Path = nsenter // resolved inside the chroot, not on the pod's PATH
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: h.Root}
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=" + hostPATH, "HOME=/root"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, tail(out.String(), 20))
	}
	return out.Bytes(), nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// KubeCluster reads the node and kubeadm's configuration through client-go.
type KubeCluster struct {
	// Client is a client of the cluster (the pod's in-cluster configuration).
	Client kubernetes.Interface
}

var _ Cluster = KubeCluster{}

// Node implements Cluster.
func (c KubeCluster) Node(ctx context.Context, name string) (NodeInfo, error) {
	n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return NodeInfo{}, fmt.Errorf("get node %s: %w", name, err)
	}
	info := NodeInfo{KubeletVersion: n.Status.NodeInfo.KubeletVersion}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			info.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return info, nil
}

// ConfigMap and key where kubeadm records the cluster's configuration.
const (
	configNamespace = "kube-system"
	configName      = "kubeadm-config"
	configKey       = "ClusterConfiguration"
)

// ControlPlaneVersion implements Cluster.
func (c KubeCluster) ControlPlaneVersion(ctx context.Context) (string, error) {
	cm, err := c.Client.CoreV1().ConfigMaps(configNamespace).Get(ctx, configName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("get configmap %s/%s (is this a kubeadm cluster?): %w", configNamespace, configName, err)
	}
	var cfg struct {
		KubernetesVersion string `json:"kubernetesVersion"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data[configKey]), &cfg); err != nil {
		return "", fmt.Errorf("configmap %s/%s %s: %w", configNamespace, configName, configKey, err)
	}
	if cfg.KubernetesVersion == "" {
		return "", fmt.Errorf("configmap %s/%s %s names no kubernetesVersion", configNamespace, configName, configKey)
	}
	return cfg.KubernetesVersion, nil
}

// ControlPlanePods implements Cluster.
func (c KubeCluster) ControlPlanePods(ctx context.Context, node string) ([]PodReadiness, error) {
	pods, err := c.Client.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{
		LabelSelector: "tier=control-plane", FieldSelector: "spec.nodeName=" + node,
	})
	if err != nil {
		return nil, fmt.Errorf("list the control-plane pods of node %s: %w", node, err)
	}
	var out []PodReadiness
	for _, p := range pods.Items {
		if p.Spec.NodeName != node {
			continue
		}
		r := PodReadiness{Name: p.Name}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				r.Ready, r.Since = c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
			}
		}
		out = append(out, r)
	}
	return out, nil
}
