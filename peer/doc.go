// Package peer decides who holds what and moves content between nodes, verified, never trusted.
//
// A Directory records, for every member of the gossip ring, the release ISOs it holds, by sha512:
// complete, or which chunks are held while downloading.
// Full inventories travel in the gossip layer's push/pull state, changes in small batched deltas;
// the wire format is this package's, the gossip technology is an adapter's (peer/memberlist).
//
// Content moves over plain HTTP (Handler serves, Fetcher fetches). The node that needs an ISO
// splits it into fixed-size chunks and fills the missing ones from peers in parallel, falls back to
// the origin URL for chunks no peer has, and verifies the sha512 of the whole ISO before it is
// used.
//
// # Trust
//
// The sha512 of the whole ISO, given by the operator, is the only anchor of trust; peers are never
// believed. Every holder computes the sha256 of each chunk as it stores it and publishes the list
// at /v1/iso/{sha512}/chunks. When a chunk arrives from peer P, its sha256 is compared with the
// digests that the other holders (never P itself) advertise for that chunk, and the digest most of
// them agree on wins; bytes that disagree are thrown away, P is avoided for a while and the chunk
// is fetched from another source. The holders asked include the live members whose inventory the
// directory has not received yet, so a node that joined through one holder still has its chunks
// vouched for. A chunk that no other holder can vouch for is accepted but remembered as weakly
// verified, with its source. When the final sha512 fails, every weakly verified chunk is checked
// again against the holders known by then (the bad ones are dropped and fetched again from
// peers); only when that finds nothing are they fetched again from the origin and compared: the
// sources of the chunks that differ are avoided, the origin's bytes are kept, and the whole file is
// hashed again. A holder that lies consistently in its digests and its bytes can therefore cost a
// re-fetch, never a corrupt ISO.
//
// A holder checks the chunks of its complete ISO against the digests it verified before it sends
// them (package chunks): a copy changed on disk is refused and withdrawn, never sent. Peers prove
// membership of the ring with a token derived from the gossip key (Token).
//
// # Sharing the origin
//
// Nodes that download the same ISO at the same time split the chunks among themselves by
// rendezvous hashing over the members that advertise the ISO: a node fetches from the origin only
// the chunks it owns, or chunks whose owner has left or stalled, and takes every other chunk from
// whichever peer holds it as soon as the directory says so. An owner is stalled only when the
// directory shows no progress of it for a while and the owner itself, asked for its chunk list,
// does not answer or lists no new chunk: the directory lags behind while many download at once.
// With N nodes starting together the origin sends about one copy of the ISO instead of N.
//
// # One download path
//
// The Fetcher is how this project downloads an ISO, with peers or without: the agent runs it in a
// gossip ring, "serve --iso-url" on a node of its own (a Directory and a StaticMembers of one).
// Its cache format: the ISO named by its sha512 (<sha512>.iso); while downloading, a .partial file
// of the ISO's size with the sha256 of every chunk held beside it (.partial.json), so a restart
// resumes; once verified, a record beside the ISO (<sha512>.iso.json) with the digests of all its
// chunks and the chunks.Stamp of the file, so an unchanged copy is reused at the next start
// without hashing it, and a changed one keeps its intact chunks and fetches only the others. The
// origin is asked for its first byte to learn the size and whether it serves ranges (one that
// does not is read whole, in order); failures are retried with backoff and given up as
// WithRetry says; a refusal (ErrOriginRefused) ends the fetch unless peers hold what is missing.
//
// Imports: chunks, redact, Prometheus and the standard library's HTTP; never iso, repo, preload, acquire,
// the sequencer, api or policy (boundary test), and never hashicorp/memberlist, which only
// peer/memberlist talks to.
package peer
