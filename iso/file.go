package iso

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrNotFile marks a name that exists but cannot be an ISO image file (CheckFile): a directory, a
// URL, a device.
var ErrNotFile = errors.New("not an ISO image file")

// CheckFile checks, before anything is read, that name is what an ISO image is read from: a
// regular file that exists. Its error says what name is instead: "/srv is a directory, not an ISO
// image file" (wrapping ErrNotFile), likewise a URL (scheme://, which no file path given on a
// command line starts with) and a special file (a device, a socket); a file that does not exist gets the error of
// os.Stat (fs.ErrNotExist), with the directory a relative path was looked up in.
func CheckFile(name string) error {
	if name == "" {
		return fmt.Errorf("no file named: %w", ErrNotFile)
	}
	if scheme, _, ok := strings.Cut(name, "://"); ok && scheme != "" && !strings.Contains(scheme, "/") {
		return fmt.Errorf("%s is a URL (%s://), %w", name, scheme, ErrNotFile)
	}
	fi, err := os.Stat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !filepath.IsAbs(name):
		wd, _ := os.Getwd()
		return fmt.Errorf("%w (a relative path, looked up in %s)", err, wd)
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%s is a directory, %w", name, ErrNotFile)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is a special file (a device, a socket or a pipe; mode %s), %w", name, fi.Mode(), ErrNotFile)
	}
	return nil
}
