package idle_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/internal/idle"
)

// A server that holds the connection open and stops sending is abandoned after the timeout:
// before its headers, or in the middle of its body. A reader that is slow between reads is not.
func TestWatchdog(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/no-headers":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/stalls":
			_, _ = w.Write([]byte("first"))
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/whole":
			for range 3 {
				_, _ = w.Write([]byte("part;"))
				w.(http.Flusher).Flush()
			}
		}
	}))
	t.Cleanup(srv.Close)
	const d = 200 * time.Millisecond

	get := func(path string) (*http.Response, *idle.Watchdog, error) {
		ctx, w := idle.Watch(t.Context(), d)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		resp, err := srv.Client().Do(req)
		return resp, w, w.Cause(err)
	}

	t.Run("no headers", func(t *testing.T) {
		t.Parallel()
		_, w, err := get("/no-headers")
		require.ErrorIs(t, err, idle.ErrIdle)
		require.ErrorContains(t, err, "no byte received for 200ms")
		require.True(t, w.Fired())
	})
	t.Run("stalls in the body", func(t *testing.T) {
		t.Parallel()
		resp, w, err := get("/stalls")
		require.NoError(t, err)
		body := w.Body(resp.Body)
		defer body.Close()
		b, err := io.ReadAll(body)
		require.Equal(t, "first", string(b), "what came is kept")
		require.ErrorIs(t, err, idle.ErrIdle)
	})
	t.Run("slow reader", func(t *testing.T) {
		t.Parallel()
		resp, w, err := get("/whole")
		require.NoError(t, err)
		body := w.Body(resp.Body)
		defer body.Close()
		var got []byte
		buf := make([]byte, 5)
		for {
			time.Sleep(2 * d) // the reader's own time is not the server's silence
			n, err := body.Read(buf)
			got = append(got, buf[:n]...)
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
		}
		require.Equal(t, "part;part;part;", string(got))
		require.False(t, w.Fired())
	})
	t.Run("zero watches nothing", func(t *testing.T) {
		t.Parallel()
		ctx, w := idle.Watch(t.Context(), 0)
		w.Stop()
		require.ErrorIs(t, ctx.Err(), context.Canceled)
		require.False(t, w.Fired())
	})
}
