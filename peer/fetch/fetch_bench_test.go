package fetch_test

import (
	"crypto/rand"
	"crypto/sha512"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/cache"
	"github.com/upgrade-repo/upgrade-repo/peer/fetch"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
)

// BenchmarkOriginFetch downloads an ISO of 256 MiB from an origin on loopback, which serves a
// file with ranges, into an empty cache: the fetcher of a lone node (probe, 4 MiB chunks, a sha256
// per chunk, the sha512 of the whole, the record), against a plain GET copied to a file and then
// hashed with sha512, as an operator does with curl and sha512sum.
func BenchmarkOriginFetch(b *testing.B) {
	const size = 256 << 20
	dir := b.TempDir()
	src := filepath.Join(dir, "origin.iso")
	f, err := os.Create(src)
	require.NoError(b, err)
	h := sha512.New()
	_, err = io.Copy(io.MultiWriter(f, h), io.LimitReader(rand.Reader, size))
	require.NoError(b, err)
	require.NoError(b, f.Close())
	sha := hex.EncodeToString(h.Sum(nil))
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, src)
	}))
	b.Cleanup(origin.Close)
	url := origin.URL + "/release.iso"
	client := &http.Client{Transport: &http.Transport{}}
	b.Cleanup(client.CloseIdleConnections)

	b.Run("fetcher", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			cacheDir := b.TempDir()
			d := inventory.NewDirectory("lone")
			m, err := peer.NewMetrics(prometheus.NewRegistry())
			require.NoError(b, err)
			store := cache.NewStore(d)
			fetcher, err := fetch.NewFetcher(testLog(), d, &peer.StaticMembers{Local: "lone", List: []peer.Member{{Name: "lone"}}},
				store, fetch.WithHTTPClient(client), fetch.WithMetrics(m), fetch.WithSettle(0))
			require.NoError(b, err)
			l, err := fetcher.Fetch(b.Context(), fetch.Request{SHA512: sha, OriginURL: url, Path: filepath.Join(cacheDir, "release.iso")}, nil)
			require.NoError(b, err)
			require.True(b, l.Complete())
			require.NoError(b, l.Close())
		}
	})
	b.Run("get-then-sha512", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			path := filepath.Join(b.TempDir(), "release.iso")
			resp, err := client.Get(url)
			require.NoError(b, err)
			out, err := os.Create(path)
			require.NoError(b, err)
			_, err = io.Copy(out, resp.Body)
			require.NoError(b, err)
			require.NoError(b, resp.Body.Close())
			require.NoError(b, out.Close())
			in, err := os.Open(path)
			require.NoError(b, err)
			h := sha512.New()
			_, err = io.Copy(h, in)
			require.NoError(b, err)
			require.NoError(b, in.Close())
			require.Equal(b, sha, hex.EncodeToString(h.Sum(nil)))
		}
	})
}
