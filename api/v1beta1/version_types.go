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

// Condition types of a Version. Each condition's lastTransitionTime says when it last changed:
// when the ISO was downloaded, verified, installed.
const (
	// VersionURLReachable is True when the ISO's URL answered a one-byte range request with its
	// size (reason RangesSupported), or with the whole file (reason RangesUnsupported: downloads
	// can be neither split between nodes nor resumed); False with the reason when it did not
	// answer. The sequencer checks it when the Version is created or its spec changes.
	VersionURLReachable = "URLReachable"
	// VersionDownloaded is True once a plan had the ISO on every node.
	VersionDownloaded = "Downloaded"
	// VersionVerified is True once every node verified its copy against isoChecksum.
	VersionVerified = "Verified"
	// VersionInstalled is True while the Version is the one the cluster runs: set by the plan
	// that installed it, False (reason Superseded) once another one is installed.
	VersionInstalled = "Installed"
)

// VersionStatus is the sequencer's record of a Version.
type VersionStatus struct {
	// Conditions are URLReachable, Downloaded, Verified and Installed.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ISOSize is the ISO's size in bytes as its origin announced it; 0 when unknown.
	// +optional
	ISOSize int64 `json:"isoSize,omitempty"`
	// Images are the images the release's image lists name (fully qualified, sorted), as the
	// sequencer read them from the verified ISO at MetadataPopulating. The agents' release image
	// registries serve them on every node, one that joined after the upgrade included.
	// +optional
	// +listType=atomic
	Images []string `json:"images,omitempty"`
	// ImageDigests are what the verified ISO's archives say the images of Images are, hashed
	// from the archives' bytes by an agent that holds the ISO. The agents' registries serve a
	// release tag only as an image with these digests, whichever node or peer holds it.
	// +optional
	// +listType=atomic
	ImageDigests []ImageDigest `json:"imageDigests,omitempty"`
	// InstalledBy names the UpgradePlan that installed the Version.
	// +optional
	InstalledBy string `json:"installedBy,omitempty"`
	// ObservedGeneration is the generation of the spec URLReachable was checked against.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Rollback is set on the installed Version while the plan that installed it soaks: a
	// rollback to the previous release is possible until then. Unset once the soak ended.
	// +optional
	Rollback *VersionRollback `json:"rollback,omitempty"`
}

// VersionRollback says to which release, and until when, the cluster may be rolled back.
type VersionRollback struct {
	// To is the previous release, kept for the rollback.
	To string `json:"to"`
	// Until is the end of the soak: the last moment a rollback may start.
	Until metav1.Time `json:"until"`
	// Plan is the UpgradePlan whose soak keeps it.
	Plan string `json:"plan"`
}

// ImageDigest is what a release's own archive says one of its images is.
type ImageDigest struct {
	// Ref is the image's reference, fully qualified.
	// +kubebuilder:validation:MinLength=1
	Ref string `json:"ref"`
	// Config is the digest of the image's config (sha256:<hex>).
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	// +optional
	Config string `json:"config,omitempty"`
	// Manifest is the digest of the image's manifest or index, where the archive is an OCI
	// image layout that names it (an archive in docker save's older layout has none: each
	// node's import writes its own).
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	// +optional
	Manifest string `json:"manifest,omitempty"`
}

// Version is a release that can be installed. Its name is the release's version (v1.5.2).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=hv
// +kubebuilder:printcolumn:name="ISO",type=string,JSONPath=`.spec.isoURL`
// +kubebuilder:printcolumn:name="RELEASED",type=string,JSONPath=`.spec.releaseDate`
// +kubebuilder:printcolumn:name="REACHABLE",type=string,JSONPath=`.status.conditions[?(@.type=="URLReachable")].status`
// +kubebuilder:printcolumn:name="INSTALLED",type=string,JSONPath=`.status.conditions[?(@.type=="Installed")].status`
// +kubebuilder:printcolumn:name="ROLLBACK-UNTIL",type=string,JSONPath=`.status.rollback.until`,priority=1
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type Version struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec describes the release ISO.
	Spec VersionSpec `json:"spec"`
	// Status is the sequencer's record of the Version.
	// +optional
	Status VersionStatus `json:"status,omitempty"`
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
