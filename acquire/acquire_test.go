package acquire

import (
	"bytes"
	"crypto/sha512"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/fetch"
)

func content(seed uint64, n int) []byte {
	b := make([]byte, n)
	var s [32]byte
	s[0] = byte(seed)
	rand.NewChaCha8(s).Read(b)
	return b
}

func checksumOf(t *testing.T, b []byte) checksum.Sum {
	t.Helper()
	s := sha512.Sum512(b)
	c, err := checksum.Parse("sha512:" + hex.EncodeToString(s[:]))
	require.NoError(t, err)
	return c
}

func TestAcquire(t *testing.T) {
	t.Parallel()
	data := content(6, 5<<20+123)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/release.iso" {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}))
	t.Cleanup(origin.Close)
	url := origin.URL + "/release.iso"
	local := filepath.Join(t.TempDir(), "local.iso")
	require.NoError(t, os.WriteFile(local, data, 0o644))
	sum := checksumOf(t, data)
	wrong := checksumOf(t, []byte("other"))

	tests := []struct {
		name string
		src  Source
		// want is the copy's path; "cache" stands for the cache's copy.
		want     string
		verifier bool
		err      string
		errIs    error
		// checked is the result the whole-ISO check counted, "" for none.
		checked string
	}{
		{name: "local path", src: Source{Path: local}, want: local},
		{name: "local path verified", src: Source{Path: local, Checksum: sum}, want: local, verifier: true, checked: peer.VerifiedOK},
		{name: "local path wrong checksum", src: Source{Path: local, Checksum: wrong}, errIs: peer.ErrVerification, checked: peer.VerifiedMismatch},
		{name: "local path missing", src: Source{Path: local + ".nope"}, err: "no such file"},
		{name: "local directory", src: Source{Path: filepath.Dir(local)}, err: "is a directory, not an ISO image file"},
		{name: "local path a URL", src: Source{Path: "ftp://origin/x.iso"}, err: "is a URL (ftp://), not an ISO image file"},
		{name: "local path an http URL", src: Source{Path: url}, err: "is a URL: give it as the ISO URL"},
		{name: "url", src: Source{URL: url, Checksum: sum}, want: "cache", verifier: true, checked: peer.VerifiedOK},
		{name: "url wrong checksum", src: Source{URL: url, Checksum: wrong}, errIs: peer.ErrVerification, checked: peer.VerifiedMismatch},
		{name: "url not found", src: Source{URL: origin.URL + "/nope", Checksum: sum}, errIs: fetch.ErrOriginRefused},
		{name: "url without checksum", src: Source{URL: url, CacheDir: "x"}, err: "needs its checksum"},
		{name: "url without cache", src: Source{URL: url, Checksum: sum}, err: "needs a cache directory"},
		{name: "url not http", src: Source{URL: "ftp://origin/x.iso", Checksum: sum}, err: "http or https"},
		{name: "both", src: Source{Path: local, URL: url}, err: "not both"},
		{name: "none", src: Source{}, err: "is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cache := t.TempDir()
			if tt.src.URL != "" && tt.src.CacheDir == "" && tt.name != "url without cache" {
				tt.src.CacheDir = cache
			}
			m, merr := peer.NewMetrics(prometheus.NewRegistry())
			require.NoError(t, merr)
			v, err := Acquire(t.Context(), tt.src, WithMetrics(m), WithFetchOptions(fetch.WithRetry(2, time.Millisecond, time.Millisecond)))
			for _, result := range []string{peer.VerifiedOK, peer.VerifiedMismatch, peer.VerifiedReused} {
				want := 0.0
				if result == tt.checked {
					want = 1
				}
				require.Equal(t, want, testutil.ToFloat64(m.Verifications.WithLabelValues(result)), "checks counted %q", result)
			}
			switch {
			case tt.errIs != nil:
				require.ErrorIs(t, err, tt.errIs)
				return
			case tt.err != "":
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			defer func() { require.NoError(t, v.Close()) }()
			want := tt.want
			if want == "cache" {
				want = filepath.Join(cache, sum.Hex()+".iso")
			}
			require.Equal(t, want, v.Path)
			got, err := os.ReadFile(v.Path)
			require.NoError(t, err)
			require.True(t, bytes.Equal(data, got))
			require.Equal(t, tt.verifier, v.Verifier != nil)
			if v.Verifier != nil {
				require.NoError(t, v.Verifier.Check(0, int64(len(data))))
			}
		})
	}
}

// TestAcquireReusesTheCache: a second start on the same cache takes the verified copy as it is,
// without the origin and without hashing it, and still checks each chunk before it is served.
func TestAcquireReusesTheCache(t *testing.T) {
	t.Parallel()
	data := content(7, 9<<20)
	var requests atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}))
	t.Cleanup(origin.Close)
	src := Source{URL: origin.URL + "/release.iso", Checksum: checksumOf(t, data), CacheDir: t.TempDir()}
	v, err := Acquire(t.Context(), src)
	require.NoError(t, err)
	require.NoError(t, v.Close())
	before := requests.Load()
	origin.Close()

	m, err := peer.NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	v, err = Acquire(t.Context(), src, WithMetrics(m))
	require.NoError(t, err)
	defer v.Close()
	require.Equal(t, before, requests.Load())
	require.Equal(t, 1.0, testutil.ToFloat64(m.Verifications.WithLabelValues("reused")), "the copy was not hashed again")
	require.Zero(t, testutil.ToFloat64(m.Verifications.WithLabelValues("ok")))
	require.NotNil(t, v.Verifier)
	require.NoError(t, v.Verifier.Check(0, int64(len(data))))
}
