// Package inspect reads an ISO image for people and scripts, without mounting it: the description
// of a file as ls and stat show it (Entry, Describe, List), of the image as a whole (Info), a
// check that reads every file and that every extent lies inside the image (Verify), with the
// digest of the whole image besides (Check), and the extraction of a tree under a directory that
// nothing in the image can leave (Extract). The "upgrade-repo iso" commands are its front end:
// they open the image, and write what these return as JSON or, in the words of the Write
// functions and methods (WriteList, WriteStat, Info.Write, Report.Write, Extracted.Write), for
// people.
//
// Imports: iso and the standard library only.
package inspect
