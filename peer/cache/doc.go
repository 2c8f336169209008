// Package cache keeps the release ISOs this node holds on its disk and publishes them in the
// gossip directory (peer/inventory): a Store of LocalISOs, complete or being filled chunk by chunk.
//
// The cache format: an ISO is named by its sha512 (<sha512>.iso); while it is downloaded, a
// .partial file of the ISO's size with the digest of every chunk held beside it (.partial.json),
// so that a restart resumes (OpenPartial); once verified, a record beside the ISO
// (<sha512>.iso.json) with the digests of all its chunks and the chunks.Stamp of the file, so
// that an unchanged copy is reused at the next start without hashing it (OpenCached), and a
// changed one keeps its intact chunks and fetches only the others (Salvage). A file given by the
// operator is published in place (AddComplete) and nothing is written beside it. The records
// name the hash of their digests (chunks.Algorithm); a partial download recorded with sha256
// digests, by an earlier version, is still resumed (its chunks are checked with sha256 once and
// recorded anew), a verified ISO recorded so is hashed again.
//
// The chunks of a complete ISO are checked against the digests it was verified with before they
// are served (Verifier, Check; package chunks): a copy changed on disk is withdrawn chunk by chunk
// from what the node serves and advertises, never sent.
//
// Imports: peer, peer/inventory, chunks, internal/pagecache and the standard library; never peer/fetch, peer/serve
// or peer/memberlist (boundary test): the cache stores and publishes, it neither downloads nor
// serves.
package cache
