package repo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"

	"github.com/upgrade-repo/upgrade-repo/release"
)

// metadata is the release metadata, rendered as JSON once at startup. A nil document comes with
// the error to answer instead.
type metadata struct {
	release     *release.Release
	releaseJSON []byte
	releaseErr  *metaError
	bundleJSON  []byte
	imagesJSON  []byte
	bundleErr   *metaError
	problems    []error
}

type metaError struct {
	code int
	msg  string
}

// BundleDoc is the JSON document of /v1/bundle.
type BundleDoc struct {
	// Groups maps each bundle group (common, rke2, agent, ...) to its archives.
	Groups map[string][]BundleArchive `json:"groups"`
}

// BundleArchive is one archive of /v1/bundle. Paths are URL paths from the root of the release.
type BundleArchive struct {
	// Archive is the archive's URL path, such as /bundle/harvester/images/x.tar.zst.
	Archive string `json:"archive"`
	// List is the URL path of the archive's image list.
	List string `json:"list"`
	// Size is the archive's size in bytes (0 when it is missing).
	Size int64 `json:"size"`
	// Images are the normalised references of the list.
	Images []string `json:"images"`
	// Error says what is wrong with the archive (missing from the image, unreadable list).
	Error string `json:"error,omitempty"`
}

// ImageDoc is one element of /v1/images.
type ImageDoc struct {
	// Ref is the normalised image reference.
	Ref string `json:"ref"`
	// Group is the bundle group of the image's archive.
	Group string `json:"group"`
	// Archive is the URL path of the archive holding the image.
	Archive string `json:"archive"`
}

func loadMetadata(fsys fs.FS, index map[string]*entry) metadata {
	var m metadata
	rel, err := release.LoadRelease(fsys)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		m.releaseErr = &metaError{http.StatusNotFound, "the release has no " + release.ReleaseFile}
	case err != nil:
		m.releaseErr = &metaError{http.StatusUnprocessableEntity, err.Error()}
		m.problems = append(m.problems, err)
	default:
		m.release = rel
		m.releaseJSON = mustJSON(rel)
	}

	b, err := release.LoadBundle(fsys)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		m.bundleErr = &metaError{http.StatusNotFound, "the release has no " + release.BundleFile}
		return m
	case err != nil:
		m.bundleErr = &metaError{http.StatusUnprocessableEntity, err.Error()}
		m.problems = append(m.problems, err)
		return m
	}
	doc := BundleDoc{Groups: map[string][]BundleArchive{}}
	images := []ImageDoc{}
	for _, a := range b.Archives {
		ba := BundleArchive{Archive: "/" + a.Archive, List: "/" + a.List, Images: []string{}}
		if e := index[a.Archive]; e != nil && !e.dir {
			ba.Size = e.size
		} else {
			ba.Error = "the archive is not in the image"
			m.problems = append(m.problems, fmt.Errorf("%s: %s", a.Archive, ba.Error))
		}
		refs, err := release.LoadImageList(fsys, a)
		if err != nil {
			ba.Error = fmt.Sprintf("image list: %v", err)
			m.problems = append(m.problems, err)
		}
		for _, ref := range refs {
			ba.Images = append(ba.Images, ref)
			images = append(images, ImageDoc{Ref: ref, Group: a.Group, Archive: ba.Archive})
		}
		doc.Groups[a.Group] = append(doc.Groups[a.Group], ba)
	}
	m.bundleJSON = mustJSON(doc)
	m.imagesJSON = mustJSON(images)
	return m
}

// mustJSON marshals values whose types cannot fail to marshal.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	return append(b, '\n')
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (h *Handler) serveMeta(w http.ResponseWriter, r *http.Request, doc []byte, merr *metaError) {
	if doc == nil {
		if merr == nil {
			merr = &metaError{http.StatusNotFound, "not found"}
		}
		writeError(w, merr.code, merr.msg)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Length", fmt.Sprint(len(doc)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(doc)
	}
}
