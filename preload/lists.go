package preload

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ListFile is the name of the file, in a release's folder of a ListArchive, that lists every
// image of the release, one reference a line: the name the release ISO's own
// images-lists-archive/<version>/ folders use.
const ListFile = "image_list_all.txt"

// maxListBytes bounds a list file read back from the archive: a release lists a few hundred
// images, and a file far larger is damaged, not a list.
const maxListBytes = 16 << 20

// ListArchive is the node's copy of the image lists of every release it preloaded, one folder a
// release: <dir>/<release>/image_list_all.txt. It is what tells, after an upgrade, which images
// belonged to the releases before it once their ISOs are gone. Files are written whole or not
// at all (a temporary file renamed into place). Its methods are safe for concurrent use by
// several goroutines of one process for different releases.
type ListArchive struct {
	dir string
}

// NewListArchive returns the archive kept in dir, created on the first Save.
func NewListArchive(dir string) *ListArchive { return &ListArchive{dir: dir} }

// Dir returns the archive's directory.
func (a *ListArchive) Dir() string { return a.dir }

// checkReleaseName refuses a release name that is not one plain path element.
func checkReleaseName(release string) error {
	switch {
	case release == "", release == ".", release == "..":
		return fmt.Errorf("image list archive: release name %q: want a version such as v1.5.2", release)
	case len(release) > 128:
		return fmt.Errorf("image list archive: release name %.20q...: longer than 128 bytes", release)
	case strings.ContainsAny(release, "/\\\x00\r\n"):
		return fmt.Errorf("image list archive: release name %q: contains a path separator or control character", release)
	}
	return nil
}

// Save records refs as the images of release, sorted and without repeats, replacing what was
// recorded before.
func (a *ListArchive) Save(release string, refs []string) error {
	if err := checkReleaseName(release); err != nil {
		return err
	}
	refs = slices.Clone(refs)
	slices.Sort(refs)
	refs = slices.Compact(refs)
	var b bytes.Buffer
	for _, r := range refs {
		if r == "" || strings.ContainsAny(r, " \t\r\n") {
			return fmt.Errorf("image list archive: release %s: image reference %q: contains white space", release, r)
		}
		b.WriteString(r)
		b.WriteByte('\n')
	}
	dir := filepath.Join(a.dir, release)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("image list archive: %w", err)
	}
	return writeFileAtomic(filepath.Join(dir, ListFile), b.Bytes())
}

// Load returns the images recorded for release, sorted. A release with no record gives an error
// that wraps fs.ErrNotExist.
func (a *ListArchive) Load(release string) ([]string, error) {
	if err := checkReleaseName(release); err != nil {
		return nil, err
	}
	p := filepath.Join(a.dir, release, ListFile)
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("image list archive: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > maxListBytes {
		return nil, fmt.Errorf("image list archive: %s: %d bytes, more than a list of images can be (%d)", p, st.Size(), maxListBytes)
	}
	var refs []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 4096)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, " \t") {
			return nil, fmt.Errorf("image list archive: %s:%d: %q is not one image reference", p, n, line)
		}
		refs = append(refs, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("image list archive: read %s: %w", p, err)
	}
	slices.Sort(refs)
	return slices.Compact(refs), nil
}

// Releases returns the releases the archive holds a list for, sorted by name.
func (a *ListArchive) Releases() ([]string, error) {
	ents, err := os.ReadDir(a.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image list archive: %w", err)
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() || checkReleaseName(e.Name()) != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(a.dir, e.Name(), ListFile)); err == nil {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Drop forgets release's list; a release with none is no error.
func (a *ListArchive) Drop(release string) error {
	if err := checkReleaseName(release); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(a.dir, release)); err != nil {
		return fmt.Errorf("image list archive: %w", err)
	}
	return nil
}

// writeFileAtomic writes data to p through a temporary file in the same directory, synced and
// renamed into place, so that a reader sees the old file or the new one, never a part.
func writeFileAtomic(p string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return fmt.Errorf("image list archive: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("image list archive: write %s: %w", p, err)
	}
	if d, err := os.Open(filepath.Dir(p)); err == nil {
		_ = d.Sync() // the rename survives a power cut where the file system allows
		_ = d.Close()
	}
	return nil
}
