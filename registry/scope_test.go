package registry_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload/containerd"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
	"github.com/upgrade-repo/upgrade-repo/registry"
)

// memContent is a Content of images held in memory that counts the store's resolves.
type memContent struct {
	mu       sync.Mutex
	images   map[string]string // ref → manifest digest
	blobs    map[string][]byte
	resolves atomic.Int64
}

func newMemContent() *memContent {
	return &memContent{images: map[string]string{}, blobs: map[string][]byte{}}
}

func sha(p []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(p)) }

// oneLayerImage returns the manifest and config of an image ref of one layer.
func oneLayerImage(t testing.TB, ref string, layer []byte) (manifest, config []byte) {
	t.Helper()
	cfg := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]},"ref":"` + ref + `"}`)
	m, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(cfg), "size": len(cfg)},
		"layers":        []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": sha(layer), "size": len(layer)}},
	})
	require.NoError(t, err)
	return m, cfg
}

// add stores an image ref of one layer and returns its manifest's digest and its layer's.
func (c *memContent) add(t testing.TB, ref string, layer []byte) (manifest, layerDigest string) {
	t.Helper()
	m, cfg := oneLayerImage(t, ref, layer)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.images[ref] = sha(m)
	c.blobs[sha(m)], c.blobs[sha(cfg)], c.blobs[sha(layer)] = m, cfg, layer
	return sha(m), sha(layer)
}

func (c *memContent) Resolve(_ context.Context, ref string) (registry.Descriptor, error) {
	c.resolves.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.images[ref]
	if !ok {
		return registry.Descriptor{}, registry.ErrNotFound
	}
	return registry.Descriptor{MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: d, Size: int64(len(c.blobs[d]))}, nil
}

func (c *memContent) Open(_ context.Context, dgst string) (registry.Blob, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.blobs[dgst]
	if !ok {
		return nil, registry.ErrNotFound
	}
	return memBlob{bytes.NewReader(b)}, nil
}

type memBlob struct{ *bytes.Reader }

func (memBlob) Close() error { return nil }

func randomDigest(t testing.TB) string {
	t.Helper()
	var b [32]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return fmt.Sprintf("sha256:%x", b)
}

func status(t testing.TB, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// Digests outside the release's images do not make the registry walk the store each: one walk
// per change of the catalog, whatever the misses and however many arrive at once.
func TestMissesWalkTheStoreOnce(t *testing.T) {
	t.Parallel()
	const images = 40
	for _, tc := range []struct {
		name       string
		misses     int
		concurrent bool
	}{
		{name: "one after another", misses: 200},
		{name: "all at once", misses: 400, concurrent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newMemContent()
			var lists registry.Lists
			var refs []string
			for i := range images {
				ref := fmt.Sprintf("docker.io/library/img%d:v1", i)
				c.add(t, ref, []byte(ref))
				refs = append(refs, ref)
			}
			lists.Set("v1", refs)
			h, err := registry.NewHandler(c, &lists)
			require.NoError(t, err)
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)

			var wg sync.WaitGroup
			for range tc.misses {
				url := srv.URL + "/v2/library/other/blobs/" + randomDigest(t)
				if !tc.concurrent {
					require.Equal(t, http.StatusNotFound, status(t, url))
					continue
				}
				wg.Go(func() {
					resp, err := http.Get(url)
					if err == nil {
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
			require.LessOrEqual(t, c.resolves.Load(), int64(images), "resolves for %d misses", tc.misses)

			// A change of the release's images is walked at once: the new image is served.
			_, layer := c.add(t, "docker.io/library/late:v1", []byte("late"))
			lists.Set("v2", []string{"docker.io/library/late:v1"})
			require.Equal(t, http.StatusOK, status(t, srv.URL+"/v2/library/late/blobs/"+layer))
			require.LessOrEqual(t, c.resolves.Load(), int64(2*images+1))
		})
	}
}

// BenchmarkMisses measures 400 concurrent requests for blobs of no release image against a real
// containerd holding a release of 40 images: what a pull of an image the release does not hold
// costs, containerd asking its mirror first for every blob.
func BenchmarkMisses(b *testing.B) {
	d := containerdtest.Start(b)
	s, err := containerd.New(b.Context(), d.Socket, containerd.WithDirectIngest(false))
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	var (
		ims  []preloadtest.Image
		refs []string
	)
	for i := range 40 {
		ref := fmt.Sprintf("docker.io/library/img%d:v1", i)
		ims = append(ims, preloadtest.NewImage(b, ref, preloadtest.ImageOptions{OS: "linux", Arch: "amd64", OCI: true, Own: 1, Seed: int64(i + 1)}))
		refs = append(refs, ref)
	}
	_, err = s.Import(b.Context(), bytes.NewReader(preloadtest.OCIArchive(b, ims...)))
	require.NoError(b, err)
	var lists registry.Lists
	lists.Set("v1", refs)
	h, err := registry.NewHandler(s, &lists)
	require.NoError(b, err)
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 400}}
	b.ResetTimer()
	for b.Loop() {
		var wg sync.WaitGroup
		for range 400 {
			url := srv.URL + "/v2/library/other/blobs/" + randomDigest(b)
			wg.Go(func() {
				resp, err := client.Get(url)
				if err == nil {
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
	}
}
