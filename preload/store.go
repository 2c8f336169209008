package preload

import (
	"context"
	"errors"
	"io"
)

// ErrTransient marks an error worth retrying after a pause: the image store or a source was
// briefly unavailable. Adapters wrap such errors with it; everything else fails at once.
var ErrTransient = errors.New("transient error")

// Presence answers which images an image store holds.
type Presence interface {
	// Missing returns the references of refs that are not present with complete content, in the
	// order of refs. References are fully qualified (docker.io/library/x:tag). It is safe for
	// concurrent use and does not modify the store.
	Missing(ctx context.Context, refs []string) ([]string, error)
}

// Store is the node's image store as preload needs it.
type Store interface {
	Presence
	// Import reads one uncompressed image archive (docker save output, in the classic layout or
	// the OCI layout) from r until its end and stores every image it holds, for all platforms.
	// It returns the names of the images it created or updated. Images are created only after
	// the whole stream was read without error, so a truncated or corrupt archive creates none,
	// and no content written for a failed import stays referenced. It reads r from one goroutine
	// and is safe for concurrent use with other calls.
	Import(ctx context.Context, r io.Reader) ([]string, error)
}
