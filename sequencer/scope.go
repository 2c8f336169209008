package sequencer

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/policy"
)

// Which nodes a plan covers. A plan covers every node of the cluster, or those its
// nodeUpgradeOption.nodes lists (a node skipped by an earlier plan, upgraded alone once it is
// back). Of those, the nodes its nodeUpgradeOption.skipNodes lists are given up on: every phase
// goes on without them, and their rows say Skipped. A node is never skipped when skipping it
// could break the cluster or lose work:
//   - a control-plane node (its etcd member and API server are part of the cluster's quorum);
//   - a node already upgraded, or one whose step runs while the node is Ready (it finishes);
//   - a node whose kubelet would then be more than three minor versions older than the release's
//     control plane (Kubernetes' version-skew policy).
// The refusals are said on the node's row and in the plan's condition.

// maxKubeletSkew is how many minor versions older than the API server a kubelet may be.
const maxKubeletSkew = 3

// scoped is the outcome of scope: the nodes the plan works on and the ones it skips.
type scoped struct {
	// nodes are the nodes the plan works on.
	nodes []NodeInfo
	// skipped are the nodes given up on.
	skipped []NodeInfo
	// refused says, for each node listed in skipNodes that is not skipped, why.
	refused map[string]string
}

// scope splits the observed nodes by the plan's nodeUpgradeOption.
func scope(o Observation) scoped {
	opt := o.Plan.Spec.NodeUpgradeOption
	if opt == nil || (len(opt.Nodes) == 0 && len(opt.SkipNodes) == 0) {
		return scoped{nodes: o.Nodes}
	}
	out := scoped{refused: map[string]string{}}
	for _, n := range o.Nodes {
		if len(opt.Nodes) > 0 && !slices.Contains(opt.Nodes, n.Name) {
			continue
		}
		if !slices.Contains(opt.SkipNodes, n.Name) {
			out.nodes = append(out.nodes, n)
			continue
		}
		if why := skipRefusal(o, n); why != "" {
			out.refused[n.Name] = why
			out.nodes = append(out.nodes, n)
			continue
		}
		out.skipped = append(out.skipped, n)
	}
	return out
}

// skipRefusal says why node n may not be skipped, or returns "".
func skipRefusal(o Observation, n NodeInfo) string {
	st := o.Plan.Status.NodeUpgradeStatuses[n.Name]
	switch {
	case n.ControlPlane:
		return "a control-plane node is never skipped: its etcd member and API server are part of the cluster's quorum"
	case st.State == v1beta1.NodeUpgraded:
		return "already upgraded"
	case nodeRules[st.State].inFlight && n.Ready:
		return "its upgrade is in progress and the node is Ready: it finishes first"
	}
	if m := o.Plan.Status.ReleaseMetadata; m != nil && m.Kubernetes != "" && n.KubeletVersion != "" {
		target, terr := policy.ParseVersion(m.Kubernetes)
		kubelet, kerr := policy.ParseVersion(n.KubeletVersion)
		if terr == nil && kerr == nil && target.Major == kubelet.Major && target.Minor-kubelet.Minor > maxKubeletSkew {
			return fmt.Sprintf("its kubelet %s would be more than %d minor versions older than the control plane at %s",
				n.KubeletVersion, maxKubeletSkew, m.Kubernetes)
		}
	}
	return ""
}

// markSkipped gives the skipped nodes their rows. A node given up on in the middle of its
// upgrade (it died during its step) has its Job deleted, so that the step does not run when the
// node comes back, and is uncordoned: it stays at the version it had.
func (d *decider) markSkipped(s scoped) {
	for _, n := range s.skipped {
		prev := d.st.NodeUpgradeStatuses[n.Name]
		if prev.State == v1beta1.NodeSkipped {
			continue
		}
		if nodeRules[prev.State].inFlight || d.o.NodeJobs[n.Name].Exists {
			d.act(ActionDeleteNodeJob, n.Name)
			d.act(ActionUncordon, n.Name)
		}
		kubelet := n.KubeletVersion
		if kubelet == "" {
			kubelet = prev.KubeletVersion
		}
		d.event("NodeSkipped", "node %s skipped (nodeUpgradeOption.skipNodes): the plan goes on without it; it stays at kubelet %s", n.Name, kubelet)
		d.setNode(n.Name, func(st *v1beta1.NodeUpgradeStatus) {
			st.State, st.Reason = v1beta1.NodeSkipped, "Skipped"
			st.Message = "listed in nodeUpgradeOption.skipNodes: left at kubelet " + kubelet + "; upgrade it alone once it is back: upgrade-repo upgrade node " + n.Name
			if kubelet != "" {
				st.KubeletVersion = kubelet
			}
		})
	}
	for _, name := range sortedKeys(s.refused) {
		why := s.refused[name]
		if _, ok := d.st.NodeUpgradeStatuses[name]; !ok {
			continue
		}
		d.setNode(name, func(st *v1beta1.NodeUpgradeStatus) {
			if !strings.Contains(st.Message, "not skipped:") {
				st.Message = strings.TrimPrefix(st.Message+"; ", "; ") + "not skipped: " + why
			}
		})
	}
}

// lostNodes names the nodes that have not been Ready for longer than HeartbeatTimeout and are
// neither upgraded nor skipped, with how long and what the operator can do.
func (d *decider) lostNodes() []string {
	var out []string
	for _, name := range orderedNames(d.o.Nodes) {
		n := d.info(name)
		if n.Ready || n.NotReadySince.IsZero() || d.rule(name).done {
			continue
		}
		down := d.now.Sub(n.NotReadySince).Truncate(time.Second)
		if down < d.cfg.HeartbeatTimeout {
			continue
		}
		what := fmt.Sprintf("node %s not Ready since %s (%s)", name, n.NotReadySince.UTC().Format(time.RFC3339), down)
		switch {
		case n.ControlPlane:
			what += ": a control-plane node is never skipped; the plan waits for it"
		default:
			what += "; the other nodes go on; to finish the plan without it: upgrade-repo upgrade skip " + name
		}
		out = append(out, what)
	}
	return out
}

// passedOver reports whether node n is a worker, not upgraded yet, that has not been Ready for
// longer than HeartbeatTimeout: it holds neither the gate nor a slot. A worker away for less (a
// reboot, a blip) holds the next node, as any node that is not Ready does.
func (d *decider) passedOver(n NodeInfo) bool {
	return !n.Ready && !n.ControlPlane && !d.rule(n.Name).done && !n.NotReadySince.IsZero() &&
		d.now.Sub(n.NotReadySince) >= d.cfg.HeartbeatTimeout
}

// info returns the observed node named name.
func (d *decider) info(name string) NodeInfo {
	for _, n := range d.o.Nodes {
		if n.Name == name {
			return n
		}
	}
	return NodeInfo{Name: name}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
