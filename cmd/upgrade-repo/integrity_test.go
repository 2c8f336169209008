package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/acquire"
	"github.com/upgrade-repo/upgrade-repo/chunks"
	"github.com/upgrade-repo/upgrade-repo/iso"
)

// logBuffer collects a test's log lines; safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// spanOf returns where the named file lies in the ISO at path.
func spanOf(t *testing.T, path, name string) (int64, int64) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	st, err := f.Stat()
	require.NoError(t, err)
	fsys, err := iso.Open(f, st.Size())
	require.NoError(t, err)
	off, n, ok := fsys.Span(name)
	require.True(t, ok)
	return off, n
}

// corrupt overwrites four bytes of the file at off and gives the file back its modification time,
// as bit rot or a careful intruder would leave it.
func corrupt(t *testing.T, path string, off int64) {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{0xde, 0xad, 0xbe, 0xef}, off)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.Chtimes(path, st.ModTime(), st.ModTime()))
}

// get fetches url and returns the status and the body; a body cut short is returned as far as it
// came, with ok false.
func get(t *testing.T, url string, hdr ...string) (int, []byte, bool) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err == nil
}

// requireNeverWrong fails when a response delivered, complete and successful, bytes other than
// want.
func requireNeverWrong(t *testing.T, status int, body []byte, complete bool, want []byte) {
	t.Helper()
	if (status == http.StatusOK || status == http.StatusPartialContent) && complete {
		require.True(t, bytes.Equal(want, body), "status %d: %d bytes served that are not the release's", status, len(body))
	}
}

// A cached, verified ISO whose bytes changed on disk (four bytes, the modification time put back)
// is never served as verified: a tampered copy (its change time moved) is verified again at start,
// named chunk by chunk, and its changed chunk alone fetched again; a rotten one (nothing in its
// metadata changed) is caught when the chunk is first served, refused, and named.
func TestServeNeverServesACorruptedCache(t *testing.T) {
	t.Parallel()
	isoPath, sum := packTestISO(t)
	want, err := os.ReadFile(isoPath)
	require.NoError(t, err)
	rootOff, rootLen := spanOf(t, isoPath, "rootfs.squashfs")
	bad := rootOff + 5<<20 + 3 // inside the large file, served with sendfile
	badChunk := bad / (4 << 20)
	tests := []struct {
		name string
		// rot makes the cache's record of the file match its changed metadata, as when the disk
		// itself changed the bytes.
		rot bool
	}{
		{name: "tampered"},
		{name: "rotten", rot: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			origin, sent := countingOrigin(t, isoPath)
			cache := t.TempDir()
			src := acquire.Source{URL: origin.URL + "/release.iso", Checksum: sum, CacheDir: cache}
			run := func(logs io.Writer) (string, func()) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(t.Context())
				ready := make(chan struct{})
				done := make(chan error, 1)
				a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.NewTextHandler(logs, nil))}
				go func() { done <- serve(ctx, a, src, ln, time.Second, func() { close(ready) }) }()
				select {
				case <-ready:
				case err := <-done:
					t.Fatalf("serve stopped: %v", err)
				}
				return "http://" + ln.Addr().String(), func() { cancel(); require.NoError(t, <-done) }
			}
			base, stop := run(io.Discard)
			status, body, complete := get(t, base+"/rootfs.squashfs")
			require.Equal(t, http.StatusOK, status)
			require.True(t, complete)
			require.True(t, bytes.Equal(want[rootOff:rootOff+rootLen], body))
			stop()
			require.EqualValues(t, len(want), sent.Load())

			cached := filepath.Join(cache, sum.Hex()+".iso")
			corrupt(t, cached, bad)
			if tc.rot {
				rewriteMarker(t, cached)
			}
			var logs logBuffer
			base, stop = run(&logs)
			defer stop()
			for range 2 {
				status, body, complete = get(t, base+"/rootfs.squashfs")
				requireNeverWrong(t, status, body, complete, want[rootOff:rootOff+rootLen])
				// A range of the bad chunk alone, and one that ends just before it.
				rng := fmt.Sprintf("bytes=%d-%d", bad-rootOff-10, bad-rootOff+10)
				status, body, complete = get(t, base+"/rootfs.squashfs", "Range", rng)
				requireNeverWrong(t, status, body, complete, want[bad-10:bad+11])
			}
			chunkAt := fmt.Sprintf("chunk=%d ", badChunk)
			require.Contains(t, logs.String(), chunkAt, "the log names the bad chunk")
			require.Contains(t, logs.String(), "offset="+strconv.FormatInt(badChunk*(4<<20), 10))
			if tc.rot {
				require.Equal(t, http.StatusServiceUnavailable, status, "the rotten chunk is refused")
			} else {
				require.Equal(t, http.StatusPartialContent, status, "the tampered chunk was fetched again")
				require.EqualValues(t, len(want)+4<<20, sent.Load(), "only the changed chunk was fetched again")
			}
			// Whatever lies outside the bad chunk is still served.
			status, body, complete = get(t, base+"/rootfs.squashfs", "Range", "bytes=0-99")
			require.Equal(t, http.StatusPartialContent, status)
			require.True(t, complete)
			require.Equal(t, want[rootOff:rootOff+100], body)
		})
	}
}

// rewriteMarker makes the record of the verified ISO at path describe the file's present
// metadata, as if the file had changed without anything on the file system saying so.
func rewriteMarker(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path + ".json")
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	require.Contains(t, m, "verified", "the record says the file was verified")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	m["verified"] = chunks.StampOf(fi)
	b, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path+".json", b, 0o644))
}

// A running agent whose cached ISO is changed under it (four bytes, the modification time put
// back) stops serving the changed chunk, to clients and to peers, says which chunk is bad in its
// status, and a node joining later gets the whole ISO, right, from the other holders.
func TestAgentStopsServingACopyChangedUnderIt(t *testing.T) {
	t.Parallel()
	isoPath, sum := packTestISO(t)
	want, err := os.ReadFile(isoPath)
	require.NoError(t, err)
	rootOff, rootLen := spanOf(t, isoPath, "rootfs.squashfs")
	bad := rootOff + 5<<20 + 3
	badChunk := bad / (4 << 20)
	origin, sent := countingOrigin(t, isoPath)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var logs logBuffer
	a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.NewTextHandler(&logs, nil))}
	type agentProc struct {
		http, gossip, cache string
		done                chan error
	}
	start := func(name, join string) agentProc {
		p := agentProc{http: freeAddr(t), gossip: freeAddr(t), cache: t.TempDir(), done: make(chan error, 1)}
		args := []string{"--node-name", name, "--listen", p.http, "--gossip-listen", p.gossip,
			"--cache-dir", p.cache, "--iso-url", origin.URL + "/release.iso", "--iso-checksum", sum.String(),
			"--settle", "200ms"}
		if join != "" {
			args = append(args, "--join", join)
		}
		go func() { p.done <- runAgent(ctx, a, args) }()
		waitReady(t, p.http, p.done)
		return p
	}
	first := start("first", "")
	start("second", first.gossip)
	start("third", first.gossip)
	require.EqualValues(t, len(want), sent.Load())

	corrupt(t, filepath.Join(first.cache, sum.Hex()+".iso"), bad)
	for range 2 {
		status, body, complete := get(t, "http://"+first.http+"/rootfs.squashfs")
		requireNeverWrong(t, status, body, complete, want[rootOff:rootOff+rootLen])
		rng := fmt.Sprintf("bytes=%d-%d", badChunk*(4<<20), (badChunk+1)*(4<<20)-1)
		status, body, complete = get(t, "http://"+first.http+"/v1/iso/"+sum.Hex(), "Range", rng)
		requireNeverWrong(t, status, body, complete, want[badChunk*(4<<20):(badChunk+1)*(4<<20)])
	}
	deadline := time.After(30 * time.Second)
	for {
		s, _ := agentStatusOf(t, first.http)
		if s.ISO.State == "failed" {
			require.Contains(t, s.Error, fmt.Sprintf("chunk %d ", badChunk))
			break
		}
		select {
		case <-deadline:
			t.Fatalf("the agent never reported its changed copy; status %+v", s)
		case <-time.After(50 * time.Millisecond):
		}
	}
	require.Contains(t, logs.String(), fmt.Sprintf("chunk=%d ", badChunk))

	fourth := start("fourth", first.gossip)
	s, _ := agentStatusOf(t, fourth.http)
	require.Equal(t, "verified", s.ISO.State)
	require.EqualValues(t, len(want), s.ISO.FromPeers)
	require.Zero(t, s.ISO.FromOrigin)
	require.EqualValues(t, len(want), sent.Load(), "the origin sent nothing more")
	got, err := os.ReadFile(filepath.Join(fourth.cache, sum.Hex()+".iso"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
}

// An agent restarted on a cached ISO changed on disk (four bytes, the modification time put back)
// hashes it again, names the changed chunk, fetches that chunk anew and serves only the right
// bytes.
func TestAgentRestartedOnACorruptedCache(t *testing.T) {
	t.Parallel()
	isoPath, sum := packTestISO(t)
	want, err := os.ReadFile(isoPath)
	require.NoError(t, err)
	rootOff, rootLen := spanOf(t, isoPath, "rootfs.squashfs")
	bad := rootOff + 5<<20 + 3
	badChunk := bad / (4 << 20)
	origin, sent := countingOrigin(t, isoPath)
	cache := t.TempDir()
	run := func(logs io.Writer) (string, func()) {
		addr := freeAddr(t)
		args := []string{"--node-name", "n1", "--listen", addr, "--gossip-listen", freeAddr(t), "--cache-dir", cache,
			"--iso-url", origin.URL + "/release.iso", "--iso-checksum", sum.String()}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.NewTextHandler(logs, nil))}
		go func() { done <- runAgent(ctx, a, args) }()
		waitReady(t, addr, done)
		return addr, func() { cancel(); require.NoError(t, <-done) }
	}
	_, stop := run(io.Discard)
	stop()
	corrupt(t, filepath.Join(cache, sum.Hex()+".iso"), bad)

	var logs logBuffer
	addr, stop := run(&logs)
	defer stop()
	status, body, complete := get(t, "http://"+addr+"/rootfs.squashfs")
	require.Equal(t, http.StatusOK, status)
	require.True(t, complete)
	require.True(t, bytes.Equal(want[rootOff:rootOff+rootLen], body))
	require.EqualValues(t, len(want)+4<<20, sent.Load(), "the changed chunk alone was fetched again")
	require.Contains(t, logs.String(), fmt.Sprintf("chunk=%d offset=%d", badChunk, badChunk*(4<<20)))
}
