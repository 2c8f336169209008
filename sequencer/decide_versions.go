package sequencer

import (
	"fmt"
	"strings"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/policy"
)

// Which versions the plan checks (the gate before each node, the verification at NodeUpgraded):
// only when the release's metadata names a Kubernetes version, and, for each node, only when the
// node's kubelet, as the plan first saw it, is a version of the same distribution (its build
// suffix: +rke2rN, +k3sN, none for upstream kubeadm versions; policy.Version.Distribution). A
// release of another distribution than the cluster's says nothing of what its kubelets will
// report: the synthetic release of the e2e names v1.32.7+rke2r1 over kind's upstream nodes, and
// is not checked. The images of the control-plane pods are checked only for an upstream version,
// whose images (registry.k8s.io/kube-apiserver:v1.34.1) carry the version as their tag; RKE2's
// carry their own (v1.32.7-rke2r1-build20250716).

// releaseKubernetes returns the release's Kubernetes version when the metadata names one that
// parses.
func (d *decider) releaseKubernetes() (policy.Version, bool) {
	m := d.st.ReleaseMetadata
	if m == nil || strings.TrimSpace(m.Kubernetes) == "" {
		return policy.Version{}, false
	}
	v, err := policy.ParseVersion(m.Kubernetes)
	return v, err == nil
}

// versionsChecked reports whether the plan checks node n's versions against target: its kubelet
// as first seen (now, when the plan has not recorded one) is of target's distribution.
func (d *decider) versionsChecked(n NodeInfo, target policy.Version) bool {
	before := d.st.NodeUpgradeStatuses[n.Name].KubeletVersionBefore
	if before == "" {
		before = n.KubeletVersion
	}
	v, err := policy.ParseVersion(before)
	return err == nil && v.Distribution() == target.Distribution()
}

// sameVersion reports whether s is version want, pre-release and build included.
func sameVersion(s string, want policy.Version) bool {
	v, err := policy.ParseVersion(s)
	return err == nil && v.Compare(want) == 0 && v.Build == want.Build
}

// kubeletMismatch says how node n's kubelet differs from the release's Kubernetes version, or
// returns "" when it does not or is not checked.
func (d *decider) kubeletMismatch(n NodeInfo) string {
	target, ok := d.releaseKubernetes()
	if !ok || !d.versionsChecked(n, target) || sameVersion(n.KubeletVersion, target) {
		return ""
	}
	got := n.KubeletVersion
	if got == "" {
		got = "none"
	}
	return fmt.Sprintf("node %s: kubelet %s, want %s", n.Name, got, d.st.ReleaseMetadata.Kubernetes)
}

// clusterWaits lists what the cluster lacks before another node may be cordoned and drained:
// every node Ready, the control-plane pods of every control-plane node Ready, and every upgraded
// node still reporting the release's kubelet version (when checked). The nodes in flight are
// left out: they are the ones being upgraded, which the concurrency accounts for.
func (d *decider) clusterWaits(info map[string]NodeInfo) []string {
	var waits []string
	for _, name := range orderedNames(d.o.Nodes) {
		n, rule := info[name], d.rule(name)
		if rule.inFlight || d.passedOver(n) {
			// In flight: the concurrency accounts for it. A worker not upgraded yet that is
			// away for good is passed over (startNodes) and holds no one.
			continue
		}
		if !n.Ready {
			waits = append(waits, "node "+name+" to be Ready")
		}
		if pods := d.o.ControlPlaneNotReady[name]; n.ControlPlane && len(pods) > 0 {
			waits = append(waits, fmt.Sprintf("control-plane pods %s of node %s to be Ready", strings.Join(pods, ", "), name))
		}
		if rule.done {
			if m := d.kubeletMismatch(n); m != "" {
				waits = append(waits, "upgraded "+m)
			}
		}
	}
	return waits
}

// gate returns what the cluster lacks before the next node may start, once per round.
func (d *decider) gate(r *nodeRound) []string {
	if !r.gateKnown {
		r.gateWaits, r.gateKnown = d.clusterWaits(r.info), true
	}
	return r.gateWaits
}

// controlPlaneVersioned are the control-plane components whose image tag is the Kubernetes
// version in an upstream (kubeadm) cluster.
var controlPlaneVersioned = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// versionMismatches lists, once every node is upgraded, where the cluster differs from the
// release (see the rule at the top of this file): a node whose kubelet is not the release's
// Kubernetes version; in an upstream cluster, a control-plane node whose kube-apiserver,
// kube-controller-manager or kube-scheduler image is not tagged with it, or whose etcd image is
// not tagged with the release's etcd (when the release names one).
func (d *decider) versionMismatches() []string {
	target, ok := d.releaseKubernetes()
	if !ok {
		return nil
	}
	info := map[string]NodeInfo{}
	for _, n := range d.o.Nodes {
		info[n.Name] = n
	}
	var out []string
	for _, name := range orderedNames(d.o.Nodes) {
		n := info[name]
		if !d.versionsChecked(n, target) {
			continue
		}
		if m := d.kubeletMismatch(n); m != "" {
			out = append(out, m)
		}
		if !n.ControlPlane || target.Build != "" {
			continue
		}
		images := d.o.ControlPlaneImages[name]
		for _, c := range controlPlaneVersioned {
			if img, ok := images[c]; ok && !sameVersion(imageTag(img), target) {
				out = append(out, fmt.Sprintf("node %s: %s runs %s, want tag %s", name, c, img, d.st.ReleaseMetadata.Kubernetes))
			}
		}
		// kubeadm does not downgrade etcd: a rollback keeps the newer one (its status says so).
		if want := d.st.ReleaseMetadata.Etcd; want != "" && d.o.Plan.Spec.Rollback == nil {
			if img, ok := images["etcd"]; ok && imageTag(img) != want {
				out = append(out, fmt.Sprintf("node %s: etcd runs %s, want tag %s", name, img, want))
			}
		}
	}
	return out
}

// imageTag returns the tag of an image reference ("" when it has none): what follows the last
// colon after the last slash, without a digest.
func imageTag(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	name := ref[strings.LastIndex(ref, "/")+1:]
	if i := strings.LastIndex(name, ":"); i >= 0 {
		return name[i+1:]
	}
	return ""
}

// nodeUpgraded checks, before the plan goes on to CleaningUp and Succeeded, that the cluster
// runs the release's versions: a mismatch keeps the plan at NodeUpgraded, Degraded
// VersionMismatch with each node and what differs, until it clears.
func (d *decider) nodeUpgraded() {
	if bad := d.versionMismatches(); len(bad) > 0 {
		d.wait("VersionMismatch", strings.Join(bad, "; "), 0, true)
		return
	}
	d.enter(v1beta1.PhaseCleaningUp)
}
