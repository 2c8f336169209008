package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// recreate deletes obj if it exists, waits until it is gone, then creates it afresh, retrying
// while the API server is unsteady. A test's objects thus never inherit a previous run's state.
func recreate(t *testing.T, c *cluster, obj client.Object) {
	t.Helper()
	what := fmt.Sprintf("%T %s", obj, obj.GetName())
	eventually(t, 2*time.Minute, "recreate "+what, func(ctx context.Context) error {
		old := obj.DeepCopyObject().(client.Object)
		err := c.cl.Get(ctx, client.ObjectKeyFromObject(obj), old)
		switch {
		case apierrors.IsNotFound(err):
			fresh := obj.DeepCopyObject().(client.Object)
			return c.cl.Create(ctx, fresh)
		case err != nil:
			return err
		}
		if err := c.cl.Delete(ctx, old, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return errors.New(what + " is still being deleted")
	})
}

// placeFile copies a host file into a kind node (a docker container named after the node).
func placeFile(t *testing.T, node, src, dst string) {
	t.Helper()
	eventually(t, 2*time.Minute, "copy "+src+" into "+node, func(ctx context.Context) error {
		if out, err := exec.CommandContext(ctx, "docker", "exec", node, "mkdir", "-p", path.Dir(dst)).CombinedOutput(); err != nil {
			return fmt.Errorf("docker exec %s mkdir: %w: %s", node, err, out)
		}
		if out, err := exec.CommandContext(ctx, "docker", "cp", src, node+":"+dst).CombinedOutput(); err != nil {
			return fmt.Errorf("docker cp to %s: %w: %s", node, err, out)
		}
		return nil
	})
}

// nodeCmd runs a command inside a kind node and returns its output.
func nodeCmd(ctx context.Context, node string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", append([]string{"exec", node}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker exec %s %v: %w: %s", node, args, err, out)
	}
	return string(out), nil
}

// waitDaemonSetReady waits until the DaemonSet has a ready, up-to-date pod on every node.
func waitDaemonSetReady(t *testing.T, c *cluster, name string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "daemonset "+name+" ready on every node", func(ctx context.Context) error {
		ds, err := c.cs.AppsV1().DaemonSets(c.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := ds.Status
		if st.ObservedGeneration < ds.Generation || int(st.DesiredNumberScheduled) != len(c.nodes) ||
			st.NumberReady != st.DesiredNumberScheduled || st.UpdatedNumberScheduled != st.DesiredNumberScheduled {
			return fmt.Errorf("daemonset %s: %d desired, %d ready, %d updated, %d nodes", name,
				st.DesiredNumberScheduled, st.NumberReady, st.UpdatedNumberScheduled, len(c.nodes))
		}
		return nil
	})
}

// nodePortService is a NodePort Service with the Local policy: each node's port answers from the
// selected pod on that node, so the host reaches every node's server through the Service.
func nodePortService(c *cluster, name string, selector map[string]string, target int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.namespace},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeNodePort,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Selector:              selector,
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(target)}},
		},
	}
}

// nodePort returns the node port of a Service's first port, once allocated.
func nodePort(t *testing.T, c *cluster, name string) int32 {
	t.Helper()
	var port int32
	eventually(t, time.Minute, "node port of "+name, func(ctx context.Context) error {
		svc, err := c.cs.CoreV1().Services(c.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(svc.Spec.Ports) == 0 || svc.Spec.Ports[0].NodePort == 0 {
			return errors.New("no node port yet")
		}
		port = svc.Spec.Ports[0].NodePort
		return nil
	})
	return port
}

// restricted is the container security context of the tests' own pods.
func restricted(uid int64) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsUser:                ptr.To(uid),
		RunAsNonRoot:             ptr.To(uid != 0),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// httpProbe is a readiness probe on path at port.
func httpProbe(p string, port int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: p, Port: intstr.FromInt32(port)}},
		PeriodSeconds: 2, FailureThreshold: 3, TimeoutSeconds: 5,
	}
}

// hostDir is a hostPath volume of a directory, created when missing.
func hostDir(name, p string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: p, Type: ptr.To(corev1.HostPathDirectoryOrCreate)},
	}}
}

// eventuallyDeploymentReady waits until every replica of the Deployment in the test namespace
// is ready and current.
func eventuallyDeploymentReady(t *testing.T, c *cluster, name string, timeout time.Duration) {
	t.Helper()
	eventuallyDeploymentReadyIn(t, c, c.namespace, name, timeout)
}

// eventuallyDeploymentReadyIn waits until every replica of the Deployment namespace/name is ready
// and current.
func eventuallyDeploymentReadyIn(t *testing.T, c *cluster, namespace, name string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "deployment "+namespace+"/"+name+" ready", func(ctx context.Context) error {
		d, err := c.cs.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		if d.Status.ObservedGeneration < d.Generation || d.Status.ReadyReplicas != want || d.Status.UpdatedReplicas != want {
			return fmt.Errorf("deployment %s: %d/%d ready, %d updated", name, d.Status.ReadyReplicas, want, d.Status.UpdatedReplicas)
		}
		return nil
	})
}
