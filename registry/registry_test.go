package registry_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
	"github.com/upgrade-repo/upgrade-repo/registry"
)

// fixture is a real containerd holding a release of two OCI images and a docker-save image, one
// image the release does not list, and a registry over it.
type fixture struct {
	daemon              *containerdtest.Daemon
	alpha, beta, docker preloadtest.Image
	listed              []string
}

const unlisted = "docker.io/library/stray:1"

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{daemon: containerdtest.Start(t)}
	f.alpha = preloadtest.NewImage(t, "docker.io/library/alpha:v1", preloadtest.ImageOptions{OS: "linux", Arch: "amd64", OCI: true, Own: 2, LayerSize: 300 << 10, Seed: 1})
	f.beta = preloadtest.NewImage(t, "registry.example.com/x/beta:v2", preloadtest.ImageOptions{OS: "linux", Arch: "amd64", OCI: true, Own: 1, Seed: 2})
	stray := preloadtest.NewImage(t, unlisted, preloadtest.ImageOptions{OS: "linux", Arch: "amd64", OCI: true, Own: 1, Seed: 3})
	f.docker = preloadtest.NewImage(t, "docker.io/rancher/gamma:v3", preloadtest.ImageOptions{OS: "linux", Arch: "amd64", Own: 1, Seed: 4})
	s := f.store(t, containerd.DefaultNamespace)
	_, err := s.Import(t.Context(), bytes.NewReader(preloadtest.OCIArchive(t, f.alpha, f.beta, stray)))
	require.NoError(t, err)
	_, err = s.Import(t.Context(), bytes.NewReader(preloadtest.DockerArchive(t, f.docker)))
	require.NoError(t, err)
	f.listed = []string{f.alpha.Ref, f.beta.Ref, f.docker.Ref}
	return f
}

func (f *fixture) store(t *testing.T, ns string) *containerd.Store {
	t.Helper()
	s, err := containerd.New(t.Context(), f.daemon.Socket, containerd.WithNamespace(ns), containerd.WithDirectIngest(false))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// serve starts a registry over the namespace ns of the fixture's daemon, serving the listed
// images with no pin.
func (f *fixture) serve(t *testing.T, ns string, opts ...registry.Option) *httptest.Server {
	t.Helper()
	return f.serveList(t, ns, f.listed, opts...)
}

// pinned returns the listed images pinned to their digests in the default namespace, where the
// release was imported: what the agent records for a release it preloaded.
func (f *fixture) pinned(t *testing.T) []string {
	t.Helper()
	s := f.store(t, containerd.DefaultNamespace)
	var out []string
	for _, ref := range f.listed {
		d, err := s.Resolve(t.Context(), ref)
		require.NoError(t, err)
		out = append(out, ref+"@"+d.Digest)
	}
	return out
}

// serveList starts a registry over the namespace ns of the fixture's daemon, serving the image
// list entries.
func (f *fixture) serveList(t *testing.T, ns string, entries []string, opts ...registry.Option) *httptest.Server {
	t.Helper()
	var lists registry.Lists
	lists.Set("v1.5.2", entries)
	h, err := registry.NewHandler(f.store(t, ns), &lists, opts...)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func pull(t *testing.T, srv *httptest.Server, ref string) (v1.Image, error) {
	t.Helper()
	r, err := name.ParseReference(strings.TrimPrefix(srv.URL, "http://")+"/"+ref, name.Insecure)
	require.NoError(t, err)
	return remote.Image(r, remote.WithContext(t.Context()))
}

func TestRegistryRealContainerd(t *testing.T) {
	f := newFixture(t)
	srv := f.serve(t, containerd.DefaultNamespace)

	t.Run("pulls release images byte for byte", func(t *testing.T) {
		for _, im := range []preloadtest.Image{f.alpha, f.beta} {
			ref := strings.TrimPrefix(im.Ref, "docker.io/")
			got, err := pull(t, srv, ref)
			require.NoError(t, err, ref)
			want, err := im.Img.Digest()
			require.NoError(t, err)
			d, err := got.Digest()
			require.NoError(t, err)
			require.Equal(t, want, d, ref)
			require.NoError(t, validate.Image(got), ref)
		}
		// A docker-save image is served as containerd stored it, every blob checked by the client.
		got, err := pull(t, srv, "rancher/gamma:v3")
		require.NoError(t, err)
		require.NoError(t, validate.Image(got))
	})

	t.Run("the mirror's ns parameter names the registry", func(t *testing.T) {
		resp, err := http.Head(srv.URL + "/v2/x/beta/manifests/v2?ns=registry.example.com")
		require.NoError(t, err)
		resp.Body.Close()
		want, err := f.beta.Img.Digest()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, want.String(), resp.Header.Get("Docker-Content-Digest"))
		require.Equal(t, "application/vnd.oci.image.manifest.v1+json", resp.Header.Get("Content-Type"))
		m, err := f.beta.Img.RawManifest()
		require.NoError(t, err)
		require.Equal(t, int64(len(m)), resp.ContentLength)
	})

	stray := preloadtest.NewImage(t, unlisted, preloadtest.ImageOptions{OS: "linux", Arch: "amd64", OCI: true, Own: 1, Seed: 3})
	strayDigest, err := stray.Img.Digest()
	require.NoError(t, err)
	strayLayers, err := stray.Img.Layers()
	require.NoError(t, err)
	strayLayer, err := strayLayers[0].Digest()
	require.NoError(t, err)
	for _, tc := range []struct {
		name, method, path string
		status             int
		code               string
	}{
		{"the API answers", http.MethodGet, "/v2/", http.StatusOK, ""},
		{"an image containerd holds but no list names", http.MethodGet, "/v2/library/stray/manifests/1", http.StatusNotFound, "MANIFEST_UNKNOWN"},
		{"the unlisted image by digest", http.MethodGet, "/v2/library/stray/manifests/" + strayDigest.String(), http.StatusNotFound, "MANIFEST_UNKNOWN"},
		{"a blob of the unlisted image", http.MethodGet, "/v2/library/stray/blobs/" + strayLayer.String(), http.StatusNotFound, "BLOB_UNKNOWN"},
		{"a HEAD of the unlisted image", http.MethodHead, "/v2/library/stray/manifests/1", http.StatusNotFound, ""},
		{"a listed name under another registry", http.MethodGet, "/v2/library/alpha/manifests/v1?ns=quay.io", http.StatusNotFound, "MANIFEST_UNKNOWN"},
		{"a malformed digest", http.MethodGet, "/v2/library/alpha/blobs/sha256:12", http.StatusNotFound, "DIGEST_INVALID"},
		{"a malformed name", http.MethodGet, "/v2/Library/../alpha/manifests/v1", http.StatusNotFound, "NAME_INVALID"},
		{"a write", http.MethodPut, "/v2/library/alpha/manifests/v1", http.StatusMethodNotAllowed, "UNSUPPORTED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tc.method, srv.URL+tc.path, nil)
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode)
			if tc.code != "" {
				var body struct {
					Errors []struct{ Code, Message string }
				}
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
				require.Len(t, body.Errors, 1)
				require.Equal(t, tc.code, body.Errors[0].Code)
			}
		})
	}

	t.Run("blob HEAD and ranges", func(t *testing.T) {
		layers, err := f.alpha.Img.Layers()
		require.NoError(t, err)
		ld, err := layers[1].Digest()
		require.NoError(t, err)
		rc, err := layers[1].Compressed()
		require.NoError(t, err)
		whole, err := io.ReadAll(rc)
		require.NoError(t, err)
		url := srv.URL + "/v2/library/alpha/blobs/" + ld.String()

		resp, err := http.Head(url)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, int64(len(whole)), resp.ContentLength)
		require.Equal(t, ld.String(), resp.Header.Get("Docker-Content-Digest"))

		for _, tc := range []struct {
			rng      string
			from, to int
		}{
			{"bytes=0-99", 0, 100},
			{"bytes=1000-", 1000, len(whole)},
			{"bytes=-17", len(whole) - 17, len(whole)},
		} {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
			require.NoError(t, err)
			req.Header.Set("Range", tc.rng)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusPartialContent, resp.StatusCode, tc.rng)
			require.Equal(t, whole[tc.from:tc.to], got, tc.rng)
		}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		require.NoError(t, err)
		req.Header.Set("Range", "bytes=99999999-")
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusRequestedRangeNotSatisfiable, resp.StatusCode)
	})

	t.Run("a peer's request needs the ring's token", func(t *testing.T) {
		srv := f.serve(t, containerd.DefaultNamespace, registry.WithToken("ring"))
		for _, tc := range []struct {
			auth   string
			status int
		}{{"", http.StatusUnauthorized}, {"Bearer other", http.StatusForbidden}, {"Bearer ring", http.StatusOK}} {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/v2/library/alpha/manifests/v1", nil)
			require.NoError(t, err)
			req.Header.Set(registry.PeerHeader, "1")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode, tc.auth)
		}
	})
}

// liar answers every /v2/ request with bytes that are not what was asked for.
func liar(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[]}`)
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Header().Set("Docker-Content-Digest", "sha256:"+strings.Repeat("ab", 32))
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRegistryFromPeers(t *testing.T) {
	f := newFixture(t)
	const token = "ring"
	honest := f.serve(t, containerd.DefaultNamespace, registry.WithToken(token))
	bad := liar(t)
	members := &peer.StaticMembers{Local: "a", List: []peer.Member{
		{Name: "a", Addr: "127.0.0.1:1"},
		{Name: "b", Addr: strings.TrimPrefix(bad.URL, "http://")},
		{Name: "c", Addr: strings.TrimPrefix(honest.URL, "http://")},
	}}
	reg := prometheus.NewRegistry()
	m, err := registry.NewMetrics(reg)
	require.NoError(t, err)
	peers, err := registry.NewPeers(members, registry.PeersConfig{Token: token, Dir: t.TempDir(), Metrics: m})
	require.NoError(t, err)
	// Node a's containerd namespace is empty: it holds none of the release's images.
	lacking := f.serveList(t, "empty", f.pinned(t), registry.WithPeers(peers), registry.WithToken(token), registry.WithMetrics(m))

	got, err := pull(t, lacking, "library/alpha:v1")
	require.NoError(t, err)
	want, err := f.alpha.Img.Digest()
	require.NoError(t, err)
	d, err := got.Digest()
	require.NoError(t, err)
	require.Equal(t, want, d)
	require.NoError(t, validate.Image(got))

	size := int64(0)
	layers, err := f.alpha.Img.Layers()
	require.NoError(t, err)
	for _, l := range layers {
		n, err := l.Size()
		require.NoError(t, err)
		size += n
	}
	cfg, err := f.alpha.Img.RawConfigFile()
	require.NoError(t, err)
	// validate.Image reads every layer twice (compressed and uncompressed) and the config once;
	// every byte came from the peer, and each answer of the liar was refused.
	require.GreaterOrEqual(t, testutil.ToFloat64(m.SentBytes("peer")), float64(size+int64(len(cfg))))
	require.Zero(t, testutil.ToFloat64(m.SentBytes("local")))
	require.Positive(t, testutil.ToFloat64(m.Refusals()))

	t.Run("a HEAD of a blob the node lacks moves none of its bytes", func(t *testing.T) {
		l := layers[0]
		dg, err := l.Digest()
		require.NoError(t, err)
		n, err := l.Size()
		require.NoError(t, err)
		received := testutil.ToFloat64(m.ReceivedBytes())
		resp, err := http.Head(lacking.URL + "/v2/library/alpha/blobs/" + dg.String())
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, n, resp.ContentLength)
		require.Equal(t, dg.String(), resp.Header.Get("Docker-Content-Digest"))
		require.Equal(t, received, testutil.ToFloat64(m.ReceivedBytes()), "bytes received from peers for a HEAD")

		resp, err = http.Head(lacking.URL + "/v2/library/alpha/blobs/sha256:" + strings.Repeat("0", 64))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "a digest of no listed image")
	})

	t.Run("an unlisted image is not asked of peers", func(t *testing.T) {
		_, err := pull(t, lacking, "library/stray:1")
		require.Error(t, err)
		require.Contains(t, err.Error(), "MANIFEST_UNKNOWN")
	})

	t.Run("with only the liar, nothing is served", func(t *testing.T) {
		only := &peer.StaticMembers{Local: "a", List: []peer.Member{{Name: "b", Addr: strings.TrimPrefix(bad.URL, "http://")}}}
		p, err := registry.NewPeers(only, registry.PeersConfig{Token: token, Dir: t.TempDir()})
		require.NoError(t, err)
		srv := f.serveList(t, "empty2", f.pinned(t), registry.WithPeers(p))
		_, err = pull(t, srv, "library/alpha:v1")
		require.Error(t, err)
	})
}

// counted is a Content of one image whose blobs count the reads made of them.
type counted struct {
	ref, manifest string
	blobs         map[string][]byte
	mu            sync.Mutex
	reads         map[string]int
}

func newCounted(t *testing.T, ref string, layer []byte) *counted {
	t.Helper()
	m, cfg := oneLayerImage(t, ref, layer)
	return &counted{ref: ref, manifest: sha(m), reads: map[string]int{},
		blobs: map[string][]byte{sha(m): m, sha(cfg): cfg, sha(layer): layer}}
}

func (c *counted) Resolve(_ context.Context, ref string) (registry.Descriptor, error) {
	if ref != c.ref {
		return registry.Descriptor{}, registry.ErrNotFound
	}
	return registry.Descriptor{MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: c.manifest, Size: int64(len(c.blobs[c.manifest]))}, nil
}

func (c *counted) Open(_ context.Context, dgst string) (registry.Blob, error) {
	b, ok := c.blobs[dgst]
	if !ok {
		return nil, registry.ErrNotFound
	}
	return countedBlob{Reader: bytes.NewReader(b), c: c, dgst: dgst}, nil
}

type countedBlob struct {
	*bytes.Reader
	c    *counted
	dgst string
}

func (b countedBlob) ReadAt(p []byte, off int64) (int, error) {
	b.c.mu.Lock()
	b.c.reads[b.dgst]++
	b.c.mu.Unlock()
	return b.Reader.ReadAt(p, off)
}

func (countedBlob) Close() error { return nil }

// A blob of the node's store is read through containerd's content service, one request per read:
// a large blob is sent in reads of 1 MiB, not in io.Copy's 32 KiB.
func TestBlobsAreReadInLargePieces(t *testing.T) {
	t.Parallel()
	layer := make([]byte, 5<<20+1)
	_, err := rand.Read(layer)
	require.NoError(t, err)
	c := newCounted(t, "docker.io/library/big:v1", layer)
	var lists registry.Lists
	lists.Set("v1", []string{c.ref})
	h, err := registry.NewHandler(c, &lists)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ld := fmt.Sprintf("sha256:%x", sha256.Sum256(layer))
	for _, tc := range []struct {
		name, rng string
		want      []byte
	}{
		{name: "whole", want: layer},
		{name: "range", rng: "bytes=1-", want: layer[1:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.mu.Lock()
			c.reads[ld] = 0
			c.mu.Unlock()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/v2/library/big/blobs/"+ld, nil)
			require.NoError(t, err)
			if tc.rng != "" {
				req.Header.Set("Range", tc.rng)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			c.mu.Lock()
			defer c.mu.Unlock()
			require.LessOrEqual(t, c.reads[ld], 7, "reads of a %d-byte blob", len(tc.want))
		})
	}
}
