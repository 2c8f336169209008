package acquire

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGetFlakyOriginMakingProgress: an origin that cuts every connection after a few bytes is
// resumed until the download is complete, however many cuts that takes, as long as each attempt
// brings bytes; attempts that bring none still give up.
func TestGetFlakyOriginMakingProgress(t *testing.T) {
	t.Parallel()
	data := content(10, 1<<20)
	const cutAfter = 32 << 10 // 32 cuts, many more than the 5 attempts newCache allows
	o := &origin{data: data, fail: func(_ int, w http.ResponseWriter, r *http.Request) bool {
		from := 0
		if rh := r.Header.Get("Range"); rh != "" {
			if _, err := fmt.Sscanf(rh, "bytes=%d-", &from); err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return true
			}
		}
		end := min(from+cutAfter, len(data))
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, len(data)-1, len(data)))
		w.Header().Set("Content-Length", strconv.Itoa(len(data)-from))
		w.WriteHeader(http.StatusPartialContent)
		w.Write(data[from:end])
		if end < len(data) {
			panic(http.ErrAbortHandler)
		}
		return true
	}}
	url := newOrigin(t, o)
	c, m := newCache(t)
	sum := checksumOf(t, data)
	p, err := c.Get(t.Context(), sum, &HTTPFetcher{URL: url})
	require.NoError(t, err)
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))
	require.EqualValues(t, len(data)/cutAfter-1, value(t, m.retries))

	// Cuts before the first byte are no progress: the attempts in a row run out.
	o0 := &origin{data: data, fail: func(int, http.ResponseWriter, *http.Request) bool { panic(http.ErrAbortHandler) }}
	c0, _ := newCache(t)
	_, err = c0.Get(t.Context(), sum, &HTTPFetcher{URL: newOrigin(t, o0)})
	require.Error(t, err)
	require.EqualValues(t, 5, o0.count.Load())
}

// TestSecretsNotPrinted: the origin's password and presigned query appear neither in the logs
// nor in the error of a failed download.
func TestSecretsNotPrinted(t *testing.T) {
	t.Parallel()
	o := &origin{fail: func(_ int, w http.ResponseWriter, _ *http.Request) bool {
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	}}
	base := newOrigin(t, o)
	secretURL := strings.Replace(base, "http://", "http://user:s3cret@", 1) + "?X-Amz-Signature=deadbeef"
	deadURL := "http://user:s3cret@127.0.0.1:1/x.iso?X-Amz-Signature=deadbeef"
	for _, u := range []string{secretURL, deadURL, "http://user:s3cret@[::1/x?X-Amz-Signature=deadbeef"} {
		var logs bytes.Buffer
		c, _ := newCache(t, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		_, err := c.Get(t.Context(), checksumOf(t, []byte("x")), &HTTPFetcher{URL: u})
		require.Error(t, err)
		for _, out := range []string{err.Error(), logs.String()} {
			require.NotContains(t, out, "s3cret")
			require.NotContains(t, out, "deadbeef")
		}
	}
}

// TestOnlyHTTPOrigins: an origin that is not http(s) is refused at once, not retried.
func TestOnlyHTTPOrigins(t *testing.T) {
	t.Parallel()
	sum := checksumOf(t, []byte("x"))
	for _, u := range []string{"ftp://origin/x.iso", "file:///x.iso", "origin/x.iso", "http:///x.iso"} {
		src := Source{URL: u, Checksum: sum, CacheDir: t.TempDir()}
		require.ErrorContains(t, src.Validate(), "http or https", u)
		c, m := newCache(t)
		_, err := c.Get(t.Context(), sum, &HTTPFetcher{URL: u})
		require.ErrorIs(t, err, ErrPermanent, u)
		require.Zero(t, value(t, m.retries), u)
	}
}

// TestGetStalledOrigin: a response that stops sending without closing its connection is
// abandoned after the idle timeout and resumed.
func TestGetStalledOrigin(t *testing.T) {
	t.Parallel()
	data := content(11, 256<<10)
	stalled := make(chan struct{})
	o := &origin{data: data, fail: func(n int, w http.ResponseWriter, _ *http.Request) bool {
		if n > 1 {
			return false
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data[:100<<10])
		w.(http.Flusher).Flush()
		<-stalled
		return true
	}}
	url := newOrigin(t, o)
	// Registered after the server's cleanup, so it runs first: the handler must end for the
	// server to close.
	t.Cleanup(func() { close(stalled) })
	c, m := newCache(t)
	sum := checksumOf(t, data)
	p, err := c.Get(t.Context(), sum, &HTTPFetcher{URL: url, IdleTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))
	require.Equal(t, 1.0, value(t, m.retries))
	require.Equal(t, []string{"", "bytes=102400-"}, o.ranges)
}
