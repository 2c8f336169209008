// Package fetch is how this project downloads a release ISO, with peers or without: the Fetcher
// fills a peer/cache Store from the peers that the gossip directory (peer/inventory) says hold
// chunks of it and from the origin URL, chunk by chunk, verified. The agent runs it in a gossip
// ring, "serve --iso-url" on a node of its own (a Directory and a peer.StaticMembers of one).
//
// The node that needs an ISO splits it into fixed-size chunks and fills the missing ones from
// peers in parallel (their peer/serve Handlers), falls back to the origin URL for chunks no peer
// has, and verifies the sha512 of the whole ISO before it is used.
//
// # Trust
//
// The sha512 of the whole ISO, given by the operator, is the only anchor of trust; peers are never
// believed. Every holder computes the digest of each chunk (chunks.Sum: BLAKE3) as it stores it and
// publishes the list at /v1/iso/{sha512}/chunks. When a chunk arrives from peer P, its digest is
// compared with the digests that the other holders (never P itself) advertise for that chunk, and
// the digest most of them agree on wins; bytes that disagree are thrown away, P is avoided for a
// while and the chunk is fetched from another source. The holders asked include the live members
// whose inventory the directory has not received yet, so a node that joined through one holder
// still has its chunks vouched for. A chunk that no other holder can vouch for is accepted but
// remembered as weakly verified, with its source. When the final sha512 fails, every weakly
// verified chunk is checked again against the holders known by then (the bad ones are dropped and
// fetched again from peers); only when that finds nothing are they fetched again from the origin
// and compared: the sources of the chunks that differ are avoided, the origin's bytes are kept, and
// the whole file is hashed again. A holder that lies consistently in its digests and its bytes can
// therefore cost a re-fetch, never a corrupt ISO.
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
// # The origin
//
// The origin is asked for its first byte to learn the size and whether it serves ranges (one that
// does not is read whole, in order; package httprange); a response that stops bringing bytes is
// abandoned after the idle timeout (package idle) and asked again from where it stopped; failures
// are retried with backoff (package backoff) and given
// up as WithRetry says; a refusal (ErrOriginRefused) ends the fetch unless peers hold what is
// missing. Where the bytes are kept, and how a restart resumes, is peer/cache's.
//
// The files of this package follow the download: fetcher.go (the Fetcher, what Fetch does before
// the first chunk), options.go, run.go (the loop of one Fetch), schedule.go (which chunk from which
// source, and when an owner is stalled), peers.go (chunks from peers and their vouching),
// origin.go (the origin client), get.go (one watched GET), readahead.go (the file read back for
// the sha512, one chunk ahead) and repair.go (what a failed sha512 leads to).
//
// Imports: peer, peer/inventory, peer/cache, chunks, checksum, httprange, backoff, idle, redact,
// and the standard library's HTTP;
// never peer/serve or peer/memberlist, nor iso, repo, preload, acquire, the sequencer, api or
// policy (boundary test): the fetcher is handed its membership and talks to peers over HTTP.
package fetch
