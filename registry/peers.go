package registry

import (
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

	"github.com/upgrade-repo/upgrade-repo/peer"
)

// Peers fetches what the node lacks from the other members of the gossip ring, asking each in turn
// (sorted by name) for the same path of its /v2/ API. Nothing a peer sends is passed on before
// all of it matched its digest. Create it with NewPeers; it is safe for concurrent use.
type Peers struct {
	members peer.Membership
	client  *http.Client
	token   string
	dir     string
	log     *slog.Logger
	metrics *Metrics
}

// PeersConfig is what Peers is told besides the ring's membership.
type PeersConfig struct {
	// Client sends the requests (nil: http.DefaultClient). It should bound how long a peer may
	// stay silent, not how long a large blob takes.
	Client *http.Client
	// Token is the ring's bearer token sent to peers (empty: an open ring).
	Token string
	// Dir holds the blobs being received until they are verified and sent on (empty: the
	// system's temporary directory). Each is removed once sent.
	Dir string
	// Log receives the refusals of peers; nil discards.
	Log *slog.Logger
	// Metrics, when set, count the bytes received and the peers refused.
	Metrics *Metrics
}

// NewPeers returns Peers over the ring's membership.
func NewPeers(members peer.Membership, cfg PeersConfig) (*Peers, error) {
	if members == nil {
		return nil, errors.New("registry peers: a membership is required")
	}
	p := &Peers{members: members, client: cfg.Client, token: cfg.Token, dir: cfg.Dir, log: cfg.Log, metrics: cfg.Metrics}
	if p.client == nil {
		p.client = http.DefaultClient
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

// get asks m for path, as a peer.
func (p *Peers) get(ctx context.Context, m peer.Member, path string) (*http.Response, error) {
	return p.do(ctx, http.MethodGet, m, path)
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

// manifest fetches the manifest at path from the first peer that has it and whose bytes match
// want (when empty, the Docker-Content-Digest the peer sends). It returns the body and its media
// type (the peer's Content-Type, else mediaType); ErrNotFound when no peer has it.
func (p *Peers) manifest(ctx context.Context, path, want, mediaType string) ([]byte, string, error) {
	for _, m := range p.others() {
		body, mt, err := func() ([]byte, string, error) {
			resp, err := p.get(ctx, m, path)
			if err != nil {
				return nil, "", err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(io.LimitReader(resp.Body, maxManifest+1))
			if err != nil {
				return nil, "", err
			}
			if len(body) > maxManifest {
				return nil, "", fmt.Errorf("manifest over %d bytes", maxManifest)
			}
			expect := want
			if expect == "" {
				expect = resp.Header.Get("Docker-Content-Digest")
				if !digestRE.MatchString(expect) {
					return nil, "", fmt.Errorf("Docker-Content-Digest %q: want sha256:<64 hex digits>", expect)
				}
			}
			if got := digestOf(body); got != expect {
				return nil, "", fmt.Errorf("%w: sent %s for %s", peer.ErrVerification, got, expect)
			}
			mt := mediaType
			if ct, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil && strings.Contains(ct, "manifest") {
				mt = ct
			}
			return body, mt, nil
		}()
		if err == nil {
			p.metrics.received(int64(len(body)))
			return body, mt, nil
		}
		if ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
		p.refuse(m, path, err)
	}
	return nil, "", fmt.Errorf("manifest %s: no peer holds it: %w", path, ErrNotFound)
}

// blob fetches the blob want at path from the first peer that has it and whose bytes match want,
// into a temporary file that the returned Blob removes when closed; ErrNotFound when no peer has it.
func (p *Peers) blob(ctx context.Context, path, want string) (Blob, error) {
	for _, m := range p.others() {
		f, err := p.receive(ctx, m, path, want)
		if err == nil {
			return f, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		p.refuse(m, path, err)
	}
	return nil, fmt.Errorf("blob %s: no peer holds it: %w", want, ErrNotFound)
}

// blobSize asks the peers in turn, with HEAD, for the size of the blob want at path, so that a
// HEAD of a blob the node lacks moves none of its bytes. Nothing is verified (no byte is sent): a
// GET still fetches and checks the blob. It returns ErrNotFound when no peer has it.
func (p *Peers) blobSize(ctx context.Context, path, want string) (int64, error) {
	for _, m := range p.others() {
		resp, err := p.do(ctx, http.MethodHead, m, path)
		if err == nil {
			_ = resp.Body.Close()
			if d := resp.Header.Get("Docker-Content-Digest"); d != "" && d != want {
				err = fmt.Errorf("%w: answered for %s, asked %s", peer.ErrVerification, d, want)
			} else if resp.ContentLength < 0 {
				err = errors.New("answered without a Content-Length")
			} else {
				return resp.ContentLength, nil
			}
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		p.refuse(m, path, err)
	}
	return 0, fmt.Errorf("blob %s: no peer holds it: %w", want, ErrNotFound)
}

func (p *Peers) receive(ctx context.Context, m peer.Member, path, want string) (Blob, error) {
	resp, err := p.get(ctx, m, path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	f, err := os.CreateTemp(p.dir, "blob-")
	if err != nil {
		return nil, fmt.Errorf("receive blob %s: %w", want, err)
	}
	tmp := &tempBlob{File: f}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), resp.Body)
	p.metrics.received(n)
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = fmt.Errorf("sent %d of %d bytes", n, resp.ContentLength)
	}
	if err == nil {
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != want {
			err = fmt.Errorf("%w: sent %s for %s", peer.ErrVerification, got, want)
		}
	}
	if err != nil {
		_ = tmp.Close()
		return nil, err
	}
	tmp.size = n
	return tmp, nil
}

// tempBlob is a verified blob received from a peer, in a file removed on Close.
type tempBlob struct {
	*os.File
	size int64
}

func (b *tempBlob) Size() int64 { return b.size }

func (b *tempBlob) Close() error {
	err := b.File.Close()
	if rerr := os.Remove(b.Name()); err == nil {
		err = rerr
	}
	return err
}
