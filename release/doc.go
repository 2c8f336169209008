// Package release knows the layout and metadata of a release ISO: harvester-release.yaml (the
// component versions of the release), bundle/metadata.yaml (the index of image archives by group)
// and the image lists, one image reference a line.
//
// It reads them from any fs.FS, so the same code works on an opened ISO, on an extracted tree and
// on a test's fstest.MapFS. It knows nothing of HTTP, containerd or the ISO format.
//
// Imports: a YAML decoder and the standard library; never iso, repo, HTTP clients or containerd.
package release
