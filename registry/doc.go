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
//     A listed tag is pinned by what the verified release's own archive says the image is (see
//     Pin; the agent hashes it from its verified ISO, and the sequencer records it on the
//     Version for nodes that lack the ISO). A tag pinned to a manifest (ref@sha256:..., an OCI
//     layout's) is served only as that digest, from the node's store or, by digest, from a peer.
//     A tag pinned to a config (ref config=sha256:..., docker save's older layout, whose manifest
//     each node's import writes) is served only as a manifest that names that config: the one
//     the node's store holds under the tag, else one a peer holds under it, its bytes hashed
//     here; the config's diff_ids, checked by containerd as it unpacks, bind its layers. What
//     the node's containerd or a peer holds under the tag does not count otherwise. A listed
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
