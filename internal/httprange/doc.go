// Package httprange is the one reading and writing of HTTP byte ranges (RFC 9110, section 14):
// the Range header a client asks with and a server parses (one range, the only kind this product
// asks for or serves), the Content-Range a server answers with and a client checks, and Probe,
// which learns a remote file's size and whether its origin serves ranges from its first byte
// rather than from a HEAD request, which an origin that signs its URLs for one method (a presigned
// object-store URL) refuses.
//
// CheckURL is the one check of what such a file's URL may be (http or https, with a host), with
// the words an operator who typed something else reads.
//
// Every part that reads or writes these headers (the chunk server and the fetcher of package
// peer, the repo's checks, the preload's HTTP source, the sequencer's size preflight) uses this
// package; net/http's own ServeContent, which parses Range for the repo, is the one exception.
//
// Imports: backoff, idle, redact and the standard library only.
package httprange
