// Package peer is what the nodes of a gossip ring share to move a release ISO between them,
// verified, never trusted: who is in the ring (Member, Membership), how a peer proves it belongs
// (Token), what a holder says of its chunks (ChunkList, the body of /v1/iso/{sha512}/chunks), the
// errors every part returns (ErrNotFound, ErrVerification) and the metrics (Metrics). An ISO is
// named by its sha512 in the lower-case hex of package checksum. The work is done in its child packages, one concern
// each:
//
//   - peer/inventory: who holds what. The gossip Directory of every member's ISOs, complete or
//     chunk by chunk, and its compact wire format (full states for push/pull, batched deltas).
//   - peer/cache: the ISOs on this node's disk. The Store of complete and partial ISOs, named by
//     their sha512, with the records beside them that let a download resume and a verified copy be
//     reused without hashing it; it publishes what it holds in the Directory.
//   - peer/fetch: the one download of an ISO, from peers and the origin URL, chunk by chunk,
//     resumable, each chunk vouched for by the other holders and the whole checked against its
//     sha512; the origin client (ranges, retries, refusals) is part of it.
//   - peer/serve: the chunk server. The HTTP Handler that sends a Store's chunks to peers, each
//     checked against its verified digest before it is sent.
//   - peer/memberlist: the gossip ring itself, the only importer of hashicorp/memberlist.
//
// The sha512 of the whole ISO, given by the operator, is the only anchor of trust; peers are
// never believed (see package peer/fetch).
//
// Imports: Prometheus and the standard library only; nothing else of this module, not even its
// child packages, which all import it (boundary test).
package peer
