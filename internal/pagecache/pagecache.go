// Package pagecache drops a file's pages from the kernel's page cache once they are written and
// no longer needed, and tells how many are cached.
//
// A process that writes a file much larger than it reads back (a release ISO fetched chunk by
// chunk, a blob imported into containerd) leaves every page it wrote in the page cache until
// memory runs short. In a pod whose memory limit counts that cache, the kernel then reclaims it
// inside the write path; on a virtual machine whose memory the host backs page by page, each new
// page costs a fault in the host, several times the copy into it. Dropping the pages behind the
// writes lets the next writes reuse their memory. Dropping is advice: pages still dirty, being
// written back or mapped stay, and no byte is lost.
//
// Imports: the standard library only.
package pagecache

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Drop advises the kernel to drop the pages of bytes [off, off+n) of f (n = 0: to the end) that
// are clean; it does not wait for the disk.
func Drop(f *os.File, off, n int64) {
	_ = unix.Fadvise(int(f.Fd()), off, n, unix.FADV_DONTNEED)
}

// DropWritten waits for the write-back of bytes [off, off+n) of f to end (starting it for what is
// still dirty) and drops their pages. An error of the write-back is not reported here: the fsync
// that makes the file durable reports it.
func DropWritten(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
	Drop(f, off, n)
}

// Resident returns, for each page of f's first size bytes, whether it is in the page cache.
func Resident(f *os.File, size int64) ([]bool, error) {
	if size == 0 {
		return nil, nil
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	defer unix.Munmap(m) //nolint:errcheck // nothing to do about it
	page := int64(os.Getpagesize())
	vec := make([]byte, (size+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return nil, fmt.Errorf("mincore: %w", errno)
	}
	out := make([]bool, len(vec))
	for i, v := range vec {
		out[i] = v&1 != 0
	}
	return out, nil
}

// Droppable reports whether the file system holding dir drops clean pages when advised to: tmpfs
// and ramfs keep them (their pages are the files).
func Droppable(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type != unix.TMPFS_MAGIC && st.Type != unix.RAMFS_MAGIC
}

// Aligned reports whether b can be read or written with direct I/O (O_DIRECT): its address and
// length multiples of the page size.
func Aligned(b []byte) bool {
	page := uintptr(os.Getpagesize())
	return len(b) > 0 && uintptr(unsafe.Pointer(&b[0]))%page == 0 && uintptr(len(b))%page == 0
}
