package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ISOState is where a node's copy of the ISO stands.
// +kubebuilder:validation:Enum=Pending;Downloading;Verifying;Ready;Failed
type ISOState string

// ISO states.
const (
	ISOPending     ISOState = "Pending"
	ISODownloading ISOState = "Downloading"
	ISOVerifying   ISOState = "Verifying"
	ISOReady       ISOState = "Ready"
	ISOFailed      ISOState = "Failed"
)

// PreloadState is where a node's image preload stands.
// +kubebuilder:validation:Enum=ImagePreloading;ImagePreloaded;ImagePreloadFailed
type PreloadState string

// Preload states.
const (
	PreloadRunning PreloadState = "ImagePreloading"
	PreloadDone    PreloadState = "ImagePreloaded"
	PreloadFailed  PreloadState = "ImagePreloadFailed"
)

// RepoNodeISO is a node's copy of the ISO.
type RepoNodeISO struct {
	// Checksum is the SHA-512 of the ISO the agent works on.
	// +optional
	Checksum string `json:"checksum,omitempty"`
	// State is where the copy stands.
	// +optional
	State ISOState `json:"state,omitempty"`
	// Message says what went wrong when State is Failed, or what is being retried while
	// it is Downloading.
	// +optional
	Message string `json:"message,omitempty"`
	// BytesDone is how many bytes of the ISO the node holds.
	// +optional
	BytesDone int64 `json:"bytesDone,omitempty"`
	// BytesTotal is the ISO's size.
	// +optional
	BytesTotal int64 `json:"bytesTotal,omitempty"`
	// BytesFromPeers is how many bytes came from other nodes.
	// +optional
	BytesFromPeers int64 `json:"bytesFromPeers,omitempty"`
	// BytesFromOrigin is how many bytes came from the Service or the origin URL.
	// +optional
	BytesFromOrigin int64 `json:"bytesFromOrigin,omitempty"`
}

// RepoNodeRepo is the node's repo server.
type RepoNodeRepo struct {
	// Ready is true while the node serves the ISO.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// URL is the node's repo base URL.
	// +optional
	URL string `json:"url,omitempty"`
}

// RepoNodePreload is the node's image preload.
type RepoNodePreload struct {
	// State is where the preload stands; empty before it starts.
	// +optional
	State PreloadState `json:"state,omitempty"`
	// Reason is a CamelCase word for a failure.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says what went wrong, for humans.
	// +optional
	Message string `json:"message,omitempty"`
	// ImagesDone is how many images are in containerd.
	// +optional
	ImagesDone int64 `json:"imagesDone,omitempty"`
	// ImagesTotal is how many images the release has.
	// +optional
	ImagesTotal int64 `json:"imagesTotal,omitempty"`
	// ImagesPinned is how many of the release's images carry the CRI plugin's pinned label
	// (io.cri-containerd.pinned), which keeps an image from the kubelet's image garbage
	// collection where containerd honours it (1.7.3 and later, 2.x; 1.6 ignores it). Counted
	// after the preload and at each check of the release's images while the node holds the ISO.
	// +optional
	ImagesPinned int64 `json:"imagesPinned,omitempty"`
	// BytesDone is how many archive bytes were read.
	// +optional
	BytesDone int64 `json:"bytesDone,omitempty"`
	// BytesTotal is how many archive bytes there are.
	// +optional
	BytesTotal int64 `json:"bytesTotal,omitempty"`
	// Ingest is how the agent writes the images' blobs into the node's containerd: Direct, into
	// its content directory (the chart mounts it at the path containerd reports), or
	// ContentService, streamed through containerd's API when that directory is out of reach.
	// +optional
	// +kubebuilder:validation:Enum=Direct;ContentService
	Ingest IngestPath `json:"ingest,omitempty"`
	// Unpack is how the agent unpacks the images into the node's snapshotter: OnePass, each layer
	// extracted while its blob is written (the chart mounts the snapshotter's directory), or
	// Containerd, by containerd after each archive is imported. Empty when it does not unpack.
	// +optional
	// +kubebuilder:validation:Enum=OnePass;Containerd
	Unpack UnpackPath `json:"unpack,omitempty"`
	// RestoredTotal is how many times, while the node held the ISO, an image of the release went
	// missing from the node's containerd (the kubelet's image garbage collection, a manual
	// removal) and was imported again.
	// +optional
	RestoredTotal int64 `json:"restoredTotal,omitempty"`
	// Restored are the latest of those, oldest first, at most ten.
	// +optional
	// +listType=atomic
	Restored []RepoNodeRestore `json:"restored,omitempty"`
}

// IngestPath is how an agent writes image blobs into its node's containerd.
type IngestPath string

// The ways an agent writes image blobs into its node's containerd.
const (
	// IngestDirect: the agent writes each blob into containerd's content directory itself,
	// hashed and synced, and commits it through the content service without sending its bytes.
	IngestDirect IngestPath = "Direct"
	// IngestContentService: every byte goes through containerd's content service.
	IngestContentService IngestPath = "ContentService"
)

// UnpackPath is how an agent unpacks the images it preloads into its node's snapshotter.
type UnpackPath string

// The ways an agent unpacks images.
const (
	// UnpackOnePass: the agent extracts each layer while it writes its blob, from the same
	// bytes, and commits the snapshots as containerd's unpacker does.
	UnpackOnePass UnpackPath = "OnePass"
	// UnpackContainerd: containerd unpacks the images once each archive is imported, reading
	// the layers back from its content store.
	UnpackContainerd UnpackPath = "Containerd"
)

// RepoNodeRestore is one image of the release that went missing from the node and was put back.
type RepoNodeRestore struct {
	// Image is the image's reference.
	Image string `json:"image"`
	// Source names where its archive was read from ("iso": the node's own copy).
	// +optional
	Source string `json:"source,omitempty"`
	// Time is when the image was present again.
	Time metav1.Time `json:"time"`
}

// RepoNodeCache is the node cache the agent keeps ISOs in.
type RepoNodeCache struct {
	// Path is the cache directory as the agent sees it.
	// +optional
	Path string `json:"path,omitempty"`
	// FreeBytes is the space left for the agent in the cache directory's file system.
	// +optional
	FreeBytes int64 `json:"freeBytes,omitempty"`
	// TotalBytes is the size of that file system.
	// +optional
	TotalBytes int64 `json:"totalBytes,omitempty"`
	// FilesystemID tells file systems apart (the device number statfs reports the directory
	// on): two directories with the same ID share their free space.
	// +optional
	FilesystemID string `json:"filesystemID,omitempty"`
}

// RepoNodeImageGC is the kubelet's image garbage collection on the node, as its configuration
// file sets it.
type RepoNodeImageGC struct {
	// HighThresholdPercent is the disk use, in percent of the image file system, past which the
	// kubelet removes images (imageGCHighThresholdPercent; 85 when unset).
	// +optional
	HighThresholdPercent int32 `json:"highThresholdPercent,omitempty"`
	// LowThresholdPercent is the use it removes images down to (imageGCLowThresholdPercent; 80
	// when unset).
	// +optional
	LowThresholdPercent int32 `json:"lowThresholdPercent,omitempty"`
	// Source is the file the thresholds were read from; empty when the kubelet's defaults are
	// assumed because it could not be read.
	// +optional
	Source string `json:"source,omitempty"`
	// Message says why the file could not be read; empty when it was.
	// +optional
	Message string `json:"message,omitempty"`
}

// RepoNodeStatus is a node agent's report. The agent of the node is its only writer.
type RepoNodeStatus struct {
	// ISO is the node's copy of the ISO.
	// +optional
	ISO RepoNodeISO `json:"iso,omitempty"`
	// Repo is the node's repo server.
	// +optional
	Repo RepoNodeRepo `json:"repo,omitempty"`
	// Preload is the node's image preload of the ISO named by ISO.Checksum.
	// +optional
	Preload RepoNodePreload `json:"preload,omitempty"`
	// Cache is the node cache's file system, for the pre-flight space check.
	// +optional
	Cache RepoNodeCache `json:"cache,omitempty"`
	// Containerd is the file system of containerd's root directory, where the release's image
	// content and unpacked snapshots land, for the pre-flight space check; nil when the agent
	// cannot see it.
	// +optional
	Containerd *RepoNodeCache `json:"containerd,omitempty"`
	// ImageGC is the kubelet's image garbage collection thresholds on the node, for the
	// pre-flight space check; nil until the agent read them.
	// +optional
	ImageGC *RepoNodeImageGC `json:"imageGC,omitempty"`
	// Forecast is what the node measured, before any download, of the release a plan being
	// judged targets; nil until it measured one.
	// +optional
	Forecast *RepoNodeForecast `json:"forecast,omitempty"`
	// Step is what the node's upgrade step last reported through the agent (POST /v1/step);
	// nil until a step reports.
	// +optional
	Step *RepoNodeStep `json:"step,omitempty"`
	// Cleanup is the last removal of earlier releases' images from the node's containerd, after
	// an upgrade Succeeded; nil until one ran.
	// +optional
	Cleanup *RepoNodeCleanup `json:"cleanup,omitempty"`
	// HeartbeatTime is when the agent last wrote the report.
	// +optional
	HeartbeatTime metav1.Time `json:"heartbeatTime,omitempty"`
}

// RepoNodeForecast is what a node's agent measured of a release before it is downloaded: the
// release's blob index, read from the ISO's URL through range requests, checked blob by blob
// against the node's containerd, and what the cleanup of the previous release would free.
type RepoNodeForecast struct {
	// ISOChecksum is the SHA-512 of the release's ISO (its Version's isoChecksum): the figures
	// are for that ISO only.
	ISOChecksum string `json:"isoChecksum"`
	// Release is the release the ISO holds.
	// +optional
	Release string `json:"release,omitempty"`
	// Blobs is how many distinct blobs of the release's images were checked; 0 when the ISO
	// records none (an ISO packed without its blob index) or the check failed (Message).
	// +optional
	Blobs int32 `json:"blobs,omitempty"`
	// MissingBlobs is how many of them the node's content store lacks.
	// +optional
	MissingBlobs int32 `json:"missingBlobs,omitempty"`
	// MissingStoredBytes is their size in the content store.
	// +optional
	MissingStoredBytes int64 `json:"missingStoredBytes,omitempty"`
	// MissingLayers is how many layer chains the node's snapshotter lacks.
	// +optional
	MissingLayers int32 `json:"missingLayers,omitempty"`
	// MissingUnpackedBytes is their top layers' uncompressed sizes: what unpacking them adds,
	// besides each snapshot's directories.
	// +optional
	MissingUnpackedBytes int64 `json:"missingUnpackedBytes,omitempty"`
	// CleanupMeasured is true when CleanupImages and CleanupBytes were measured.
	// +optional
	CleanupMeasured bool `json:"cleanupMeasured,omitempty"`
	// CleanupImages is how many images the cleanup after the upgrade would remove: those earlier
	// releases claim on the node that the release does not name.
	// +optional
	CleanupImages int32 `json:"cleanupImages,omitempty"`
	// CleanupBytes is the content only those images reference, less the blobs the release
	// brings (compressed sizes, as status.cleanup.bytesFreed counts them; unpacked snapshots are
	// not counted).
	// +optional
	CleanupBytes int64 `json:"cleanupBytes,omitempty"`
	// Message says what could not be measured; empty when everything was.
	// +optional
	Message string `json:"message,omitempty"`
	// Time is when the measure ended.
	Time metav1.Time `json:"time"`
}

// RepoNodeCleanup is the removal, from the node's containerd, of the images of the releases the
// node ran before (as its image list archive records them) that the running release does not
// list and nothing uses.
type RepoNodeCleanup struct {
	// Release is the release the node runs now.
	Release string `json:"release"`
	// Previous are the earlier releases whose images were considered.
	// +optional
	// +listType=atomic
	Previous []string `json:"previous,omitempty"`
	// DryRun is true when the agent only lists what would be removed.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
	// Candidates is how many images of the earlier releases the running release does not list.
	// +optional
	Candidates int64 `json:"candidates,omitempty"`
	// RemovedTotal is how many images were removed (in a dry run: would be).
	// +optional
	RemovedTotal int64 `json:"removedTotal,omitempty"`
	// Removed are those images, at most a hundred.
	// +optional
	// +listType=atomic
	Removed []string `json:"removed,omitempty"`
	// Kept are the candidates left in place because a container uses them or they are pinned,
	// at most a hundred.
	// +optional
	// +listType=atomic
	Kept []RepoNodeKeptImage `json:"kept,omitempty"`
	// BytesFreed is the content no remaining image references any more (in a dry run: would
	// not): the compressed size of the removed images' own blobs as containerd's content store
	// reports it; unpacked snapshots are not counted.
	// +optional
	BytesFreed int64 `json:"bytesFreed,omitempty"`
	// Message says why the cleanup stopped short; empty when it did not.
	// +optional
	Message string `json:"message,omitempty"`
	// Time is when the cleanup ended.
	Time metav1.Time `json:"time"`
}

// RepoNodeKeptImage is an image of an earlier release a cleanup left in place.
type RepoNodeKeptImage struct {
	// Image is the image's reference.
	Image string `json:"image"`
	// Reason is InUse (a container uses it) or Pinned (a release or an operator pinned it).
	Reason string `json:"reason"`
	// Containers are the containers that use it, for InUse.
	// +optional
	// +listType=atomic
	Containers []string `json:"containers,omitempty"`
}

// RepoNodeStep is the stage a node's upgrade step reported to its node's agent: the contract
// between any upgrade image and the sequencer. The sequencer shows Stage as the node's state in
// the plan while the node's step runs.
type RepoNodeStep struct {
	// Plan is the UpgradePlan the step runs for (the step's UPGRADE_PLAN).
	// +optional
	Plan string `json:"plan,omitempty"`
	// Stage is where the step stands.
	Stage StepStage `json:"stage"`
	// Message says what the step is doing, for humans.
	// +optional
	Message string `json:"message,omitempty"`
	// Time is when the step reported Stage.
	// +optional
	Time metav1.Time `json:"time,omitempty"`
}

// StepStage is a stage an upgrade step reports, in the names of the upgrade design's node states.
// +kubebuilder:validation:Enum=KubernetesUpgrading;KubernetesUpgraded;OSUpgrading;OSUpgraded
type StepStage string

// The stages a step may report, in the order they happen.
const (
	StageKubernetesUpgrading StepStage = "KubernetesUpgrading"
	StageKubernetesUpgraded  StepStage = "KubernetesUpgraded"
	StageOSUpgrading         StepStage = "OSUpgrading"
	StageOSUpgraded          StepStage = "OSUpgraded"
)

// RepoNode is one node agent's report, named after the node.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=rn
// +kubebuilder:printcolumn:name="ISO",type=string,JSONPath=`.status.iso.state`
// +kubebuilder:printcolumn:name="REPO",type=boolean,JSONPath=`.status.repo.ready`
// +kubebuilder:printcolumn:name="PRELOAD",type=string,JSONPath=`.status.preload.state`
// +kubebuilder:printcolumn:name="HEARTBEAT",type=date,JSONPath=`.status.heartbeatTime`
type RepoNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Status is the agent's report.
	// +optional
	Status RepoNodeStatus `json:"status,omitempty"`
}

// RepoNodeList is a list of RepoNodes.
//
// +kubebuilder:object:root=true
type RepoNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the RepoNodes.
	Items []RepoNode `json:"items"`
}
