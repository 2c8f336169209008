// Package pack builds release ISOs in the layout of a Harvester release, as the product's build
// scripts make it: harvester-release.yaml with every key real ones carry, bundle/metadata.yaml,
// zstd-compressed docker-save image archives and their image lists (rancherd's beside their
// archives), images-lists-archive/current/ with every image of the version plus one folder per
// earlier version, boot files under boot/x86_64/loader/ and EFI/ with El Torito entries, volume
// id COS_LIVE, and optional extra files such as a large rootfs.squashfs.
//
// A Spec describes the release: its version, its archives grouped like the bundle (common, rke2,
// agent, ...), the images of each archive with the sizes of their layers (synthetic random layers,
// shared between images when named in SharedLayers) or docker-save tarballs to include as they are.
// Every synthetic byte derives from Spec.Seed, so the same Spec always yields the same images, layer
// digests, archives contents and lists. BuildTree writes the layout into a directory; Build also runs
// xorriso to turn it into an ISO image; BuildTo does either or both, as `upgrade-repo release pack`
// asks, and Result.Write says what it wrote.
//
// Imports: release, go-containerregistry (image archives) and zstd; never repo, peer, preload
// or the commands.
package pack
