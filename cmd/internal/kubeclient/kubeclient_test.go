package kubeclient

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
)

// writeKubeconfig writes a kubeconfig whose contexts "a" (current) and "b" name the servers given.
func writeKubeconfig(t *testing.T, a, b string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: a
clusters:
- name: a
  cluster: {server: %q}
- name: b
  cluster: {server: %q}
users:
- name: u
  user: {token: t}
contexts:
- name: a
  context: {cluster: a, user: u}
- name: b
  context: {cluster: b, user: u}
`, a, b)
	require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

// TestConfig pins the one loader every command uses: --kubeconfig, else $KUBECONFIG; the
// current context, else --context. It sets $KUBECONFIG, so it does not run in parallel.
func TestConfig(t *testing.T) {
	env := writeKubeconfig(t, "https://env-a.example:6443", "https://env-b.example:6443")
	flag := writeKubeconfig(t, "https://flag-a.example:6443", "https://flag-b.example:6443")
	t.Setenv("KUBECONFIG", env)
	tests := []struct {
		name, kubeconfig, context string
		wantHost, wantErr         string
	}{
		{name: "$KUBECONFIG", wantHost: "https://env-a.example:6443"},
		{name: "$KUBECONFIG and --context", context: "b", wantHost: "https://env-b.example:6443"},
		{name: "--kubeconfig before $KUBECONFIG", kubeconfig: flag, wantHost: "https://flag-a.example:6443"},
		{name: "--kubeconfig and --context", kubeconfig: flag, context: "b", wantHost: "https://flag-b.example:6443"},
		{name: "unknown context", context: "zz", wantErr: `context "zz" does not exist`},
		{name: "missing file", kubeconfig: "/nonexistent/kc", wantErr: "load kubeconfig /nonexistent/kc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Config(tt.kubeconfig, tt.context)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantHost, cfg.Host)
		})
	}
}

func TestInClusterFallback(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("KUBECONFIG", "")
	kubeconfig := filepath.Join(dir, "config")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
users:
- name: u
  user: {token: t}
`), 0o600))
	tests := []struct {
		name     string
		explicit string
		env      string
		want     bool
	}{
		{name: "no kubeconfig anywhere: the pod's own configuration", want: true},
		{name: "a kubeconfig named", explicit: kubeconfig},
		{name: "a kubeconfig in $KUBECONFIG", env: kubeconfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tt.env)
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			rules.ExplicitPath = tt.explicit
			assert.Equal(t, tt.want, inClusterFallback(rules))
		})
	}
}
