// Package preload imports a release's container images into the node's image store, local first.
//
// It reads the release's bundle index and image lists from an fs.FS (the ISO on this node, or the
// repo Service through HTTPSource), asks the Store which listed images are already present, and
// plans: an archive whose images are all present is skipped, any other archive is imported. An
// image the Store holds under a listed name is present only when it is the release's (see
// ImageDigest.Match and DigestReader): held as another image, its archive is imported and the
// name pointed to the release's image.
// Archives are streamed from the first Source that has them (the ISO, then peers, then the repo
// Service with resume by Range), decompressed with zstd on the fly and handed to the Store's
// import; the archive is never written whole to a temporary file. Archives import in parallel up
// to a limit. After the import every listed reference is checked again and the missing ones are reported.
//
// Progress (bytes read per archive and in total, images present of listed) is exported as
// Prometheus metrics with the prefix upgrade_repo_preload_ and as a Status value an agent can
// report. The only adapter that talks to containerd is the child package preload/containerd.
//
// Imports: release (the bundle's layout), backoff, httprange, idle, redact; never containerd (preload/containerd is its
// adapter), peer, repo, the sequencer or the commands.
package preload
