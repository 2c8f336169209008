package iso

import (
	"errors"
	"fmt"
)

// Sentinel errors. A *FormatError wraps one of them, so callers can test with errors.Is.
var (
	// ErrNotISO means the image has no ISO 9660 volume descriptor at sector 16.
	ErrNotISO = errors.New("iso: not an ISO 9660 image")
	// ErrCorrupt means a structure of the image is damaged or inconsistent.
	ErrCorrupt = errors.New("iso: corrupt image")
	// ErrTruncated means the image is shorter than its structures say it is.
	ErrTruncated = errors.New("iso: truncated image")
	// ErrUnsupported means the image uses a feature this reader does not implement
	// (a logical block size other than 2048, interleaved files).
	ErrUnsupported = errors.New("iso: unsupported image")
	// ErrLimit means the image exceeds a limit set by an Option (entries, depth).
	ErrLimit = errors.New("iso: limit exceeded")
	// ErrNoTree is returned by Open when WithTree asks for a tree the image does not carry.
	ErrNoTree = errors.New("iso: no such tree")
	// ErrNotRegular is returned (inside an *fs.PathError) by Extents for anything but a regular
	// file.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooManyLinks is returned (inside an *fs.PathError) when resolving a path follows more
	// symbolic links than the limit, which also catches symbolic link loops.
	ErrTooManyLinks = errors.New("too many levels of symbolic links")
)

// FormatError describes what is wrong with an image and where.
type FormatError struct {
	// Offset is the byte offset inside the image of the structure at fault.
	Offset int64
	// Msg says what is wrong, in lower case.
	Msg string
	// Err is the class of the error: ErrNotISO, ErrCorrupt, ErrTruncated, ErrUnsupported or
	// ErrLimit.
	Err error
}

// Error reports the class, the message and the byte offset and sector of the fault.
func (e *FormatError) Error() string {
	return fmt.Sprintf("%v: %s at byte %d (sector %d)", e.Err, e.Msg, e.Offset, e.Offset/sectorSize)
}

// Unwrap returns the class of the error.
func (e *FormatError) Unwrap() error { return e.Err }

func corruptf(off int64, format string, args ...any) error {
	return &FormatError{Offset: off, Msg: fmt.Sprintf(format, args...), Err: ErrCorrupt}
}

func formatErr(class error, off int64, format string, args ...any) error {
	return &FormatError{Offset: off, Msg: fmt.Sprintf(format, args...), Err: class}
}
