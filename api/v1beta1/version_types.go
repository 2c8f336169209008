package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VersionSpec describes a release ISO: where to get it and how to verify it.
type VersionSpec struct {
	// ISOURL is where the release ISO can be downloaded from (http or https).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	ISOURL string `json:"isoURL"`
	// ISOChecksum is the SHA-512 of the ISO as 128 hex digits, optionally prefixed with
	// "sha512:" (any case). Agents verify every copy against it before they serve it, so it is
	// required. The pattern is package checksum's, the one every part of the product reads.
	// +kubebuilder:validation:Pattern=`^\s*([sS][hH][aA]512:)?[0-9a-fA-F]{128}\s*$`
	ISOChecksum string `json:"isoChecksum"`
	// ReleaseDate is the date the release was published, as its authors wrote it.
	// +optional
	ReleaseDate string `json:"releaseDate,omitempty"`
	// Tags are free-form labels of the release (for example "latest", "stable", "dev").
	// +optional
	Tags []string `json:"tags,omitempty"`
}

// Version is a release that can be installed. Its name is the release's version (v1.5.2).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=hv
// +kubebuilder:printcolumn:name="ISO",type=string,JSONPath=`.spec.isoURL`
// +kubebuilder:printcolumn:name="RELEASED",type=string,JSONPath=`.spec.releaseDate`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type Version struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec describes the release ISO.
	Spec VersionSpec `json:"spec"`
}

// VersionList is a list of Versions.
//
// +kubebuilder:object:root=true
type VersionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the Versions.
	Items []Version `json:"items"`
}
