package chunks

import (
	"os"
	"syscall"
)

// Stamp is what tells, without reading a file, that it changed since it was verified: its size,
// its modification time, its change time (which a write moves even when the modification time is
// put back) and its device and inode (another file put in its place). It is kept on disk beside a
// verified file, so that an unchanged file is not hashed again at the next start; what the file
// system cannot tell (bit rot) is still caught chunk by chunk by a Verifier.
type Stamp struct {
	Size       int64  `json:"size"`
	ModTime    int64  `json:"modTimeUnixNano"`
	ChangeTime int64  `json:"changeTimeUnixNano,omitempty"`
	Device     uint64 `json:"device,omitempty"`
	Inode      uint64 `json:"inode,omitempty"`
}

// StampOf returns the Stamp of the file described by fi.
func StampOf(fi os.FileInfo) Stamp {
	s := Stamp{Size: fi.Size(), ModTime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ChangeTime, s.Device, s.Inode = st.Ctim.Nano(), uint64(st.Dev), st.Ino //nolint:unconvert // Dev is not uint64 everywhere.
	}
	return s
}
