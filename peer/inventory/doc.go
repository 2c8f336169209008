// Package inventory records who holds what in the gossip ring: a Directory of the release ISOs
// each member holds, by sha512, complete or which chunks are held while downloading (a Bitmap).
//
// The local node publishes its own inventory (SetISO, RemoveISO); the gossip layer carries it.
// Full inventories travel in the gossip layer's push/pull state (LocalState, MergeState), changes
// in small batched deltas that fit a UDP packet (TakeDeltas, ApplyDelta); a delta carries the whole
// current state of its items, so a newer one may replace an older one still queued
// (DeltaSubject). The wire format is this package's, versioned and checked on decoding (ErrWire);
// the gossip technology is an adapter's (peer/memberlist). A member that restarts is recognised by
// a new epoch and its old inventory dropped; one that leaves is set aside (Forget) and restored if
// it comes back.
//
// Imports: checksum (the ISO's digest) and chunks (the chunk count), and the standard library;
// never peer/cache, peer/fetch, peer/serve or peer/memberlist, nor hashicorp/memberlist (boundary
// test): the directory knows what members say they hold, not where the bytes are or how they move.
package inventory
