package preload

import (
	"fmt"
	"time"
)

// State is the preload's phase as the agent reports it.
type State string

// The states of a preload, named as the upgrade's ImagePreloading phase reports them.
const (
	StatePreloading State = "ImagePreloading"
	StatePreloaded  State = "ImagePreloaded"
	StateFailed     State = "ImagePreloadFailed"
)

// Reasons of a failed or finished preload.
const (
	ReasonPlanned        = "Planned"
	ReasonImporting      = "Importing"
	ReasonAllPresent     = "AllImagesPresent"
	ReasonImportFailed   = "ArchiveImportFailed"
	ReasonImagesMissing  = "ImagesMissing"
	ReasonMetadataFailed = "MetadataUnreadable"
)

// Status is a snapshot of a preload's progress, what an agent reports for its node.
type Status struct {
	State   State  `json:"state"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// ImagesPresent of ImagesTotal listed images are present in the store.
	ImagesPresent int `json:"imagesPresent"`
	ImagesTotal   int `json:"imagesTotal"`
	// BytesRead of BytesTotal compressed archive bytes were read by the imports of this run.
	BytesRead  int64 `json:"bytesRead"`
	BytesTotal int64 `json:"bytesTotal"`
	// Archives is the progress of each archive, in bundle order.
	Archives []ArchiveStatus `json:"archives"`
}

// Summary says, for people, where a preload that took took ended.
func (s Status) Summary(took time.Duration) string {
	return fmt.Sprintf("%s: %d of %d images present, %d bytes read in %.1fs",
		s.State, s.ImagesPresent, s.ImagesTotal, s.BytesRead, took.Seconds())
}

// ArchiveStatus is the progress of one archive.
type ArchiveStatus struct {
	Name   string `json:"name"`
	Group  string `json:"group"`
	Action Action `json:"action"`
	// Phase is one of pending, importing, imported, skipped, failed.
	Phase  string `json:"phase"`
	Reason string `json:"reason,omitempty"`
	// Source names where the archive was read from.
	Source        string   `json:"source,omitempty"`
	BytesRead     int64    `json:"bytesRead"`
	BytesTotal    int64    `json:"bytesTotal"`
	ImagesPresent int      `json:"imagesPresent"`
	ImagesTotal   int      `json:"imagesTotal"`
	Missing       []string `json:"missing,omitempty"`
	Error         string   `json:"error,omitempty"`
}

// The phases of an archive.
const (
	PhasePending   = "pending"
	PhaseImporting = "importing"
	PhaseImported  = "imported"
	PhaseSkipped   = "skipped"
	PhaseFailed    = "failed"
)

func (s Status) clone() Status {
	s.Archives = append([]ArchiveStatus(nil), s.Archives...)
	for i := range s.Archives {
		s.Archives[i].Missing = append([]string(nil), s.Archives[i].Missing...)
	}
	return s
}
