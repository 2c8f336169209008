// Package containerd is the preload.Store over a containerd daemon: it checks which images are
// present with complete content and imports docker-save archives through containerd's Go client,
// in-process, under a lease so that a failed import leaves nothing referenced. It writes the
// archives' blobs straight into the daemon's content directory when it can (see ingest.go) and
// can unpack the imported images into a snapshotter.
//
// It is the only package of the project that imports containerd. It works with containerd 1.6,
// 1.7 and 2.x daemons: it uses the content, images, leases and introspection services, and for
// unpacking the snapshots and diff services.
//
// Imports: preload, registry, internal/pagecache and containerd's client; it alone of the module
// imports containerd (internal/boundary).
package containerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/upgrade-repo/upgrade-repo/preload"
)

// DefaultNamespace is the containerd namespace the kubelet's images live in.
const DefaultNamespace = "k8s.io"

// criLabel marks images as managed by the CRI plugin, as images it pulls itself are.
const criLabel = "io.cri-containerd.image"

// DefaultLeaseExpiry is how long an import's lease outlives a process that died holding it: the
// lease protects what an import wrote until its images exist, and is deleted as soon as the
// import ends, but a killed process cannot delete it. An hour is ample for one archive (the
// largest import in minutes), and keeps what a crash left for an hour rather than containerd's
// customary day.
const DefaultLeaseExpiry = time.Hour

// LeaseLabel marks the leases of imports (value "import"), so that an operator can tell them
// apart in "ctr leases ls".
const LeaseLabel = "upgrade-repo.harvesterhci.io/preload"

// Store is a preload.Store over one containerd daemon and namespace. It is safe for concurrent use.
type Store struct {
	client *client.Client
	ns     string
	log    *slog.Logger
	expiry time.Duration

	// direct is the daemon's content directory when this process can write blobs into it
	// (see ingest.go), nil when imports stream every blob through the content service.
	direct       *directIngest
	directIngest bool
	snapshotter  string
	// onepass is the snapshotter's directory when this process extracts layers while it writes
	// their blobs (see onepass.go), nil when containerd unpacks them after the import.
	onepass   *onePass
	onePassOn bool

	onePassLayers, containerdUnpacks atomic.Int64

	mu sync.Mutex
	// stale are the leases of failed imports that could not be deleted (the daemon was down):
	// the next import deletes them, so that their content is collected.
	stale []leases.Lease
}

var _ preload.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithNamespace sets the containerd namespace (default k8s.io).
func WithNamespace(ns string) Option { return func(s *Store) { s.ns = ns } }

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// WithLeaseExpiry sets when the lease of an import expires if its process dies before deleting
// it (default DefaultLeaseExpiry). An import must finish within it.
func WithLeaseExpiry(d time.Duration) Option { return func(s *Store) { s.expiry = d } }

// WithDirectIngest sets whether imports write blobs straight into the daemon's content directory
// when this process can (default true; see the package's direct ingest). Without it, or when the
// directory is out of reach, every blob is sent through containerd's content service.
func WithDirectIngest(on bool) Option { return func(s *Store) { s.directIngest = on } }

// DefaultSnapshotter is the snapshotter the CRI plugin unpacks images into unless configured
// otherwise, RKE2's and k3s's included.
const DefaultSnapshotter = "overlayfs"

// WithUnpack makes every import also unpack the images it imports for this host's platform into
// the named snapshotter (the CRI plugin's, DefaultSnapshotter unless configured otherwise), so
// that their first container starts without unpacking. Images whose archive holds no manifest
// for this host's platform are imported but not unpacked. Empty (the default) unpacks nothing.
func WithUnpack(snapshotter string) Option { return func(s *Store) { s.snapshotter = snapshotter } }

// WithOnePass sets whether imports that unpack extract each layer while its blob is written,
// when this process can (default true; see the package's one-pass unpack). Without it, or when
// the snapshotter's directory is out of reach, containerd unpacks the images after the import.
func WithOnePass(on bool) Option { return func(s *Store) { s.onePassOn = on } }

// New connects to the containerd daemon at socket (such as /run/containerd/containerd.sock). A
// path where nothing is, or nothing that is a socket, fails at once, saying so; a socket that
// refuses or a daemon that does not answer is preload.ErrTransient.
func New(ctx context.Context, socket string, opts ...Option) (*Store, error) {
	s := &Store{ns: DefaultNamespace, log: slog.New(slog.DiscardHandler), expiry: DefaultLeaseExpiry, directIngest: true, onePassOn: true}
	for _, o := range opts {
		o(s)
	}
	if s.ns == "" {
		return nil, errors.New("containerd: empty namespace")
	}
	if s.expiry <= 0 {
		return nil, fmt.Errorf("containerd: lease expiry %s: want a positive duration", s.expiry)
	}
	if err := checkSocket(ctx, socket); err != nil {
		return nil, err
	}
	c, err := client.New(socket, client.WithDefaultNamespace(s.ns), client.WithTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connect to containerd at %s: %w", socket, classify(err))
	}
	if _, err := c.Version(namespaces.WithNamespace(ctx, s.ns)); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("containerd at %s: version: %w", socket, classify(err))
	}
	s.client = c
	if s.directIngest {
		s.direct = s.findContentDir(ctx)
	}
	s.onepass = s.findOnePass(ctx)
	return s, nil
}

// findContentDir returns direct ingest into the content directory the daemon reports, or nil,
// logging why, when this process cannot write there.
func (s *Store) findContentDir(ctx context.Context) *directIngest {
	exports, err := s.pluginExports(ctx, contentPluginType, "content")
	if err != nil {
		s.log.Info("direct ingest off: cannot ask containerd for its content directory", "err", err)
		return nil
	}
	if exports == nil {
		s.log.Info("direct ingest off: containerd reports no local content store")
		return nil
	}
	root := exports["root"]
	d, err := newDirectIngest(root)
	if err != nil {
		s.log.Info("direct ingest off: content directory out of reach", "dir", root, "err", err)
		return nil
	}
	d.removeStale()
	s.log.Debug("direct ingest on", "dir", root)
	return d
}

// pluginExports returns what the daemon's plugin of type typ and id exports, nil when it has no
// such plugin. (Filters given apart are alternatives: one filter names both.)
func (s *Store) pluginExports(ctx context.Context, typ, id string) (map[string]string, error) {
	resp, err := s.client.IntrospectionService().Plugins(s.nsctx(ctx), "type=="+typ+",id=="+id)
	if err != nil {
		return nil, err
	}
	for _, p := range resp.GetPlugins() {
		if p.GetType() == typ && p.GetID() == id {
			if e := p.GetExports(); e != nil {
				return e, nil
			}
			return map[string]string{}, nil
		}
	}
	return nil, nil
}

// contentPluginType is the plugin type of containerd's content store.
const contentPluginType = "io.containerd.content.v1"

// Unpacking reports whether imports unpack the images.
func (s *Store) Unpacking() bool { return s.snapshotter != "" }

// OnePass reports whether imports that unpack extract layers while they write them.
func (s *Store) OnePass() bool { return s.onepass != nil && s.DirectIngest() }

// DirectIngest reports whether imports currently write blobs straight into the daemon's content
// directory.
func (s *Store) DirectIngest() bool { return s.direct != nil && s.direct.enabled() }

// Close closes the connection to the daemon.
func (s *Store) Close() error { return s.client.Close() }

// Version returns the daemon's version string, such as 1.6.20~ds1.
func (s *Store) Version(ctx context.Context) (string, error) {
	v, err := s.client.Version(s.nsctx(ctx))
	if err != nil {
		return "", classify(err)
	}
	return v.Version, nil
}

func (s *Store) nsctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, s.ns)
}

// classify marks the errors of an unreachable or overloaded daemon as transient.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errdefs.IsUnavailable(err) || status.Code(err) == codes.Unavailable || status.Code(err) == codes.ResourceExhausted {
		return fmt.Errorf("%w: %w", preload.ErrTransient, err)
	}
	return err
}

// classifyWrite is classify for the errors of writing an archive's content. A write stream that
// the daemon closed under it (it crashed or restarted) fails with an error that has lost its
// gRPC code ("failed to send write: EOF"), so the daemon is asked whether it is still there: an
// error while it cannot be reached is transient. (A daemon back within the instant between the
// two is not told apart from a real failure; the import then fails as it did.)
func (s *Store) classifyWrite(ctx context.Context, err error) error {
	err = classify(err)
	if errors.Is(err, preload.ErrTransient) || ctx.Err() != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, verr := s.client.Version(pctx); verr != nil && errors.Is(classify(verr), preload.ErrTransient) {
		return fmt.Errorf("%w: containerd went away: %w", preload.ErrTransient, err)
	}
	return err
}

// Missing implements preload.Store. An image is present when its name exists in the namespace and
// its content is complete: the manifest, its config and every layer, or for an index at least one
// complete manifest (archives hold one platform of a multi-platform image).
func (s *Store) Missing(ctx context.Context, refs []string) ([]string, error) {
	ctx = s.nsctx(ctx)
	byName, err := s.targets(ctx)
	if err != nil {
		return nil, err
	}
	c := &checker{cs: s.client.ContentStore(), known: map[digest.Digest]bool{}}
	var missing []string
	for _, ref := range refs {
		target, ok := byName[ref]
		if ok {
			if ok, err = c.complete(ctx, target, 0); err != nil {
				return nil, fmt.Errorf("check %s: %w", ref, classify(err))
			}
		}
		if !ok {
			missing = append(missing, ref)
		}
	}
	return missing, nil
}

// targets maps every image name of the namespace in ctx to the descriptor it points to.
func (s *Store) targets(ctx context.Context) (map[string]ocispec.Descriptor, error) {
	imgs, err := s.client.ImageService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", classify(err))
	}
	byName := make(map[string]ocispec.Descriptor, len(imgs))
	for _, img := range imgs {
		byName[img.Name] = img.Target
	}
	return byName, nil
}

var _ preload.DigestReader = (*Store)(nil)

// Held implements preload.DigestReader: for each of refs present with complete content (as
// Missing judges it), the digest its name points to and the configs of its complete manifests.
func (s *Store) Held(ctx context.Context, refs []string) ([]preload.Held, error) {
	ctx = s.nsctx(ctx)
	byName, err := s.targets(ctx)
	if err != nil {
		return nil, err
	}
	c := &checker{cs: s.client.ContentStore(), known: map[digest.Digest]bool{}}
	var out []preload.Held
	for _, ref := range refs {
		target, ok := byName[ref]
		if !ok {
			continue
		}
		ok, err := c.complete(ctx, target, 0)
		if err != nil {
			return nil, fmt.Errorf("check %s: %w", ref, classify(err))
		}
		if !ok {
			continue
		}
		configs, err := c.configs(ctx, target, 0)
		if err != nil {
			return nil, fmt.Errorf("read the configs of %s: %w", ref, classify(err))
		}
		out = append(out, preload.Held{Ref: ref, Target: target.Digest.String(), Configs: configs})
	}
	return out, nil
}

// checker checks content completeness, remembering blobs it has seen within one call.
type checker struct {
	cs    content.Store
	known map[digest.Digest]bool
}

func (c *checker) has(ctx context.Context, d digest.Digest) (bool, error) {
	if ok, seen := c.known[d]; seen {
		return ok, nil
	}
	_, err := c.cs.Info(ctx, d)
	if errdefs.IsNotFound(err) {
		c.known[d] = false
		return false, nil
	}
	if err != nil {
		return false, err
	}
	c.known[d] = true
	return true, nil
}

// maxDepth bounds index nesting, so a cyclic or absurd index cannot recurse forever.
const maxDepth = 4

func (c *checker) complete(ctx context.Context, desc ocispec.Descriptor, depth int) (bool, error) {
	if depth > maxDepth {
		return false, nil
	}
	switch {
	case images.IsIndexType(desc.MediaType):
		var idx ocispec.Index
		if ok, err := c.readJSON(ctx, desc, &idx); !ok || err != nil {
			return false, err
		}
		for _, m := range idx.Manifests {
			ok, err := c.complete(ctx, m, depth+1)
			if ok || err != nil {
				return ok, err
			}
		}
		return false, nil
	case images.IsManifestType(desc.MediaType):
		var m ocispec.Manifest
		if ok, err := c.readJSON(ctx, desc, &m); !ok || err != nil {
			return false, err
		}
		for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
			if ok, err := c.has(ctx, d.Digest); !ok || err != nil {
				return false, err
			}
		}
		return true, nil
	default:
		return c.has(ctx, desc.Digest)
	}
}

// configs returns the config digests of the complete manifests desc is or its indexes name, each
// once.
func (c *checker) configs(ctx context.Context, desc ocispec.Descriptor, depth int) ([]string, error) {
	if depth > maxDepth {
		return nil, nil
	}
	switch {
	case images.IsIndexType(desc.MediaType):
		var idx ocispec.Index
		if ok, err := c.readJSON(ctx, desc, &idx); !ok || err != nil {
			return nil, err
		}
		var out []string
		for _, m := range idx.Manifests {
			cs, err := c.configs(ctx, m, depth+1)
			if err != nil {
				return nil, err
			}
			for _, d := range cs {
				if !slices.Contains(out, d) {
					out = append(out, d)
				}
			}
		}
		return out, nil
	case images.IsManifestType(desc.MediaType):
		if ok, err := c.complete(ctx, desc, depth); !ok || err != nil {
			return nil, err
		}
		var m ocispec.Manifest
		if ok, err := c.readJSON(ctx, desc, &m); !ok || err != nil {
			return nil, err
		}
		return []string{m.Config.Digest.String()}, nil
	}
	return nil, nil
}

func (c *checker) readJSON(ctx context.Context, desc ocispec.Descriptor, v any) (bool, error) {
	p, err := content.ReadBlob(ctx, c.cs, desc)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(p, v); err != nil {
		return false, fmt.Errorf("decode %s: %w", desc.Digest, err)
	}
	return true, nil
}

// Import implements preload.Store. Everything it writes is held by a lease of its own until the
// images exist; the stream is read to its end (so the decompressor verifies its checksum) before
// any image is created, and on failure the lease is deleted synchronously, so the garbage
// collector removes what was written.
func (s *Store) Import(ctx context.Context, r io.Reader) (names []string, err error) {
	ctx = s.nsctx(ctx)
	ls := s.client.LeasesService()
	s.deleteStale(ctx, ls)
	l, err := ls.Create(ctx, leases.WithRandomID(), leases.WithExpiration(s.expiry),
		leases.WithLabel(LeaseLabel, "import"))
	if err != nil {
		return nil, fmt.Errorf("create lease: %w", classify(err))
	}
	defer func() {
		// The lease goes even when ctx is cancelled; on failure its content is collected now.
		dctx := context.WithoutCancel(ctx)
		var opts []leases.DeleteOpt
		if err != nil {
			opts = append(opts, leases.SynchronousDelete)
		}
		if derr := ls.Delete(dctx, l, opts...); derr != nil && !errdefs.IsNotFound(derr) {
			s.log.Warn("deleting import lease failed, trying again at the next import", "lease", l.ID, "err", derr)
			s.mu.Lock()
			s.stale = append(s.stale, l)
			s.mu.Unlock()
		}
	}()
	ctx = leases.WithLease(ctx, l.ID)
	cs := s.client.ContentStore()
	ics := cs
	var st *stager
	if s.OnePass() {
		if st, err = s.onepass.newStager(); err != nil {
			s.log.Warn("one-pass unpack off for this import", "err", err)
			st = nil
		} else {
			defer st.remove()
		}
	}
	if s.DirectIngest() {
		ics = &ingestStore{Store: cs, d: s.direct, st: st, onFail: func(err error) {
			s.log.Warn("direct ingest off, streaming blobs through containerd", "err", err)
		}}
	}

	index, err := importIndex(ctx, ics, r)
	if err != nil {
		return nil, fmt.Errorf("read archive: %w", s.classifyWrite(ctx, err))
	}
	// Whatever follows the tar's end (padding, the compressed stream's checksum) is read too.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, fmt.Errorf("read archive end: %w", err)
	}
	imgs, err := s.images(ctx, cs, index)
	if err != nil {
		return nil, err
	}
	// Unpacked before the images exist, under the same lease: a failed unpack leaves nothing.
	if err := s.unpackAll(ctx, st, imgs); err != nil {
		return nil, err
	}
	is := s.client.ImageService()
	for _, img := range imgs {
		if err := s.name(ctx, is, img); err != nil {
			return names, err
		}
		names = append(names, img.Name)
	}
	return names, nil
}

// name points img's name to img's target, creating the image or updating the one of that name.
// A name that pointed to another image loses the pins this store set on that image (see Pin):
// they were claims on the image the name held, and the preload claims the new one for its
// release as soon as the import returns. The image the name held is left to the garbage
// collector.
func (s *Store) name(ctx context.Context, is images.Store, img images.Image) error {
	img.Labels = map[string]string{criLabel: "managed"}
	fields := []string{"target", "labels." + criLabel}
	old, err := is.Get(ctx, img.Name)
	switch {
	case errdefs.IsNotFound(err):
		_, err := is.Create(ctx, img)
		if !errdefs.IsAlreadyExists(err) {
			if err != nil {
				return fmt.Errorf("create image %s: %w", img.Name, classify(err))
			}
			return nil
		}
		// Created by a concurrent import of the same image in between.
	case err != nil:
		return fmt.Errorf("get image %s: %w", img.Name, classify(err))
	case old.Target.Digest != img.Target.Digest:
		fields = append(fields, pinFields(old.Labels)...)
		s.log.Info("image name pointed to another image than the archive's: pointing it to the archive's",
			"image", img.Name, "held", old.Target.Digest, "archive", img.Target.Digest)
	}
	_, err = is.Update(ctx, img, fields...)
	if errdefs.IsNotFound(err) {
		// Removed in between: created again.
		_, err = is.Create(ctx, img)
	}
	if err != nil {
		return fmt.Errorf("update image %s: %w", img.Name, classify(err))
	}
	return nil
}

// unpackAll unpacks imgs: from the layers st extracted while the archive was read, then, for
// what they lack, through containerd.
func (s *Store) unpackAll(ctx context.Context, st *stager, imgs []images.Image) error {
	if s.snapshotter == "" {
		return nil
	}
	var res onePassResult
	start := time.Now()
	var waited, synced time.Duration
	if st != nil {
		// Only the layers of the archive's images are unpacked: the extractions of other blobs
		// stop here, whatever they were, rather than run to their end.
		st.keep(s.namedLayers(ctx, imgs))
		st.wait()
		waited = time.Since(start)
		if err := s.onepass.sync(); err != nil {
			return fmt.Errorf("unpack: %w", err)
		}
		synced = time.Since(start) - waited
	}
	for _, img := range imgs {
		done := false
		if st != nil {
			done = s.commitStaged(ctx, st, img, &res)
		}
		if !done {
			res.containerd++
			if err := s.unpack(ctx, img); err != nil {
				return fmt.Errorf("unpack %s into %s: %w", img.Name, s.snapshotter, classify(err))
			}
		}
	}
	s.onePassLayers.Add(int64(res.staged))
	s.containerdUnpacks.Add(int64(res.containerd))
	s.log.Debug("unpacked", "layers in one pass", res.staged, "layers present", res.present, "images unpacked by containerd", res.containerd,
		"extraction wait", waited, "sync", synced, "total", time.Since(start))
	return nil
}

// namedLayers returns the digests of the layers that the manifests of imgs for this host name,
// the blobs an unpack may extract. An image whose manifest cannot be read names none: containerd
// unpacks it, if it can.
func (s *Store) namedLayers(ctx context.Context, imgs []images.Image) map[digest.Digest]bool {
	named := map[digest.Digest]bool{}
	cs := s.client.ContentStore()
	for _, img := range imgs {
		m, err := images.Manifest(ctx, cs, img.Target, platforms.Default())
		if err != nil {
			continue
		}
		for _, l := range m.Layers {
			named[l.Digest] = true
		}
	}
	return named
}

// UnpackCounts returns how many layers imports extracted in one pass, and how many images (or
// their remaining layers) containerd unpacked after an import, since the store was made.
func (s *Store) UnpackCounts() (onePassLayers, containerdImages int64) {
	return s.onePassLayers.Load(), s.containerdUnpacks.Load()
}

// unpack unpacks img into the store's snapshotter, when it has one and the image a manifest for
// this host's platform.
func (s *Store) unpack(ctx context.Context, img images.Image) error {
	if s.snapshotter == "" {
		return nil
	}
	host := platforms.Default()
	if _, err := images.Manifest(ctx, s.client.ContentStore(), img.Target, host); err != nil {
		if errdefs.IsNotFound(err) {
			s.log.Debug("not unpacked: no manifest for this platform", "image", img.Name)
			return nil
		}
		return err
	}
	return client.NewImageWithPlatform(s.client, img, host).Unpack(ctx, s.snapshotter)
}

// deleteStale deletes the leases earlier imports could not delete, keeping those that still
// cannot be.
func (s *Store) deleteStale(ctx context.Context, ls leases.Manager) {
	s.mu.Lock()
	stale := s.stale
	s.stale = nil
	s.mu.Unlock()
	var kept []leases.Lease
	for _, l := range stale {
		if err := ls.Delete(ctx, l, leases.SynchronousDelete); err != nil && !errdefs.IsNotFound(err) {
			kept = append(kept, l)
			continue
		}
		s.log.Info("deleted the lease of an earlier failed import", "lease", l.ID)
	}
	s.mu.Lock()
	s.stale = append(s.stale, kept...)
	s.mu.Unlock()
}

// images walks the imported index for all platforms, labels every blob for the garbage collector
// as a child of its parent, and returns one image per named manifest of the index.
func (s *Store) images(ctx context.Context, cs content.Store, index ocispec.Descriptor) ([]images.Image, error) {
	var imgs []images.Image
	var handler images.HandlerFunc = func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		if desc.Digest != index.Digest {
			return images.Children(ctx, cs, desc)
		}
		p, err := content.ReadBlob(ctx, cs, desc)
		if err != nil {
			return nil, err
		}
		var idx ocispec.Index
		if err := json.Unmarshal(p, &idx); err != nil {
			return nil, fmt.Errorf("decode index: %w", err)
		}
		for _, m := range idx.Manifests {
			if name := imageName(m.Annotations); name != "" {
				imgs = append(imgs, images.Image{Name: name, Target: m})
			}
		}
		return idx.Manifests, nil
	}
	h := images.SetChildrenLabels(cs, images.FilterPlatforms(handler, platforms.All))
	if err := images.WalkNotEmpty(ctx, h, index); err != nil {
		return nil, fmt.Errorf("walk archive index: %w", classify(err))
	}
	return imgs, nil
}

// imageName is the image name an archive's index gives a manifest: containerd's annotation, which
// docker-save archives of both layouts carry, else an OCI reference name that is a full reference.
func imageName(a map[string]string) string {
	if n := a[images.AnnotationImageName]; n != "" {
		return n
	}
	if n := a[ocispec.AnnotationRefName]; n != "" && strings.Contains(n, "/") {
		return n
	}
	return ""
}
