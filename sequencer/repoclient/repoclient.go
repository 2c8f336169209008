// Package repoclient reads a release's metadata from where it is published: a repo server's base
// URL (GET /v1/release, the parsed metadata as JSON), a URL of harvester-release.yaml itself, a
// release ISO (package isorelease) or a local file.
//
// Imports: release, isorelease, redact and HTTP; nothing of the node's side.
package repoclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/upgrade-repo/upgrade-repo/internal/redact"
	"github.com/upgrade-repo/upgrade-repo/isorelease"
	"github.com/upgrade-repo/upgrade-repo/release"
)

// maxBody bounds how much of a response or file is read.
const maxBody = 4 << 20

// ReleasePath is the repo server's route for the parsed release metadata.
const ReleasePath = "/v1/release"

// IsURL reports whether src is an http or https URL rather than a file name.
func IsURL(src string) bool {
	return strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://")
}

// Load reads a release from src: a file name, a URL ending in .yaml or .yml (the raw
// harvester-release.yaml), a release ISO (a file or URL ending in .iso, read in place or through
// Range requests, package isorelease), or a repo server's base URL (its /v1/release). hc is used
// for URLs; http.DefaultClient when nil.
func Load(ctx context.Context, hc *http.Client, src string) (*release.Release, error) {
	if isorelease.IsISO(src) {
		if hc == nil {
			hc = http.DefaultClient
		}
		c, err := isorelease.Open(ctx, hc, src)
		if err != nil {
			return nil, err
		}
		return c.Release, nil
	}
	if !IsURL(src) {
		data, err := readFile(src)
		if err != nil {
			return nil, err
		}
		r, err := release.ParseRelease(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		return r, nil
	}
	u, err := url.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("release url %q: %w", redact.URL(src), err)
	}
	if strings.HasSuffix(u.Path, ".yaml") || strings.HasSuffix(u.Path, ".yml") {
		data, err := get(ctx, hc, u.String())
		if err != nil {
			return nil, err
		}
		r, err := release.ParseRelease(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", redact.URL(u.String()), err)
		}
		return r, nil
	}
	return Fetch(ctx, hc, src)
}

// Fetch reads GET base/v1/release from a repo server and decodes it. hc is http.DefaultClient when
// nil.
func Fetch(ctx context.Context, hc *http.Client, base string) (*release.Release, error) {
	u := strings.TrimRight(base, "/") + ReleasePath
	data, err := get(ctx, hc, u)
	if err != nil {
		return nil, err
	}
	var r release.Release
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decode %s: %w", redact.URL(u), err)
	}
	if r.Harvester == "" {
		return nil, fmt.Errorf("decode %s: the harvester version is missing", redact.URL(u))
	}
	return &r, nil
}

// ImagesPath is the repo server's route for the release's images.
const ImagesPath = "/v1/images"

// FetchImages reads GET base/v1/images from a repo server: the references of every image the
// release's lists name, sorted and without duplicates. hc is http.DefaultClient when nil.
func FetchImages(ctx context.Context, hc *http.Client, base string) ([]string, error) {
	u := strings.TrimRight(base, "/") + ImagesPath
	data, err := get(ctx, hc, u)
	if err != nil {
		return nil, err
	}
	var docs []struct {
		Ref string `json:"ref"`
	}
	if err := json.Unmarshal(data, &docs); err != nil {
		return nil, fmt.Errorf("decode %s: %w", redact.URL(u), err)
	}
	refs := make([]string, 0, len(docs))
	for _, d := range docs {
		if d.Ref == "" {
			return nil, fmt.Errorf("decode %s: an image without a reference", redact.URL(u))
		}
		refs = append(refs, d.Ref)
	}
	slices.Sort(refs)
	return slices.Compact(refs), nil
}

// ImageDigestsPath is an agent's route, followed by an ISO's sha512 in hex, for what the archives
// of that verified ISO say the release's images are.
const ImageDigestsPath = "/v1/images/digests/"

// ImageDigest is one element of an agent's answer at ImageDigestsPath: an image's reference, the
// digest of its config and, where the archive is an OCI layout, of its manifest or index.
type ImageDigest struct {
	Ref      string `json:"ref"`
	Config   string `json:"config,omitempty"`
	Manifest string `json:"manifest,omitempty"`
}

// FetchImageDigests reads GET base/v1/images/digests/<hex> from an agent: what the archives of the
// ISO whose sha512 is hex say the release's images are, sorted by reference, each digest a sha256
// one. hc is http.DefaultClient when nil. An agent that has not read that ISO answers 404.
func FetchImageDigests(ctx context.Context, hc *http.Client, base, hex string) ([]ImageDigest, error) {
	u := strings.TrimRight(base, "/") + ImageDigestsPath + hex
	data, err := get(ctx, hc, u)
	if err != nil {
		return nil, err
	}
	var docs []ImageDigest
	if err := json.Unmarshal(data, &docs); err != nil {
		return nil, fmt.Errorf("decode %s: %w", redact.URL(u), err)
	}
	for _, d := range docs {
		if d.Ref == "" || !digestRE.MatchString(d.Config) && d.Config != "" || !digestRE.MatchString(d.Manifest) && d.Manifest != "" {
			return nil, fmt.Errorf("decode %s: image %q: a reference and sha256 digests are required", redact.URL(u), d.Ref)
		}
	}
	slices.SortFunc(docs, func(a, b ImageDigest) int { return strings.Compare(a.Ref, b.Ref) })
	return docs, nil
}

var digestRE = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

func get(ctx context.Context, hc *http.Client, u string) ([]byte, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	// Errors name the URL without its credentials or query, which may hold a signature.
	shown := redact.URL(u)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", shown, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		// A *url.Error repeats the method and the URL this error already names.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("get %s: %w", shown, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s: status %s", shown, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", shown, err)
	}
	if len(data) > maxBody {
		return nil, fmt.Errorf("get %s: the response is larger than %d bytes", shown, maxBody)
	}
	return data, nil
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("read release: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("read release %s: %w", name, err)
	}
	if len(data) > maxBody {
		return nil, fmt.Errorf("read release %s: larger than %d bytes", name, maxBody)
	}
	return data, nil
}
