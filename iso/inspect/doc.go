// Package inspect reads an ISO image for people and scripts, without mounting it: the description
// of a file as ls and stat show it (Entry, Describe, List), a check that reads every file and that
// every extent lies inside the image (Verify), and the extraction of a tree under a directory that
// nothing in the image can leave (Extract). The "upgrade-repo iso" commands are its front end.
//
// Imports: iso and the standard library only.
package inspect
