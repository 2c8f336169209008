package acquire

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"

	"github.com/upgrade-repo/upgrade-repo/redact"
)

// Source says where an ISO comes from: a local Path, or a URL with its Checksum and the
// CacheDir to download it into.
type Source struct {
	// Path is a local ISO file; it is used in place (verified first when Checksum is set).
	Path string
	// URL is the origin of the ISO.
	URL string
	// Checksum is the ISO's sha512; required with URL.
	Checksum Checksum
	// CacheDir is where a downloaded ISO is kept; required with URL.
	CacheDir string
	// Client is the HTTP client for URL (default http.DefaultClient).
	Client *http.Client
}

// Validate reports what is missing or contradictory in the Source.
func (s Source) Validate() error {
	switch {
	case s.Path != "" && s.URL != "":
		return errors.New("give either an ISO path or an ISO URL, not both")
	case s.Path == "" && s.URL == "":
		return errors.New("an ISO path or an ISO URL is required")
	case s.URL != "" && s.Checksum.IsZero():
		return errors.New("an ISO URL needs its checksum (sha512:HEX)")
	case s.URL != "" && s.CacheDir == "":
		return errors.New("an ISO URL needs a cache directory")
	case s.URL != "":
		return CheckURL(s.URL)
	}
	return nil
}

// CheckURL reports whether raw can be an ISO's origin: an absolute http or https URL with a
// host. Any other scheme (ftp, file) would only fail again and again; it is refused at once.
// The error quotes the URL redacted.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("ISO URL %s: %w", redact.URL(raw), redact.Error(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("ISO URL %s: want an http or https URL with a host", redact.URL(raw))
	}
	return nil
}

// Acquire returns the path of a verified local copy of the ISO of src: the file itself for a
// Path, the cache's copy for a URL (downloaded, resumed, verified as needed).
func Acquire(ctx context.Context, src Source, opts ...Option) (string, error) {
	if err := src.Validate(); err != nil {
		return "", fmt.Errorf("acquire: %w", err)
	}
	if src.Path != "" {
		fi, err := os.Stat(src.Path)
		if err != nil {
			return "", fmt.Errorf("acquire: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return "", fmt.Errorf("acquire: %s is not a regular file", src.Path)
		}
		if !src.Checksum.IsZero() {
			if err := Verify(ctx, src.Path, src.Checksum); err != nil {
				return "", fmt.Errorf("acquire: %w", err)
			}
		}
		return src.Path, nil
	}
	c, err := NewCache(src.CacheDir, opts...)
	if err != nil {
		return "", fmt.Errorf("acquire: %w", err)
	}
	return c.Get(ctx, src.Checksum, &HTTPFetcher{URL: src.URL, Client: src.Client})
}
