package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
)

// The secrets an origin URL may carry; none of them may be printed.
const (
	secretPassword = "s3cret-password"
	secretQuery    = "X-Amz-Signature=deadbeef"
)

// withSecrets returns base (http://host:port) with a password and a presigned query.
func withSecrets(base, path string) string {
	return strings.Replace(base, "http://", "http://user:"+secretPassword+"@", 1) + path + "?" + secretQuery
}

func requireNoSecret(t *testing.T, what, s string) {
	t.Helper()
	require.NotContains(t, s, secretPassword, what)
	require.NotContains(t, s, "deadbeef", what)
}

// lockedBuffer is a log destination safe for concurrent writes; warned is signalled at every
// record at level WARN or above, or holding on when that is set.
type lockedBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	on     []byte
	warned chan struct{}
}

func newLockedBuffer() *lockedBuffer { return &lockedBuffer{warned: make(chan struct{}, 1)} }

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if bytes.Contains(p, []byte("level=WARN")) || bytes.Contains(p, []byte("level=ERROR")) || l.on != nil && bytes.Contains(p, l.on) {
		select {
		case l.warned <- struct{}{}:
		default:
		}
	}
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// unavailableOrigin answers 503 to everything.
func unavailableOrigin(t *testing.T) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// serve's logs and error never show the origin's password or presigned query.
func TestServeRedactsTheOriginURL(t *testing.T) {
	t.Parallel()
	origin := unavailableOrigin(t)
	logs := newLockedBuffer()
	a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.NewTextHandler(logs, nil))}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, a, []string{"--iso-url", withSecrets(origin.URL, "/r.iso"),
			"--iso-checksum", "sha512:" + strings.Repeat("ab", 64), "--cache-dir", t.TempDir(), "--listen", "127.0.0.1:0"})
	}()
	<-logs.warned // the first failed attempt is logged
	cancel()
	require.NoError(t, <-done)
	require.Contains(t, logs.String(), "the origin failed, retrying")
	requireNoSecret(t, "logs", logs.String())

	// A URL that does not even parse is not quoted either.
	err := runServe(t.Context(), a, []string{"--iso-url", "http://user:" + secretPassword + "@[::1/r.iso?" + secretQuery,
		"--iso-checksum", "sha512:" + strings.Repeat("ab", 64), "--cache-dir", t.TempDir()})
	require.ErrorIs(t, err, errUsage)
	requireNoSecret(t, "error", err.Error())
}

// The agent's /v1/status, its logs, and the message of its RepoNode never show the origin's
// password or presigned query.
func TestAgentRedactsTheOriginURL(t *testing.T) {
	t.Parallel()
	origin := unavailableOrigin(t)
	logs := newLockedBuffer()
	a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.NewTextHandler(logs, nil))}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	c := testAgentConfig(t, "n1", nil)
	c.report, c.ISOURL, c.ISOChecksum = false, withSecrets(origin.URL, "/r.iso"), "sha512:"+strings.Repeat("ab", 64)
	done := make(chan error, 1)
	go func() { done <- runNodeAgent(ctx, a, c) }()
	<-logs.warned // "fetch ISO, retrying": the error is in the status now
	s, ok := agentStatusOf(t, c.listen)
	require.True(t, ok)
	require.Contains(t, s.Error, "503")
	requireNoSecret(t, "/v1/status", s.Error)
	cancel()
	require.NoError(t, <-done)
	requireNoSecret(t, "logs", logs.String())

	// A plan naming an origin that is not http(s): Failed at once, with a message that says why
	// without the secrets.
	ftp := "ftp://user:" + secretPassword + "@origin.example/r.iso?" + secretQuery
	kube := kubeFake(t, &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: "up"},
		Spec:       v1beta1.UpgradePlanSpec{Version: "v1.5.2"},
		Status: v1beta1.UpgradePlanStatus{Phase: v1beta1.PhaseISODownloading,
			Agents: &v1beta1.AgentInstructions{ISOURL: ftp, ISOChecksum: strings.Repeat("ab", 64), Hold: true}},
	})
	logs = newLockedBuffer()
	a = &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.NewTextHandler(logs, nil))}
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	c = testAgentConfig(t, "n2", kube)
	done = make(chan error, 1)
	go func() { done <- runNodeAgent(ctx, a, c) }()
	st := waitRepoNode(t, kube, "n2", done, func(s v1beta1.RepoNodeStatus) bool { return s.ISO.State == v1beta1.ISOFailed })
	require.Contains(t, st.ISO.Message, "http or https")
	require.Contains(t, st.ISO.Message, "ftp://origin.example/r.iso")
	requireNoSecret(t, "RepoNode", st.ISO.Message)
	cancel()
	require.NoError(t, <-done)
	requireNoSecret(t, "logs", logs.String())
}

// Durations that cannot be meant and origins that cannot work are usage errors.
func TestHardenedUsage(t *testing.T) {
	t.Parallel()
	sum := "sha512:" + strings.Repeat("ab", 64)
	for _, tc := range []struct {
		name string
		run  func(context.Context, *app, []string) error
		args []string
		want string
	}{
		{"serve negative grace", runServe, []string{"--iso", "a.iso", "--grace", "-1s"}, "--grace -1s"},
		{"serve ftp origin", runServe, []string{"--iso-url", "ftp://x/a.iso", "--iso-checksum", sum, "--cache-dir", "/tmp"}, "http or https"},
		{"agent negative grace", runAgent, []string{"--node-name", "n", "--iso", "/r.iso", "--grace", "-1s"}, "--grace -1s"},
		{"agent negative settle", runAgent, []string{"--node-name", "n", "--iso", "/r.iso", "--settle", "-3s"}, "--settle -3s"},
		{"agent negative preload retry", runAgent, []string{"--node-name", "n", "--iso", "/r.iso", "--preload-retry-for", "-1m"}, "--preload-retry-for -1m"},
		{"preload negative retry", runPreload, []string{"--iso", "/r.iso", "--retry-for", "-1m"}, "--retry-for -1m"},
		{"agent ftp origin", runAgent, []string{"--node-name", "n", "--iso-url", "ftp://x/a.iso", "--iso-checksum", sum, "--cache-dir", "/tmp"}, "http or https"},
		{"serve ISO a directory", runServe, []string{"--iso", "/tmp"}, "/tmp is a directory, not an ISO image file"},
		{"serve ISO a URL", runServe, []string{"--iso", "https://x/a.iso"}, "ISO path https://x/a.iso is a URL: give it as the ISO URL"},
		{"serve origin a file", runServe, []string{"--iso-url", "/srv/a.iso", "--iso-checksum", sum, "--cache-dir", "/tmp"}, "ISO URL /srv/a.iso: not an http or https URL: a file path"},
		{"agent ISO a directory", runAgent, []string{"--node-name", "n", "--iso", "/tmp"}, "ISO file: /tmp is a directory, not an ISO image file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}
			err := tc.run(t.Context(), a, tc.args)
			require.ErrorIs(t, err, errUsage)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// A preload started while containerd is down (restarting) waits for it, up to --retry-for.
func TestPreloadWaitsForContainerd(t *testing.T) {
	d := containerdtest.Start(t)
	img := preloadtest.NewImage(t, "docker.io/library/alpha:v1", preloadtest.ImageOptions{OS: "linux", Arch: "amd64", Own: 1, Seed: 1})
	dir := t.TempDir()
	preloadtest.WriteRelease(t, dir, preloadtest.Archive{Group: "common", Name: "common.tar.zst", Refs: []string{img.Ref},
		Data: preloadtest.Zstd(t, preloadtest.DockerArchive(t, img))})
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)

	require.NoError(t, d.Kill())
	logs := newLockedBuffer()
	logs.on = []byte("containerd unavailable, retrying")
	done := make(chan error, 1)
	go func() {
		done <- run(t.Context(), []string{"preload", "--containerd-sock", d.Socket, "--repo", srv.URL}, io.Discard, logs)
	}()
	select {
	case <-logs.warned: // the preload is waiting for containerd
	case err := <-done:
		t.Fatalf("the preload did not wait for containerd: %v", err)
	}
	require.NoError(t, d.Restart())
	require.NoError(t, <-done, logs.String())
	require.Contains(t, logs.String(), "containerd unavailable, retrying")

	// Down for longer than --retry-for: the preload gives up, saying why.
	require.NoError(t, d.Kill())
	err := run(t.Context(), []string{"preload", "--containerd-sock", d.Socket, "--repo", srv.URL, "--retry-for", "100ms"}, io.Discard, io.Discard)
	require.ErrorIs(t, err, preload.ErrTransient)
	require.NoError(t, d.Restart())
}
