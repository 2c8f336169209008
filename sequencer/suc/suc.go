// Package suc is the node-upgrade executor for clusters that run rancher's
// system-upgrade-controller (RKE2, Harvester): instead of upgrading nodes itself, the sequencer
// creates two upgrade.cattle.io/v1 Plans, one for the control-plane nodes (one at a time, cordoned
// and drained) and one for the other nodes that waits for it through a prepare step, and follows
// them through the labels system-upgrade-controller puts on each node it has upgraded.
//
// Plans are built as unstructured objects: the controller's Go types are not a dependency.
//
// Imports: k8s.io/api and apimachinery; never system-upgrade-controller's module.
package suc

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// PlanGVK is the kind of system-upgrade-controller's Plans.
var PlanGVK = schema.GroupVersionKind{Group: "upgrade.cattle.io", Version: "v1", Kind: "Plan"}

// PlanListGVK is the kind of a list of Plans.
var PlanListGVK = schema.GroupVersionKind{Group: "upgrade.cattle.io", Version: "v1", Kind: "PlanList"}

// PlanLabel is the label, on the Plans, naming the UpgradePlan they belong to.
const PlanLabel = "management.harvesterhci.io/upgrade-plan"

// ControlPlaneLabel selects control-plane nodes.
const ControlPlaneLabel = "node-role.kubernetes.io/control-plane"

// nodeLabelPrefix prefixes the label system-upgrade-controller sets on a node, to the Plan's
// latest hash, once the Plan has been applied to the node.
const nodeLabelPrefix = "plan.upgrade.cattle.io/"

// Options describe the Plans to build.
type Options struct {
	// UpgradePlan is the name of the UpgradePlan the Plans belong to.
	UpgradePlan string
	// Namespace is system-upgrade-controller's namespace (cattle-system on RKE2 and Harvester).
	Namespace string
	// Image is the upgrade image; a tag in it is used as the Plans' version.
	Image string
	// Version is the version being installed; the Plans' version when Image has no tag.
	Version string
	// RepoURL is the repo Service's base URL, given to the upgrade containers.
	RepoURL string
	// Concurrency is how many non-control-plane nodes are upgraded at once; 0 means one.
	Concurrency int
	// ServiceAccount runs the upgrade pods; system-upgrade when empty.
	ServiceAccount string
}

// ServerPlanName and AgentPlanName name the two Plans of an UpgradePlan.
func ServerPlanName(upgradePlan string) string { return upgradePlan + "-server" }

// AgentPlanName names the Plan of the non-control-plane nodes.
func AgentPlanName(upgradePlan string) string { return upgradePlan + "-agent" }

// Plans builds the server Plan (control-plane nodes, one at a time, cordoned and drained) and the
// agent Plan (the other nodes, with the given concurrency, prepared by waiting for the server Plan).
func Plans(o Options) ([]*unstructured.Unstructured, error) {
	if o.UpgradePlan == "" || o.Namespace == "" || o.Image == "" {
		return nil, fmt.Errorf("build system-upgrade-controller plans: the upgrade plan, namespace and image are required")
	}
	image, version := splitTag(o.Image)
	if version == "" {
		version = o.Version
	}
	if version == "" {
		return nil, fmt.Errorf("build system-upgrade-controller plans: image %s has no tag and no version is given", o.Image)
	}
	sa := o.ServiceAccount
	if sa == "" {
		sa = "system-upgrade"
	}
	conc := int64(o.Concurrency)
	if conc <= 0 {
		conc = 1
	}
	env := []any{
		map[string]any{"name": "UPGRADE_REPO_URL", "value": o.RepoURL},
		map[string]any{"name": "UPGRADE_VERSION", "value": o.Version},
		map[string]any{"name": "UPGRADE_STEP", "value": "node"},
	}
	drain := map[string]any{"force": true, "ignoreDaemonSets": true, "deleteEmptydirData": true}
	tolerations := []any{map[string]any{"operator": "Exists"}}
	// spec is what both Plans' specs hold: the nodes with (op Exists) or without (DoesNotExist)
	// the control-plane label, concurrency at a time, cordoned and drained.
	spec := func(concurrency int64, op string) map[string]any {
		return map[string]any{
			"concurrency":        concurrency,
			"version":            version,
			"serviceAccountName": sa,
			"cordon":             true,
			"drain":              drain,
			"tolerations":        tolerations,
			"nodeSelector": map[string]any{"matchExpressions": []any{
				map[string]any{"key": ControlPlaneLabel, "operator": op},
			}},
			"upgrade": map[string]any{"image": image, "envs": env},
		}
	}
	server := newPlan(ServerPlanName(o.UpgradePlan), o, spec(1, "Exists"))
	agentSpec := spec(conc, "DoesNotExist")
	// system-upgrade-controller's prepare container waits for the server Plan to finish.
	agentSpec["prepare"] = map[string]any{"image": image, "args": []any{"prepare", ServerPlanName(o.UpgradePlan)}}
	agent := newPlan(AgentPlanName(o.UpgradePlan), o, agentSpec)
	return []*unstructured.Unstructured{server, agent}, nil
}

func newPlan(name string, o Options, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(PlanGVK)
	u.SetName(name)
	u.SetNamespace(o.Namespace)
	u.SetLabels(map[string]string{PlanLabel: o.UpgradePlan})
	return u
}

// splitTag splits an image reference into repository and tag; a digest reference keeps its
// digest in the repository part and has no tag.
func splitTag(ref string) (string, string) {
	if strings.Contains(ref, "@") {
		return ref, ""
	}
	slash := strings.LastIndexByte(ref, '/')
	colon := strings.LastIndexByte(ref, ':')
	if colon > slash {
		return ref[:colon], ref[colon+1:]
	}
	return ref, ""
}

// Upgraded names the nodes whose Plan system-upgrade-controller has applied: the node carries the
// Plan's label set to the Plan's status.latestHash. Control-plane nodes follow the server Plan,
// the others the agent Plan.
func Upgraded(upgradePlan string, plans []unstructured.Unstructured, nodes []corev1.Node) []string {
	hash := map[string]string{}
	for i := range plans {
		h, _, _ := unstructured.NestedString(plans[i].Object, "status", "latestHash")
		hash[plans[i].GetName()] = h
	}
	var out []string
	for i := range nodes {
		n := &nodes[i]
		plan := AgentPlanName(upgradePlan)
		if _, ok := n.Labels[ControlPlaneLabel]; ok {
			plan = ServerPlanName(upgradePlan)
		}
		if h := hash[plan]; h != "" && n.Labels[nodeLabelPrefix+plan] == h {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}
