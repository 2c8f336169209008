package repo

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

// Listing is the JSON document of a directory.
type Listing struct {
	// Path is the directory's URL path, with a trailing slash.
	Path string `json:"path"`
	// Entries are the directory's files and subdirectories, by name.
	Entries []ListingEntry `json:"entries"`
}

// ListingEntry is one entry of a Listing.
type ListingEntry struct {
	// Name is the entry's name in the directory.
	Name string `json:"name"`
	// Dir is true for a subdirectory.
	Dir bool `json:"dir,omitempty"`
	// Size is a file's size in bytes (0 for a directory).
	Size int64 `json:"size"`
	// ModTime is the Last-Modified time the entry is served with.
	ModTime time.Time `json:"modTime"`
}

// serveDir answers a directory listing: JSON when the client accepts application/json, HTML
// otherwise.
func (h *Handler) serveDir(w http.ResponseWriter, r *http.Request, prefix string, e *entry) {
	dirPath := prefix + "/"
	if e.name != "." {
		dirPath = prefix + "/" + e.name + "/"
	}
	l := Listing{Path: dirPath, Entries: make([]ListingEntry, 0, len(e.children))}
	for _, c := range e.children {
		ce := h.index[path.Join(e.name, c)]
		if ce == nil {
			continue
		}
		l.Entries = append(l.Entries, ListingEntry{Name: c, Dir: ce.dir, Size: ce.size, ModTime: ce.modTime.UTC()})
	}
	w.Header().Set("Vary", "Accept")
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(l) // a failed write means the client hung up
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	var b strings.Builder
	title := html.EscapeString(l.Path)
	fmt.Fprintf(&b, "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>%s</title></head><body>\n<h1>%s</h1>\n<ul>\n", title, title)
	if e.name != "." {
		fmt.Fprintf(&b, "<li><a href=\"%s\">../</a></li>\n", html.EscapeString(escapePath(path.Dir(strings.TrimSuffix(l.Path, "/"))+"/")))
	}
	for _, le := range l.Entries {
		name := le.Name
		if le.Dir {
			name += "/"
		}
		fmt.Fprintf(&b, "<li><a href=\"%s\">%s</a> %d</li>\n", html.EscapeString(escapePath(l.Path+name)), html.EscapeString(name), le.Size)
	}
	b.WriteString("</ul>\n</body></html>\n")
	w.Write([]byte(b.String()))
}

// escapePath escapes each element of a URL path.
func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}
