// Package isorelease reads what a release ISO holds without extracting or downloading it: its
// harvester-release.yaml, its bundle index, the image list of every archive and the archives'
// sizes. A local ISO is read in place; an ISO URL is read through HTTP Range requests
// (httprange.Reader), a few hundred KB of a file of several GB, so that a release can be judged
// before anything is fetched.
//
// Imports: iso, release, httprange, redact and the standard library; never the daemons.
package isorelease
