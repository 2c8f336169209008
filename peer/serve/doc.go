// Package serve is the chunk server of the ring: an HTTP Handler that sends the ISOs of a
// peer/cache Store to peers, by range, and lists the digests of the chunks it holds
// (peer.ChunkList, BLAKE3 by chunks.Sum) for them to vouch for what they receive from others.
//
// A partial download serves the chunks it holds, and 416 for the others; a complete ISO's chunks
// are checked against the digests it was verified with before they are sent, and a damaged one is
// refused with 503 (the peer turns to another holder). The bytes leave the file with sendfile,
// from the page cache to the socket, never through user space; peer.Metrics.FileBytes counts them
// by mode ("zerocopy", or "copied" when the file could not be opened again). Peers prove
// membership of the ring with a bearer token (peer.Token) when one is required (RequireToken).
//
// Imports: peer, peer/cache, httprange and the standard library's HTTP; never peer/fetch, peer/inventory or
// peer/memberlist (boundary test): the server sends what the cache holds, it does not decide who
// holds what or fetch anything.
package serve
