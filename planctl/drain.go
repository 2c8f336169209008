package planctl

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/forecast"
	"github.com/upgrade-repo/upgrade-repo/planview"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// NodeDrain is what upgrading one node would evict.
type NodeDrain struct {
	// Node is the node's name.
	Node string
	// ControlPlane is true for a control-plane node (sequencer.IsControlPlane).
	ControlPlane bool
	// Pods are the pods its drain would evict, as namespace/name, sorted.
	Pods []string
}

// DrainPreview lists the nodes plan p works on (every node when p is nil) in the order the
// sequencer upgrades them (sequencer.PlanNodes, sequencer.NodeOrder), each with the pods its drain would evict now. Like the sequencer's drain it leaves mirror pods,
// DaemonSet pods and finished pods, and in the sequencer's namespace the pods keep matches (the
// sequencer's own replicas; the chart passes it the same selector as --keep-pods). Every node is
// cordoned and drained in turn by the Job executor, the default; a node with no pod to evict is
// only cordoned.
func DrainPreview(ctx context.Context, c client.Reader, p *v1beta1.UpgradePlan, namespace string, keep labels.Selector) ([]NodeDrain, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	byNode := map[string][]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == "" || !sequencer.Drainable(p) || (p.Namespace == namespace && keep.Matches(labels.Set(p.Labels))) {
			continue
		}
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p.Namespace+"/"+p.Name)
	}
	cp, others := sequencer.NodeOrder(sequencer.PlanNodes(p, sequencer.NodeInfos(nodes.Items)))
	out := make([]NodeDrain, 0, len(nodes.Items))
	for i, name := range append(cp, others...) {
		ps := byNode[name]
		slices.Sort(ps)
		out = append(out, NodeDrain{Node: name, ControlPlane: i < len(cp), Pods: ps})
	}
	return out, nil
}

// SequencerPods selects the sequencer's own replicas among the pods of its namespace, as the
// chart passes it to the sequencer's --keep-pods: a drain leaves them.
const SequencerPods = "app.kubernetes.io/component=sequencer"

// WriteDrains writes what a dry run adds to the judgement: each node plan p works on in upgrade
// order, with the pods its drain would evict now (DrainPreview), then what each node needs of
// disk and images for v (DiskPreview).
func WriteDrains(ctx context.Context, w io.Writer, c client.Reader, namespace string, v *v1beta1.Version, p *v1beta1.UpgradePlan) error {
	keep, err := labels.Parse(SequencerPods)
	if err != nil {
		return fmt.Errorf("sequencer pods selector: %w", err)
	}
	drains, err := DrainPreview(ctx, c, p, namespace, keep)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "\nDrains, in upgrade order (each node cordoned, drained, stepped and uncordoned in turn;")
	fmt.Fprintln(w, "mirror pods, DaemonSet pods and finished pods stay):")
	for _, d := range drains {
		role := ""
		if d.ControlPlane {
			role = " (control plane)"
		}
		if len(d.Pods) == 0 {
			fmt.Fprintf(w, "  %s%s: nothing to evict\n", d.Node, role)
			continue
		}
		fmt.Fprintf(w, "  %s%s: %d pods to evict: %s\n", d.Node, role, len(d.Pods), strings.Join(d.Pods, ", "))
	}
	nodes := make([]string, 0, len(drains))
	for _, d := range drains {
		nodes = append(nodes, d.Node)
	}
	needs, err := DiskPreview(ctx, c, v, nodes)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "\nDisk and images per node (the ISO into the agent's cache, then the release's images into containerd;")
	fmt.Fprintln(w, "what the node's agent already reports for this ISO is left out):")
	tw := planview.NewTable(w)
	fmt.Fprintln(tw, "  NODE\tISO TO DOWNLOAD\tCACHE FREE\tFITS\tIMAGES TO PRELOAD\tARCHIVE BYTES")
	for _, n := range needs {
		images := "unknown until the ISO is read"
		if n.ImagesTotal != Unknown {
			images = fmt.Sprintf("%d of %d", n.ImagesLeft, n.ImagesTotal)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", n.Node, sizeOrUnknown(n.ISOBytes), sizeOrUnknown(n.FreeBytes), n.Fits, images, sizeOrUnknown(n.PreloadBytes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, "\nDry run: nothing was created.")
	return err
}

// sizeOrUnknown prints a byte count for humans, "unknown" for Unknown.
func sizeOrUnknown(n int64) string {
	if n == Unknown {
		return "unknown"
	}
	return forecast.Bytes(n)
}
