package nodestep

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/checksum"
)

func TestEnvFrom(t *testing.T) {
	t.Parallel()
	env := map[string]string{"UPGRADE_STEP": "node", "UPGRADE_NODE_NAME": "n1", "UPGRADE_PLAN": "p", "UPGRADE_REPO_URL": "http://10.0.0.1", "UPGRADE_FORCE": "true", "UPGRADE_RELEASE_KUBERNETES": "v1.34.4", "UPGRADE_STEP_TOKEN_FILE": TokenPath}
	assert.Equal(t, Env{Step: NodeStep, Node: "n1", Plan: "p", RepoURL: "http://10.0.0.1", Force: true, Kubernetes: "v1.34.4", TokenFile: TokenPath}, EnvFrom(func(k string) string { return env[k] }))
	assert.False(t, EnvFrom(func(string) string { return "" }).Force)
}

func TestInstall(t *testing.T) {
	t.Parallel()
	good := "the release's kubelet"
	sum, err := checksum.SHA256Of(strings.NewReader(good))
	require.NoError(t, err)
	tests := []struct {
		name    string
		body    string
		status  int
		sum     checksum.SHA256
		wantErr string
		want    string
		changed bool
	}{
		{name: "replaced", body: good, status: 200, sum: sum, want: good, changed: true},
		{name: "wrong bytes keep the old file", body: "tampered", status: 200, sum: sum, wantErr: "checksum mismatch", want: "old"},
		{name: "missing file", status: 404, sum: sum, wantErr: "no such file", want: "old"},
		{name: "server error, given up", status: 500, sum: sum, wantErr: "500", want: "old"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			dir := t.TempDir()
			dst := filepath.Join(dir, "kubelet")
			require.NoError(t, os.WriteFile(dst, []byte("old"), 0o755))
			f := &Fetcher{RepoURL: srv.URL, Attempts: 1}
			changed, err := f.Install(t.Context(), "kubernetes/linux-amd64/kubelet", tt.sum, dst, 0o755)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.changed, changed)
			b, err := os.ReadFile(dst)
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(b))
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Len(t, entries, 1, "no temporary file is left beside the binary")
			if tt.changed {
				st, err := os.Stat(dst)
				require.NoError(t, err)
				assert.Equal(t, os.FileMode(0o755), st.Mode().Perm())
				again, err := f.Install(t.Context(), "kubernetes/linux-amd64/kubelet", tt.sum, dst, 0o755)
				require.NoError(t, err)
				assert.False(t, again, "a binary that already has the sum is left alone")
			}
		})
	}
}

// A file the release does not have is asked for once, not once an attempt: only answers that
// backoff.RetryableStatus names are asked again.
func TestGetDoesNotRetryNotFound(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.NotFound(w, r)
	}))
	defer srv.Close()
	_, err := (&Fetcher{RepoURL: srv.URL}).Sums(t.Context(), "kubernetes/linux-amd64")
	require.ErrorContains(t, err, "the release has no such file")
	require.EqualValues(t, 1, hits.Load())
}

func TestSums(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, wantErr string
		want                map[string]checksum.SHA256
	}{
		{name: "sha256sum output", body: strings.Repeat("a", 64) + "  kubeadm\n" + strings.Repeat("B", 64) + " *kubelet\n", want: map[string]checksum.SHA256{
			"kubeadm": checksum.MustParseSHA256(strings.Repeat("a", 64)), "kubelet": checksum.MustParseSHA256("sha256:" + strings.Repeat("b", 64))}},
		{name: "short digest", body: "abc  kubeadm\n", wantErr: "line 1"},
		{name: "not hex", body: strings.Repeat("z", 64) + "  kubeadm\n", wantErr: "line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(tt.body)) }))
			defer srv.Close()
			got, err := (&Fetcher{RepoURL: srv.URL, Attempts: 1}).Sums(t.Context(), "kubernetes/linux-amd64")
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
