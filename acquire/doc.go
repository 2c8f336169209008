// Package acquire puts the release ISO that "upgrade-repo serve" is given on local disk,
// verified. A local file is used in place, checked against its sha512 when one is given. An ISO
// URL is fetched into a cache directory by fetch.Fetcher (package peer/fetch), the same chunked,
// resumable, verified download that every agent runs, here on a node of its own, without peers:
// one cache format (package peer/cache: the ISO named by its sha512, a partial download beside it
// with the digests of its chunks, and once verified a record that lets the next start reuse it
// without hashing it again), one retry policy, one checksum parser (package checksum).
//
// Every byte of a verified copy is checked against the digests of its chunks before it is
// served (see package chunks); a chunk found damaged is refused, and the next start hashes the
// copy again and fetches what changed.
//
// Imports: checksum, chunks, iso (only to check a local path is an ISO file), peer,
// peer/inventory, peer/cache, peer/fetch, redact; never repo, preload, the
// sequencer or a technology adapter, and never the commands.
package acquire
