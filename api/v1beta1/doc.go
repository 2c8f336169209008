// Package v1beta1 holds the API of upgrade-repo, group management.harvesterhci.io, version
// v1beta1: Version (a release ISO that can be installed), UpgradePlan (a request to upgrade the
// cluster to a Version, and the sequencer's record of its progress) and RepoNode (each node
// agent's report of its ISO, repo and image preload).
//
// The package holds types, kubebuilder markers and the few readings of them that every client
// shares (Phase.Finished, Phase.Name, UpgradePlan.NodeExecutor). Deepcopy functions, CRD
// manifests and RBAC are generated from it by controller-gen (make generate).
//
// Imports: the standard library and k8s.io/apimachinery only (internal/boundary).
//
// +kubebuilder:object:generate=true
// +groupName=management.harvesterhci.io
package v1beta1
