package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/upgrade-repo/upgrade-repo/internal/idle"
	"github.com/upgrade-repo/upgrade-repo/peer"
)

// Peers fetches what the node lacks from the other members of the gossip ring, asking each in turn
// (sorted by name), by digest only, for the same path of its /v2/ API. Every answer is bounded by
// the size its descriptor gives (a manifest of unknown size by maxManifest) and by how long the
// peer may stay silent; nothing a peer sends is passed on before all of it matched its digest.
// Concurrent requests for one blob share one fetch. Create it with NewPeers; it is safe for
// concurrent use.
type Peers struct {
	members peer.Membership
	client  *http.Client
	token   string
	dir     string
	idle    time.Duration
	log     *slog.Logger
	metrics *Metrics

	mu      sync.Mutex
	flights map[string]*blobFlight
}

// DefaultPeerIdle is how long a peer may stay silent, by default, before it is left for the next.
const DefaultPeerIdle = 30 * time.Second

// PeersConfig is what Peers is told besides the ring's membership.
type PeersConfig struct {
	// Client sends the requests (nil: http.DefaultClient). Peers bounds how long a peer may stay
	// silent itself (Idle): the client need not, and should not bound how long a large blob takes.
	Client *http.Client
	// Token is the ring's bearer token sent to peers (empty: an open ring).
	Token string
	// Dir holds the blobs being received (empty: the system's temporary directory). Each file
	// is unlinked as soon as it is created: its space is freed when the last request that reads
	// it ends, or when the process does.
	Dir string
	// Idle is how long a peer may keep a request waiting, for its answer or within its body,
	// before it is abandoned and the next peer asked (0: DefaultPeerIdle; negative: no bound).
	Idle time.Duration
	// Log receives the refusals of peers; nil discards.
	Log *slog.Logger
	// Metrics, when set, count the bytes received, the peers refused and the fetches of blobs.
	Metrics *Metrics
}

// NewPeers returns Peers over the ring's membership.
func NewPeers(members peer.Membership, cfg PeersConfig) (*Peers, error) {
	if members == nil {
		return nil, errors.New("registry peers: a membership is required")
	}
	p := &Peers{members: members, client: cfg.Client, token: cfg.Token, dir: cfg.Dir, idle: cfg.Idle, log: cfg.Log, metrics: cfg.Metrics,
		flights: map[string]*blobFlight{}}
	if p.client == nil {
		p.client = http.DefaultClient
	}
	if p.idle == 0 {
		p.idle = DefaultPeerIdle
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p, nil
}

// others returns the members to ask: every one but the local node, sorted by name.
func (p *Peers) others() []peer.Member {
	local := p.members.LocalName()
	ms := slices.DeleteFunc(p.members.Members(), func(m peer.Member) bool { return m.Name == local || m.Addr == "" })
	slices.SortFunc(ms, func(a, b peer.Member) int { return strings.Compare(a.Name, b.Name) })
	return ms
}

// do sends m a request of method for path, as a peer, and returns its answer when it is 200.
func (p *Peers) do(ctx context.Context, method string, m peer.Member, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+m.Addr+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(PeerHeader, "1")
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("answered %s", resp.Status)
	}
	return resp, nil
}

// refuse logs and counts a peer whose answer cannot be used.
func (p *Peers) refuse(m peer.Member, path string, err error) {
	if errors.Is(err, ErrNotFound) {
		return
	}
	p.log.Warn("peer refused for the release image registry", "peer", m.Name, "path", path, "err", err)
	p.metrics.refused()
}

// fetch asks m for path and copies its answer to w: exactly size bytes when size is known (not
// negative), else at most limit. A peer that announces or sends another length, or stays silent
// longer than the idle bound, is refused; no byte past the bound is written to w. It returns
// the answer's header.
func (p *Peers) fetch(ctx context.Context, m peer.Member, path string, size, limit int64, w io.Writer) (http.Header, error) {
	wctx, wd := idle.Watch(ctx, p.idle)
	defer wd.Stop()
	resp, err := p.do(wctx, http.MethodGet, m, path) //nolint:bodyclose // closed through body, the watchdog's wrapper of it
	if err != nil {
		return nil, wd.Cause(err)
	}
	body := wd.Body(resp.Body)
	defer body.Close()
	if size >= 0 {
		if resp.ContentLength >= 0 && resp.ContentLength != size {
			return nil, fmt.Errorf("%w: announced %d bytes for %d", peer.ErrVerification, resp.ContentLength, size)
		}
		limit = size
	}
	n, err := io.Copy(w, io.LimitReader(body, limit))
	p.metrics.received(n)
	if err != nil {
		return nil, err
	}
	if size >= 0 && n < size {
		return nil, fmt.Errorf("sent %d of %d bytes", n, size)
	}
	// One byte past the bound is read, never written: a peer that has more to send is refused.
	var extra [1]byte
	if k, _ := io.ReadFull(body, extra[:]); k > 0 {
		return nil, fmt.Errorf("%w: sent more than %d bytes", peer.ErrVerification, limit)
	}
	return resp.Header, nil
}

// manifest fetches the manifest want at path from the first peer that has it and whose bytes
// match want, at most size bytes (when known, else maxManifest). It returns the body and its
// media type (the peer's Content-Type, else mediaType); ErrNotFound when no peer has it.
func (p *Peers) manifest(ctx context.Context, path, want, mediaType string, size int64) ([]byte, string, error) {
	if size > maxManifest {
		return nil, "", fmt.Errorf("manifest %s: %d bytes, over the %d a manifest may have", want, size, maxManifest)
	}
	for _, m := range p.others() {
		var buf bytes.Buffer
		hdr, err := p.fetch(ctx, m, path, size, maxManifest, &buf)
		if err == nil {
			if got := digestOf(buf.Bytes()); got != want {
				err = fmt.Errorf("%w: sent %s for %s", peer.ErrVerification, got, want)
			}
		}
		if err == nil {
			mt := mediaType
			if ct, _, err := mime.ParseMediaType(hdr.Get("Content-Type")); err == nil && strings.Contains(ct, "manifest") {
				mt = ct
			}
			return buf.Bytes(), mt, nil
		}
		if ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
		p.refuse(m, path, err)
	}
	return nil, "", fmt.Errorf("manifest %s: no peer holds it: %w", want, ErrNotFound)
}

// manifestByTag asks the peers in turn for the manifest at path, a tag of an image the release
// pins by its config, and returns the first answer that accept takes: the body (at most
// maxManifest bytes), the digest its bytes hash to (a Docker-Content-Digest that says otherwise
// refuses the peer), its media type and what accept returned. A peer does not say what the tag is:
// accept checks the config the manifest names against the release's. It returns ErrNotFound when
// no peer's answer is taken.
func (p *Peers) manifestByTag(ctx context.Context, path string, accept func(body []byte, mediaType string) (string, bool)) (dgst string, body []byte, mediaType, cfg string, err error) {
	for _, m := range p.others() {
		var buf bytes.Buffer
		hdr, err := p.fetch(ctx, m, path, -1, maxManifest, &buf)
		if err == nil {
			dgst = digestOf(buf.Bytes())
			mediaType = ""
			if ct, _, perr := mime.ParseMediaType(hdr.Get("Content-Type")); perr == nil && strings.Contains(ct, "manifest") {
				mediaType = ct
			}
			var ok bool
			switch cfg, ok = accept(buf.Bytes(), mediaType); {
			case hdr.Get("Docker-Content-Digest") != "" && hdr.Get("Docker-Content-Digest") != dgst:
				err = fmt.Errorf("%w: sent %s as %s", peer.ErrVerification, dgst, hdr.Get("Docker-Content-Digest"))
			case !ok:
				err = fmt.Errorf("%w: manifest %s names config %q, none the release names", peer.ErrVerification, dgst, cfg)
			}
		}
		if err == nil {
			return dgst, buf.Bytes(), mediaType, cfg, nil
		}
		if ctx.Err() != nil {
			return "", nil, "", "", ctx.Err()
		}
		p.refuse(m, path, err)
	}
	return "", nil, "", "", fmt.Errorf("manifest %s: no peer holds the release's image: %w", path, ErrNotFound)
}

// blobFlight is one fetch of a blob from the peers, shared by the requests that wait for it.
type blobFlight struct {
	dgst   string
	done   chan struct{}
	cancel context.CancelFunc
	// Guarded by Peers.mu: the requests holding the flight, whether it ended, and its result.
	refs  int
	ended bool
	f     *os.File
	size  int64
	err   error
}

// blob fetches the blob want, of size bytes (when known, else at most maxManifest: a pinned
// manifest asked as a blob), at path from the first peer that has it and whose bytes match want.
// Concurrent calls for one digest share one fetch, which ends early only when every caller left.
// The caller closes the returned Blob; ErrNotFound when no peer has it.
func (p *Peers) blob(ctx context.Context, path, want string, size int64) (Blob, error) {
	p.mu.Lock()
	fl, ok := p.flights[want]
	if ok {
		p.metrics.fetch("joined")
	} else {
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		fl = &blobFlight{dgst: want, done: make(chan struct{}), cancel: cancel}
		p.flights[want] = fl
		p.metrics.fetch("started")
		go p.run(fctx, fl, path, size)
	}
	fl.refs++
	p.mu.Unlock()
	select {
	case <-fl.done:
	case <-ctx.Done():
		p.release(fl)
		return nil, ctx.Err()
	}
	if fl.err != nil {
		p.release(fl)
		return nil, fl.err
	}
	return &sharedBlob{p: p, fl: fl}, nil
}

// run fetches fl's blob and hands the result to the requests that hold fl.
func (p *Peers) run(ctx context.Context, fl *blobFlight, path string, size int64) {
	defer fl.cancel()
	f, n, err := p.receive(ctx, path, fl.dgst, size)
	p.mu.Lock()
	fl.f, fl.size, fl.err, fl.ended = f, n, err, true
	if p.flights[fl.dgst] == fl {
		delete(p.flights, fl.dgst)
	}
	if fl.refs == 0 && f != nil {
		_ = f.Close()
	}
	p.mu.Unlock()
	close(fl.done)
}

// release drops one request's hold on fl: the last one closes the received file, or stops a
// fetch still under way (a later request starts its own).
func (p *Peers) release(fl *blobFlight) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fl.refs--
	if fl.refs > 0 {
		return
	}
	if !fl.ended {
		fl.cancel()
		if p.flights[fl.dgst] == fl {
			delete(p.flights, fl.dgst)
		}
		return
	}
	if fl.f != nil {
		_ = fl.f.Close()
	}
}

// receive fetches the blob want into an unlinked temporary file, asking the peers in turn, and
// returns the file and its size once its bytes matched want.
func (p *Peers) receive(ctx context.Context, path, want string, size int64) (*os.File, int64, error) {
	f, err := os.CreateTemp(p.dir, "blob-")
	if err != nil {
		return nil, 0, fmt.Errorf("receive blob %s: %w", want, err)
	}
	// Unlinked at once: nothing is left behind, whatever happens to the process.
	if err := os.Remove(f.Name()); err != nil {
		_ = f.Close()
		return nil, 0, fmt.Errorf("receive blob %s: %w", want, err)
	}
	for _, m := range p.others() {
		n, err := p.receiveFrom(ctx, m, f, path, want, size)
		if err == nil {
			return f, n, nil
		}
		if ctx.Err() != nil {
			_ = f.Close()
			return nil, 0, ctx.Err()
		}
		p.refuse(m, path, err)
	}
	_ = f.Close()
	return nil, 0, fmt.Errorf("blob %s: no peer holds it: %w", want, ErrNotFound)
}

// receiveFrom fetches the blob want from m into f, replacing what f held.
func (p *Peers) receiveFrom(ctx context.Context, m peer.Member, f *os.File, path, want string, size int64) (int64, error) {
	if err := f.Truncate(0); err != nil {
		return 0, fmt.Errorf("receive blob %s: %w", want, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, fmt.Errorf("receive blob %s: %w", want, err)
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	if _, err := p.fetch(ctx, m, path, size, maxManifest, cw); err != nil {
		return 0, err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != want {
		return 0, fmt.Errorf("%w: sent %s for %s", peer.ErrVerification, got, want)
	}
	return cw.n, nil
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// blobSize asks the peers in turn, with HEAD, for the size of the blob want at path, so that a
// HEAD of a blob the node lacks moves none of its bytes. Nothing is verified (no byte is sent)
// but the size, against size when known: a GET still fetches and checks the blob. It returns
// ErrNotFound when no peer has it.
func (p *Peers) blobSize(ctx context.Context, path, want string, size int64) (int64, error) {
	for _, m := range p.others() {
		wctx, wd := idle.Watch(ctx, p.idle)
		resp, err := p.do(wctx, http.MethodHead, m, path)
		err = wd.Cause(err)
		if err == nil {
			_ = resp.Body.Close()
			if d := resp.Header.Get("Docker-Content-Digest"); d != "" && d != want {
				err = fmt.Errorf("%w: answered for %s, asked %s", peer.ErrVerification, d, want)
			} else if resp.ContentLength < 0 {
				err = errors.New("answered without a Content-Length")
			} else if size >= 0 && resp.ContentLength != size {
				err = fmt.Errorf("%w: announced %d bytes for %d", peer.ErrVerification, resp.ContentLength, size)
			}
		}
		wd.Stop()
		if err == nil {
			return resp.ContentLength, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		p.refuse(m, path, err)
	}
	return 0, fmt.Errorf("blob %s: no peer holds it: %w", want, ErrNotFound)
}

// sharedBlob is one request's hold on a verified blob received from peers.
type sharedBlob struct {
	p    *Peers
	fl   *blobFlight
	once sync.Once
}

func (b *sharedBlob) ReadAt(p []byte, off int64) (int, error) { return b.fl.f.ReadAt(p, off) }

func (b *sharedBlob) Size() int64 { return b.fl.size }

func (b *sharedBlob) Close() error {
	b.once.Do(func() { b.p.release(b.fl) })
	return nil
}
