package kubeadm

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/version"
)

// DecideRollback is Decide for the rollback of a patch release: the target is older than the
// node within the same minor version. The first control-plane node (kubeadm-config newer than the
// target) runs `kubeadm upgrade apply --force` to the target; every other node `kubeadm upgrade
// node` once the control plane is back, and gets the previous release's kubelet. The sequencer
// takes the nodes that are not control planes first, so that no kubelet is newer than the API
// server while the control plane is still at the newer version: a worker is allowed before it.
// kubeadm keeps etcd at the newer version; the plan says so. Anything but a patch downgrade
// (across a minor version, or newer than the node) is refused, force or not.
func DecideRollback(f Facts) (Action, []string, error) {
	target, cp, kubelet, err := f.versions()
	if err != nil {
		return 0, nil, err
	}
	sameMinor := func(v *version.Version) bool { return v.Major() == target.Major() && v.Minor() == target.Minor() }
	for what, v := range map[string]*version.Version{"the control plane": cp, "the node's kubelet": kubelet} {
		if !sameMinor(v) || v.LessThan(target) {
			return 0, nil, fmt.Errorf("%w: a rollback goes back one patch release within a minor version; %s is at %s, the target %s",
				ErrRefused, what, v, f.Target)
		}
	}
	apiAt := target // a node that is not a control plane
	if f.IsControlPlane && f.APIServer != "" {
		if v, err := version.ParseGeneric(f.APIServer); err == nil {
			apiAt = v
		}
	}
	if kubelet.EqualTo(target) && (!f.IsControlPlane || cp.EqualTo(target) && apiAt.EqualTo(target)) {
		return Done, nil, nil
	}
	if f.IsControlPlane && cp.GreaterThan(target) {
		return Apply, []string{fmt.Sprintf("rollback: kubeadm upgrade apply --force %s over the control plane at %s; etcd stays at its newer version", f.Target, f.ControlPlane)}, nil
	}
	return UpgradeNode, nil, nil
}
