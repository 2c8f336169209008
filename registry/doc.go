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
//   - Manifests and blobs by digest are served only when they belong to a listed image: the
//     Handler keeps the scope of digests reached from the listed images' manifests, and answers
//     404 for any other digest.
//   - Content comes from the node's image store (Content, implemented over containerd by
//     preload/containerd) and, for what the node lacks, from the other members of the gossip
//     ring, asked in turn with the ring's bearer token. Every byte a peer sends is checked
//     against its digest before any of it is passed on; a peer whose bytes do not match is
//     refused and the next one asked.
//   - A request that carries a bearer token is a peer's: it must carry the ring's token (401
//     without, 403 with another) and is answered from the node's own store only, so that a
//     request never travels on from peer to peer.
//
// Requests from the node's containerd carry no token: what they can read is the release's images
// only, which the release ISO ships to every node anyway.
//
// Imports: httprange, peer (the ring's vocabulary), prometheus and the standard library; the
// containerd side lives in preload/containerd.
package registry
