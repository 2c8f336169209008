package policy

import (
	"fmt"
	"slices"
	"strings"
)

// Names of the Kubernetes version-skew checks, as they appear in Result.Checks.
const (
	CheckKubernetesNoDowngrade = "KubernetesNoDowngrade"
	CheckKubernetesMinorStep   = "KubernetesMinorStep"
	CheckKubeletSkew           = "KubeletVersionSkew"
)

// Distribution names the Kubernetes distribution a version belongs to: its build metadata
// without the trailing release number ("rke2r" for v1.32.7+rke2r1, "k3s" for v1.33.1+k3s1), or
// "" for an upstream (kubeadm) version. Versions of two distributions do not compare: RKE2's
// v1.32.7+rke2r1 says nothing of an upstream v1.34.0 control plane.
func (v Version) Distribution() string { return strings.TrimRight(v.Build, "0123456789") }

// kubernetesChecks judges the release's Kubernetes version against the cluster's, the rules of
// kubeadm upgrade: not older than the control plane, at most one minor version ahead of it, and
// no kubelet newer than the control plane or than the target. Each is skippable.
func kubernetesChecks(in Input) []Check {
	noDown := Check{Name: CheckKubernetesNoDowngrade,
		Description: "the release's Kubernetes version is not older than the control plane's"}
	minor := Check{Name: CheckKubernetesMinorStep,
		Description: "the release's Kubernetes version is at most one minor version ahead of the control plane's"}
	kubelet := Check{Name: CheckKubeletSkew,
		Description: "no kubelet is newer than the control plane or the release's Kubernetes version"}

	current, cerr := ParseVersion(in.KubernetesCurrent)
	target, terr := ParseVersion(in.KubernetesTarget)
	currentKnown := strings.TrimSpace(in.KubernetesCurrent) != ""
	targetKnown := strings.TrimSpace(in.KubernetesTarget) != ""

	var skip string
	switch {
	case !targetKnown && in.ReleaseUnknown:
		skip = "not checked yet: the release metadata is not known"
	case !targetKnown:
		skip = "not checked: the release names no Kubernetes version"
	case terr != nil:
	case !currentKnown:
		skip = "not checked: the control plane's Kubernetes version is not known"
	case cerr != nil:
	case current.Distribution() != target.Distribution():
		skip = fmt.Sprintf("not checked: the release's %s and the control plane's %s are versions of different distributions", target, current)
	}
	switch {
	case skip != "":
		noDown = result(noDown, true, skip, "")
		minor = result(minor, true, skip, "")
	case terr != nil:
		noDown = result(noDown, false, "", "the release's Kubernetes version: "+terr.Error())
		minor = result(minor, false, "", "the release's Kubernetes version: "+terr.Error())
	case cerr != nil:
		noDown = result(noDown, false, "", "the control plane's Kubernetes version: "+cerr.Error())
		minor = result(minor, false, "", "the control plane's Kubernetes version: "+cerr.Error())
	case in.Rollback:
		noDown = rollbackStep(noDown, current, target, true)
		minor = result(minor, true, "a rollback", "")
	default:
		noDown = result(noDown, target.Compare(current) >= 0,
			fmt.Sprintf("%s to %s is not a downgrade", current, target),
			fmt.Sprintf("the release's Kubernetes %s is older than the control plane's %s", target, current))
		switch {
		case target.Compare(current) < 0:
			minor = result(minor, true, "not an upgrade", "")
		case target.Major != current.Major:
			minor = result(minor, false, "", fmt.Sprintf("%s to %s changes the major version", current, target))
		default:
			minor = result(minor, target.Minor-current.Minor <= 1,
				fmt.Sprintf("%s to %s is at most one minor step", current, target),
				fmt.Sprintf("%s to %s skips %d minor versions; upgrade one minor version at a time", current, target, target.Minor-current.Minor-1))
		}
	}
	// A rollback replaces kubelets that are newer than its target: only the control plane
	// bounds them.
	kubelet = kubeletSkew(kubelet, in.Kubelets, current, currentKnown && cerr == nil, target, targetKnown && terr == nil && !in.Rollback)
	return []Check{force(noDown, in.Force), force(minor, in.Force), force(kubelet, in.Force)}
}

// kubeletSkew judges every kubelet against the control plane (current) and the target, each when
// known and of the kubelet's distribution.
func kubeletSkew(c Check, kubelets map[string]string, current Version, currentOK bool, target Version, targetOK bool) Check {
	names := make([]string, 0, len(kubelets))
	for n := range kubelets {
		names = append(names, n)
	}
	slices.Sort(names)
	var newer []string
	judged, nodes := 0, 0
	for _, n := range names {
		before := judged
		if strings.TrimSpace(kubelets[n]) == "" {
			continue
		}
		k, err := ParseVersion(kubelets[n])
		if err != nil {
			newer = append(newer, fmt.Sprintf("node %s: kubelet %s", n, err))
			continue
		}
		if currentOK && k.Distribution() == current.Distribution() {
			judged++
			if k.Compare(current) > 0 {
				newer = append(newer, fmt.Sprintf("node %s: kubelet %s is newer than the control plane's %s", n, k, current))
				continue
			}
		}
		if targetOK && k.Distribution() == target.Distribution() {
			judged++
			if k.Compare(target) > 0 {
				newer = append(newer, fmt.Sprintf("node %s: kubelet %s is newer than the release's %s", n, k, target))
			}
		}
		if judged > before {
			nodes++
		}
	}
	switch {
	case len(newer) > 0:
		return result(c, false, "", strings.Join(newer, "; "))
	case judged == 0:
		return result(c, true, "not checked: no kubelet version to compare with a known Kubernetes version of its distribution", "")
	}
	return result(c, true, fmt.Sprintf("the kubelets of %d nodes are not newer than the control plane or the release", nodes), "")
}
