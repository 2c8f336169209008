// Package registry is the read-only OCI distribution API (/v2/) each agent serves for the images
// of the releases its node holds or is upgrading to, so that the node's containerd can use its own
// agent as a mirror of the registries those images name and pull a release image with no
// registry in reach.
//
// What it serves and from where:
//
//   - GET /v2/ answers 200: the API is there and asks for no login.
//   - Manifests by tag resolve only through the Catalog, the release's own image lists: a tag that
//     no list names is 404 (MANIFEST_UNKNOWN), whatever the node's containerd or a peer holds.
//     A listed tag that a list pins to a digest (ref@sha256:..., the digest the verified release
//     holds it at) is served only as that digest, from the node's store or, by digest, from a
//     peer; what the node's containerd or a peer holds under the tag does not count. A listed
//     tag with no pin is served from the node's own store only: a peer never says what a tag is.
//   - Manifests and blobs by digest are served only when they belong to a listed image: the
//     Handler keeps the scope of digests pinned by or reached from the listed images'
//     manifests, and answers 404 for any other digest. The scope walks the store once per
//     change of the catalog (and at most once a minute for a digest it has not seen missing);
//     other misses are answered from it and a bounded negative cache, and concurrent walks are
//     one.
//   - Content comes from the node's image store (Content, implemented over containerd by
//     preload/containerd) and, for what the node lacks, from the other members of the gossip
//     ring, asked in turn by digest with the ring's bearer token. A peer's answer is bounded by
//     the size the manifest gives (no byte past it is kept) and by how long the peer may stay
//     silent (package idle), and every byte is checked against its digest before any of it is
//     passed on; a peer that fails any of it is refused and the next one asked. Concurrent
//     requests for one blob share one fetch.
//   - A request that carries a bearer token is a peer's: it must carry the ring's token (401
//     without, 403 with another) and is answered from the node's own store only, so that a
//     request never travels on from peer to peer.
//
// Requests from the node's containerd carry no token: what they can read is the release's images
// only, which the release ISO ships to every node anyway.
//
// Imports: httprange, idle, peer (the ring's vocabulary), release, prometheus and the standard
// library; the containerd side lives in preload/containerd.
package registry
