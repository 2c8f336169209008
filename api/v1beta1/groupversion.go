package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of every kind in this package.
var GroupVersion = schema.GroupVersion{Group: "management.harvesterhci.io", Version: "v1beta1"}

// AddToScheme registers the kinds of this package, and their lists, in s.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Version{}, &VersionList{},
		&UpgradePlan{}, &UpgradePlanList{},
		&RepoNode{}, &RepoNodeList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
