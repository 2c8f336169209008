package httprange

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/upgrade-repo/upgrade-repo/internal/redact"
)

// ErrNotURL marks a string that is no URL a range can be asked of (CheckURL).
var ErrNotURL = errors.New("not an http or https URL")

// CheckURL checks that raw is what Open, Probe and every fetch of this product read from: an
// absolute http or https URL with a host. Its error wraps ErrNotURL and says what raw is instead
// and what is wanted: "not an http or https URL: scheme ftp:// is not supported (want
// http://HOST/PATH or https://HOST/PATH)"; likewise a file path (no scheme) and no host. It does
// not quote raw, which may carry secrets: the caller names it, redacted.
func CheckURL(raw string) error {
	const want = "(want http://HOST/PATH or https://HOST/PATH)"
	scheme, _, hasScheme := strings.Cut(raw, "://")
	switch {
	case raw == "":
		return fmt.Errorf("%w: empty %s", ErrNotURL, want)
	case !hasScheme || strings.Contains(scheme, "/"):
		return fmt.Errorf("%w: a file path %s", ErrNotURL, want)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w %s", ErrNotURL, redact.Error(err), want)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%w: scheme %s:// is not supported %s", ErrNotURL, u.Scheme, want)
	case u.Host == "":
		return fmt.Errorf("%w: no host %s", ErrNotURL, want)
	}
	return nil
}
