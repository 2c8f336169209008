package idle_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/internal/idle"
)

// A server on an idle.Listener sends a large file whole to a client that reads it (through
// sendfile's path, ReadFrom), and gives up on one that stops reading, instead of holding the
// connection and its handler for ever.
func TestListener(t *testing.T) {
	t.Parallel()
	content := make([]byte, 24<<20)
	_, err := rand.Read(content)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "big")
	require.NoError(t, os.WriteFile(path, content, 0o644))
	sent := make(chan error, 4)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if err != nil {
			sent <- err
			return
		}
		defer f.Close()
		w.Header().Set("Content-Length", "25165824")
		_, err = io.CopyN(w, f, int64(len(content)))
		sent <- err
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(idle.Listener(ln, 300*time.Millisecond)) }()
	t.Cleanup(func() { _ = srv.Close() })

	t.Run("a reader gets it all", func(t *testing.T) {
		resp, err := http.Get("http://" + ln.Addr().String() + "/")
		require.NoError(t, err)
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.True(t, bytes.Equal(content, got))
		require.NoError(t, <-sent)
	})

	t.Run("a reader that stops is cut", func(t *testing.T) {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		// A small receive buffer, so that the server's writes block once it is full.
		require.NoError(t, c.(*net.TCPConn).SetReadBuffer(4096))
		_, err = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		_, err = http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		select {
		case err := <-sent:
			var ne net.Error
			require.True(t, errors.As(err, &ne) && ne.Timeout(), "write error %v: want a timeout", err)
		case <-time.After(20 * time.Second):
			t.Fatal("the write to a reader that stopped was not abandoned")
		}
	})
}
