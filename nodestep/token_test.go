package nodestep

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each report carries the step's token as a bearer token, read anew from its file: the kubelet
// renews a projected token in place. Without a token file, no Authorization is sent.
func TestReporterSendsTheStepToken(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte("first-token\n"), 0o600))
	r := &Reporter{HTTP: srv.Client(), RepoURL: srv.URL, Plan: "p", TokenFile: file}
	r.Report(t.Context(), KubernetesUpgrading, "one")
	require.NoError(t, os.WriteFile(file, []byte("renewed-token"), 0o600))
	r.Report(t.Context(), KubernetesUpgraded, "two")
	(&Reporter{HTTP: srv.Client(), RepoURL: srv.URL, Plan: "p"}).Report(t.Context(), OSUpgrading, "three")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"Bearer first-token", "Bearer renewed-token", ""}, seen)
}
