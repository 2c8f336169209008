package acquire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/chunks"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/cache"
	"github.com/upgrade-repo/upgrade-repo/peer/fetch"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
)

// Source says where an ISO comes from: a local Path, or a URL with its Checksum and the
// CacheDir to download it into.
type Source struct {
	// Path is a local ISO file; it is used in place (verified first when Checksum is set).
	Path string
	// URL is the origin of the ISO.
	URL string
	// Checksum is the ISO's sha512; required with URL.
	Checksum checksum.Sum
	// CacheDir is where a downloaded ISO is kept; required with URL.
	CacheDir string
	// Client is the HTTP client for URL (default: one without an overall timeout; a response
	// that stops bringing bytes is abandoned and resumed).
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
		return fetch.CheckURL(s.URL)
	case fetch.CheckURL(s.Path) == nil:
		return fmt.Errorf("ISO path %s is a URL: give it as the ISO URL, with its checksum", redact.URL(s.Path))
	}
	return iso.CheckFile(s.Path)
}

// Option configures Acquire.
type Option func(*options)

type options struct {
	log     *slog.Logger
	metrics *peer.Metrics
	fetch   []fetch.Option
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithMetrics sets the metrics the download records into (default: none).
func WithMetrics(m *peer.Metrics) Option { return func(o *options) { o.metrics = m } }

// WithFetchOptions adds options of the download (retry policy, timeouts, progress interval).
func WithFetchOptions(opts ...fetch.Option) Option {
	return func(o *options) { o.fetch = append(o.fetch, opts...) }
}

// Verified is a verified local copy of an ISO.
type Verified struct {
	// Path is the file.
	Path string
	// Verifier checks each chunk of the file against the digests it was verified with before it
	// is served; nil for a local file given without a checksum.
	Verifier *chunks.Verifier

	close func() error
}

// Close closes what the copy holds open.
func (v Verified) Close() error {
	if v.close == nil {
		return nil
	}
	return v.close()
}

// lone is the name of the only member of the node-local ring a URL is fetched with.
const lone = "serve"

// Acquire returns a verified local copy of the ISO of src: the file itself for a Path, the
// cache's copy for a URL (downloaded, resumed, reused or verified as needed). A chunk of the copy
// found damaged while it is served is logged and refused from then on.
func Acquire(ctx context.Context, src Source, opts ...Option) (Verified, error) {
	if err := src.Validate(); err != nil {
		return Verified{}, fmt.Errorf("acquire: %w", err)
	}
	o := options{log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	if src.Path != "" && src.Checksum.IsZero() {
		return Verified{Path: src.Path}, nil
	}
	if src.Path == "" {
		if err := os.MkdirAll(src.CacheDir, 0o755); err != nil {
			return Verified{}, fmt.Errorf("acquire: cache %w", err)
		}
	}
	dir := inventory.NewDirectory(lone)
	var once sync.Once
	store := cache.NewStore(dir, cache.WithLogger(o.log), cache.WithOnDamage(func(string, *chunks.DamageError) {
		once.Do(func() {
			o.log.Error("the ISO is damaged on disk: its damaged chunks are refused; restart to verify it again and fetch what changed")
		})
	}))
	var l *cache.LocalISO
	if src.Path != "" {
		var err error
		if l, err = store.AddComplete(src.Path, src.Checksum.Hex(), cache.DefaultChunkSize); err != nil {
			if errors.Is(err, peer.ErrVerification) {
				o.metrics.Verified(peer.VerifiedMismatch)
			}
			return Verified{}, fmt.Errorf("acquire: %w", err)
		}
		o.metrics.Verified(peer.VerifiedOK)
	} else {
		fopts := []fetch.Option{fetch.WithMetrics(o.metrics), fetch.WithSettle(0)}
		if src.Client != nil {
			fopts = append(fopts, fetch.WithHTTPClient(src.Client))
		}
		f, err := fetch.NewFetcher(o.log, dir, &peer.StaticMembers{Local: lone, List: []peer.Member{{Name: lone}}}, store,
			append(fopts, o.fetch...)...)
		if err != nil {
			return Verified{}, fmt.Errorf("acquire: %w", err)
		}
		req := fetch.Request{SHA512: src.Checksum.Hex(), OriginURL: src.URL, Path: filepath.Join(src.CacheDir, src.Checksum.Hex()+".iso")}
		if l, err = f.Fetch(ctx, req, nil); err != nil {
			_ = store.Remove(req.SHA512, false)
			return Verified{}, fmt.Errorf("acquire: %w", err)
		}
	}
	return Verified{Path: l.Path(), Verifier: l.Verifier(), close: l.Close}, nil
}
