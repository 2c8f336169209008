package cache

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/upgrade-repo/upgrade-repo/chunks"
)

// sidecar is the record kept beside an ISO file. Beside a partial download (<path>.partial.json)
// it holds the digests of the chunks held, so that a restart resumes. Beside a verified ISO
// (<path>.json) it holds the digests of every chunk and the Stamp of the file as it was verified,
// so that an unchanged file is not hashed again at the next start, and a changed one is named
// chunk by chunk and keeps its intact chunks.
type sidecar struct {
	SHA512    string `json:"sha512"`
	Size      int64  `json:"size"`
	ChunkSize int64  `json:"chunkSize"`
	// Digest names the hash of Digests: chunks.Algorithm; absent in the records of earlier
	// versions, whose digests are sha256 (legacySHA256).
	Digest  string   `json:"digest,omitempty"`
	Digests []string `json:"digests"`
	// Verified is the Stamp of the file whose sha512 was verified: absent beside a partial
	// download, and removed once a chunk of the file is found damaged.
	Verified *chunks.Stamp `json:"verified,omitempty"`
}

// readSidecar reads the record at p; false when there is none or it cannot be read.
func readSidecar(p string) (sidecar, bool) {
	var sc sidecar
	b, err := os.ReadFile(p)
	if err != nil || json.Unmarshal(b, &sc) != nil {
		return sidecar{}, false
	}
	return sc, true
}

// current reports whether the record's digests are of chunks.Algorithm.
func (sc sidecar) current() bool { return sc.Digest == chunks.Algorithm }

// legacySHA256 reports whether the record was written by an earlier version, whose chunk digests
// are sha256: a partial download is still resumed from it (OpenPartial checks its chunks with
// sha256); a verified ISO is hashed again.
func (sc sidecar) legacySHA256() bool { return sc.Digest == "" }

// writeSidecar replaces the record at p, atomically.
func writeSidecar(p string, sc sidecar) error {
	b, err := json.Marshal(sc)
	if err != nil {
		return fmt.Errorf("encode download state: %w", err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("save download state: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("save download state: %w", err)
	}
	return nil
}
