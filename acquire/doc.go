// Package acquire puts a release ISO into a local cache, verified: it downloads the ISO into a
// .partial file, resumes an interrupted download where it stopped, retries a dead origin with a
// bounded backoff, verifies the sha512 before the file is used, renames it into place atomically
// and reuses a verified copy on the next start without hashing it again (a small marker file
// records the size, modification time and checksum that were verified).
//
// Where the bytes come from is a Fetcher: HTTPFetcher, the origin URL, is the default; other
// sources (peers serving ranges in parallel) implement the same interface and reuse the Cache's
// resume, verification, rename and reuse logic unchanged.
//
// Imports: chunks (the digests it records), redact, peer (its checksum parser); never repo,
// preload, the sequencer or a technology adapter, and never the commands.
package acquire
