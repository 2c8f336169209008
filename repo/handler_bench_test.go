package repo

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// benchRequest is the request make bench-serve's client (Go's http.Transport without
// compression) sends for the small file, byte for byte but for the port.
const benchRequest = "GET /harvester-release.yaml HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: Go-http-client/1.1\r\n\r\n"

// benchServer returns a Server answering the release of make bench-serve's small file
// (harvester-release.yaml, 519 bytes).
func benchServer(b *testing.B) *Server {
	b.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(b, err)
	fsys := fstest.MapFS{"harvester-release.yaml": {Data: bytes.Repeat([]byte("x"), 519), ModTime: time.Unix(1700000000, 0)}}
	h, err := New(fsys, WithMetrics(m), WithIdentity("sha512:bench"), WithModTime(time.Unix(1700000000, 0)))
	require.NoError(b, err)
	s := NewServer(m, nil, nil)
	s.SetHandler(h)
	return s
}

// BenchmarkSmallFile measures the server's own cost of answering make bench-serve's small-file
// request (routing, metrics, headers, body from memory), without the network.
func BenchmarkSmallFile(b *testing.B) {
	s := benchServer(b)
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader([]byte(benchRequest))))
	require.NoError(b, err)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		s.ServeHTTP(w, req)
	}
}

// BenchmarkSmallFileLoopback measures what make bench-serve measures on small files, in one
// process: its request over 64 keep-alive connections on loopback, answered by an http.Server
// set up as the serve command sets it up. The client writes the request's bytes and reads the
// response with a minimal parser, so that most of the time measured is the server's.
func BenchmarkSmallFileLoopback(b *testing.B) {
	srv := &http.Server{Handler: benchServer(b), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // http.ErrServerClosed once the benchmark closes it
	}()
	defer func() {
		srv.Close()
		<-done
	}()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		r := bufio.NewReaderSize(c, 4096)
		body := make([]byte, 4096)
		for pb.Next() {
			if _, err := io.WriteString(c, benchRequest); err != nil {
				b.Error(err)
				return
			}
			n, err := readResponse(r, body)
			if err != nil || n != 519 {
				b.Errorf("response: %d bytes, %v", n, err)
				return
			}
		}
	})
}

// readResponse reads one response of status 200 with a Content-Length from r into buf and returns
// the body's length.
func readResponse(r *bufio.Reader, buf []byte) (int, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		return 0, &strconv.NumError{Func: "status", Num: string(line), Err: strconv.ErrSyntax}
	}
	n := -1
	for {
		line, err = r.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(line) <= 2 {
			break
		}
		if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
			n, err = strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil {
				return 0, err
			}
		}
	}
	if n < 0 || n > len(buf) {
		return 0, strconv.ErrRange
	}
	return io.ReadFull(r, buf[:n])
}
