// Package repo serves a release over HTTP from any fs.FS: the files of the release ISO (GET and
// HEAD, single and multiple ranges, If-Range, strong ETags, conditional requests, directory
// listings in JSON and HTML), the release metadata parsed (/v1/release, /v1/bundle, /v1/images),
// health, readiness and Prometheus metrics. Every path is also served under /harvester-iso/.
//
// repo knows fs.FS and HTTP, not where the files come from. When the file system also implements
// SpanFS (it knows where each file's bytes lie in one backing file) and WithBackingFile names that
// file, large files are sent with sendfile straight from the backing file: no byte of their content
// passes through user space. Small files are served from memory.
//
// Handler serves one release; Server adds /livez, /readyz and /metrics around the Handler that is
// current, so a process can listen before its release is verified and indexed. Served through
// Server.Listener, a Server answers the commonest request, a whole small file over HTTP/1.1, on
// the connection itself, with the bytes net/http would send, and leaves every other request to
// net/http.
//
// Imports: release, httprange and the standard library's HTTP; never iso, acquire, preload, peer, the
// sequencer, api, policy or chunks (internal/boundary): a range check is handed
// in as a function (WithRangeCheck).
package repo
