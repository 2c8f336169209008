// Package pack builds release ISOs in the layout of a Harvester release: harvester-release.yaml,
// bundle/metadata.yaml, zstd-compressed docker-save image archives, their image lists, the list of
// every image of the version and optional extra files such as a large rootfs.squashfs.
//
// A Spec describes the release: its version, its archives grouped like the bundle (common, rke2,
// agent, ...), the images of each archive with the sizes of their layers (synthetic random layers,
// shared between images when named in SharedLayers) or docker-save tarballs to include as they are.
// Every synthetic byte derives from Spec.Seed, so the same Spec always yields the same images, layer
// digests, archives contents and lists. BuildTree writes the layout into a directory; Build also runs
// xorriso to turn it into an ISO image.
package pack
