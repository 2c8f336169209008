package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/repo"
)

// peerToken is the bearer token members of a ring keyed with key present to each other, as the
// README documents it: hex(HMAC-SHA256(key, "upgrade-repo peer v1")).
func peerToken(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("upgrade-repo peer v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// writeKeyFile writes a random gossip key, base64-encoded, and returns the file and the key.
func writeKeyFile(t *testing.T) (string, []byte) {
	t.Helper()
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)), 0o600))
	return keyFile, key
}

// releaseBlobs returns the blobs of the images the release served at addr lists, as cs holds
// them (and checks that cs holds some).
func releaseBlobs(t *testing.T, addr string, cs *containerd.Store) []string {
	t.Helper()
	status, body, _ := get(t, "http://"+addr+"/v1/images")
	require.Equal(t, http.StatusOK, status)
	var imgs []repo.ImageDoc
	require.NoError(t, json.Unmarshal(body, &imgs))
	var refs []string
	for _, im := range imgs {
		refs = append(refs, im.Ref)
	}
	blobs, err := cs.ImageBlobs(t.Context(), refs)
	require.NoError(t, err)
	require.NotEmpty(t, blobs)
	return blobs
}

// waitPreloaded waits until the agent at addr has preloaded its release.
func waitPreloaded(t *testing.T, addr string, done <-chan error) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		if s, ok := agentStatusOf(t, addr); ok && s.Preload != nil && s.Preload.State != preload.StatePreloading && s.Preload.State != "" {
			require.Equal(t, preload.StatePreloaded, s.Preload.State, s.Preload.Message)
			return
		}
		select {
		case err := <-done:
			t.Fatalf("agent at %s stopped: %v", addr, err)
		case <-deadline:
			t.Fatalf("agent at %s never preloaded", addr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// An agent serves image blobs only to the members of its ring (a token derived from the gossip
// key) and only the blobs of the release's images: a blob of containerd's store that is not the
// release's (a private image's layer) is never served, and an agent without a gossip key serves
// no blob at all. The release's files stay public.
func TestAgentServesOnlyReleaseBlobsToPeers(t *testing.T) {
	d := containerdtest.Start(t)
	isoPath, sum := packTestISO(t)
	keyFile, key := writeKeyFile(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}
	start := func(node, keyFile string) (string, chan error) {
		c := testAgentConfig(t, node, nil)
		c.report = false
		c.isoFile, c.isoChecksum, c.sock, c.keyFile = isoPath, sum.String(), d.Socket, keyFile
		done := make(chan error, 1)
		go func() { done <- agent(ctx, a, c) }()
		waitPreloaded(t, c.listen, done)
		return c.listen, done
	}
	keyed, keyedDone := start("keyed", keyFile)

	cs, err := containerd.New(t.Context(), d.Socket)
	require.NoError(t, err)
	defer cs.Close()
	release := releaseBlobs(t, keyed, cs)
	private := d.WriteBlob(t, containerd.DefaultNamespace, []byte("a layer of a private image, pulled with a pull secret"))
	all, err := cs.Blobs(t.Context())
	require.NoError(t, err)
	require.Subset(t, all, append(release, private))

	token := peerToken(key)
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	tests := []struct {
		name   string
		addr   string
		path   string
		header []string
		want   int
	}{
		{name: "release blob without a token", addr: keyed, path: "/v2/any/blobs/" + release[0], want: http.StatusUnauthorized},
		{name: "release blob with a wrong token", addr: keyed, path: "/v2/any/blobs/" + release[0], header: bearer(peerToken([]byte("another ring's key!"))), want: http.StatusForbidden},
		{name: "private blob without a token", addr: keyed, path: "/v2/any/blobs/" + private, want: http.StatusUnauthorized},
		{name: "private blob with the token", addr: keyed, path: "/v2/any/blobs/" + private, header: bearer(token), want: http.StatusNotFound},
		{name: "chunk list without a token", addr: keyed, path: "/v1/iso/" + sum.Hex() + "/chunks", want: http.StatusUnauthorized},
		{name: "chunk list with the token", addr: keyed, path: "/v1/iso/" + sum.Hex() + "/chunks", header: bearer(token), want: http.StatusOK},
		{name: "ISO bytes without a token", addr: keyed, path: "/v1/iso/" + sum.Hex(), header: []string{"Range", "bytes=0-9"}, want: http.StatusUnauthorized},
		{name: "release files are public", addr: keyed, path: "/rootfs.squashfs", want: http.StatusOK},
		{name: "release files under the prefix are public", addr: keyed, path: "/harvester-iso/rootfs.squashfs", want: http.StatusOK},
		{name: "release metadata is public", addr: keyed, path: "/v1/release", want: http.StatusOK},
		{name: "status is public", addr: keyed, path: "/v1/status", want: http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, _ := get(t, "http://"+tc.addr+tc.path, tc.header...)
			require.Equal(t, tc.want, status)
		})
	}
	// Every blob of the release's images is served to a member, and verifies.
	for _, dg := range release {
		status, body, complete := get(t, "http://"+keyed+"/v2/any/blobs/"+dg, bearer(token)...)
		require.Equal(t, http.StatusOK, status, dg)
		require.True(t, complete)
		h := sha256.Sum256(body)
		require.Equal(t, dg, "sha256:"+hex.EncodeToString(h[:]))
	}

	// Without a gossip key, nobody can prove membership: no blob is served.
	open, openDone := start("open", "")
	for _, dg := range []string{release[0], private} {
		status, _, _ := get(t, "http://"+open+"/v2/any/blobs/"+dg, bearer(token)...)
		require.Equal(t, http.StatusForbidden, status, dg)
	}
	status, _, _ := get(t, "http://"+open+"/v1/iso/"+sum.Hex()+"/chunks")
	require.Equal(t, http.StatusOK, status, "the release's chunks are as public as its files on a ring without a key")

	cancel()
	require.NoError(t, <-keyedDone)
	require.NoError(t, <-openDone)
}
