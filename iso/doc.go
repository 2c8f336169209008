// Package iso reads ISO 9660 images in user space, without mounting them.
//
// Open parses the volume descriptors and the directory records of an image read through an
// io.ReaderAt and returns an *FS: a read-only fs.FS over the image that also reports where each
// file's bytes lie inside the image (Extents, Span), so that a server can send them straight from
// the image file.
//
// It reads the primary tree, the Joliet tree and the Rock Ridge extensions (SUSP continuation
// areas, long names split over several NM entries, SL symbolic links, PX modes and owners, TF
// times, RE/CL/PL relocated directories), preferring Rock Ridge, then Joliet, then primary names.
// Multi-extent files (ISO level 3, over 4 GiB) and hybrid images (El Torito boot catalog,
// isohybrid MBR/GPT) are supported.
//
// Names are UTF-8: a Rock Ridge or primary name that is not valid UTF-8 is read as ISO 8859-1.
//
// Opening reads only the volume descriptors and the directories, so its cost grows with the number
// of entries, not with the size of the image. Every length, offset and recursion read from the
// image is bounded: a damaged or hostile image yields a *FormatError that says what is wrong and
// at which byte offset, never a panic, a hang or an allocation larger than the image justifies.
//
// Imports: the standard library only; nothing of this module but itself, so that it can serve
// any program (internal/boundary).
package iso
