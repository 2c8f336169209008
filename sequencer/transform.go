package sequencer

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
)

// CacheTransform trims an object before the sequencer's informer cache keeps it (the cache's
// DefaultTransform): every object loses its managedFields, which nothing here reads and which
// are often the larger part of a small object. Nodes and pods, the kinds a cluster has by the
// thousand, lose besides what the sequencer never reads of them:
//   - a Node keeps its labels, spec and, of its status, its conditions, addresses and nodeInfo
//     (NodeInfos, IsControlPlane, internalIP, suc.Upgraded); its annotations and the rest of its
//     status (the images it holds, which can run to tens of kilobytes, volumes, capacity) go;
//   - a pod keeps its metadata, node name and status (drains, Job pods, control-plane pods), and
//     of its containers only their names and images (controlPlanePods); its volumes,
//     tolerations, affinity and the rest of its containers go;
//   - a Job, one per node of a plan and kept until the plan is cleaned up, keeps its metadata,
//     status and spec but for its pod template (jobState reads its labels and status only).
//
// The trimmed kinds are only read and patched, never updated whole from the cache (a Node is
// cordoned by a merge patch of spec.unschedulable; Jobs are created and deleted, never
// updated), so what is dropped is never written back.
// Other kinds keep all but their managedFields: they are updated from what the cache holds.
// CacheTransform changes obj in place, as a transform may, and returns it.
func CacheTransform(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *corev1.Node:
		o.Annotations = nil
		o.Status = corev1.NodeStatus{Conditions: o.Status.Conditions, Addresses: o.Status.Addresses, NodeInfo: o.Status.NodeInfo}
	case *corev1.Pod:
		o.Spec.Volumes, o.Spec.Tolerations, o.Spec.Affinity = nil, nil, nil
		o.Spec.InitContainers, o.Spec.EphemeralContainers = nil, nil
		containers := make([]corev1.Container, len(o.Spec.Containers))
		for i, c := range o.Spec.Containers {
			containers[i] = corev1.Container{Name: c.Name, Image: c.Image}
		}
		o.Spec.Containers = containers
	case *batchv1.Job:
		o.Spec.Template = corev1.PodTemplateSpec{}
	}
	return obj, nil
}
