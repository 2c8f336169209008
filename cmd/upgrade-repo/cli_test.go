package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryCommandAnswersHelp runs --help and -h on every command and verb: each prints its usage,
// exits 0 (run returns nil) and names its long flags with two dashes, as kubectl and helm do.
func TestEveryCommandAnswersHelp(t *testing.T) {
	t.Parallel()
	cmds := [][]string{{"help"}}
	for name := range commands() {
		cmds = append(cmds, []string{name})
	}
	for verb := range upgradeVerbs() {
		cmds = append(cmds, []string{"upgrade", verb})
	}
	for _, c := range []string{"ls", "stat", "cat", "info", "extract", "verify"} {
		cmds = append(cmds, []string{"iso", c})
	}
	cmds = append(cmds, []string{"step", "kubeadm"}, []string{"mirror", "hosts"}, []string{"release", "pack"})
	oneDash := regexp.MustCompile(`(?m)^  -[a-z][a-z0-9-]+`)
	for _, c := range cmds {
		for _, h := range []string{"--help", "-h"} {
			name := strings.Join(append(c, h), " ")
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				var stdout, stderr bytes.Buffer
				err := run(t.Context(), append(c[:len(c):len(c)], h), &stdout, &stderr)
				require.NoError(t, err, "stderr: %s", stderr.String())
				out := stdout.String() + stderr.String()
				require.Contains(t, strings.ToLower(out), "usage: upgrade-repo")
				require.NotRegexp(t, oneDash, out, "a long flag shown with one dash")
			})
		}
	}
}

// TestClusterCommandsTakeNamespace checks that every command that talks to a cluster takes
// -n and --namespace, --kubeconfig and --context: each reaches the kubeconfig it is given and
// says it cannot load it.
func TestClusterCommandsTakeNamespace(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope")
	tests := []struct {
		name string
		args []string
	}{
		{name: "plan", args: []string{"plan", "--to", "v1"}},
		{name: "apply", args: []string{"upgrade", "apply", "--iso-url", "http://x/v1.2.3.iso", "--iso-checksum", "sha512:" + strings.Repeat("a", 128), "--yes"}},
		{name: "status", args: []string{"upgrade", "status"}},
		{name: "pause", args: []string{"upgrade", "pause", "p"}},
		{name: "resume", args: []string{"upgrade", "resume", "p"}},
		{name: "retry", args: []string{"upgrade", "retry", "p"}},
		{name: "abort", args: []string{"upgrade", "abort", "p"}},
		{name: "skip", args: []string{"upgrade", "skip", "p", "n1"}},
		{name: "node", args: []string{"upgrade", "node", "n1"}},
		{name: "finalize", args: []string{"upgrade", "finalize"}},
		{name: "rollback", args: []string{"upgrade", "rollback"}},
	}
	for _, tt := range tests {
		for _, ns := range []string{"-n", "--namespace"} {
			t.Run(tt.name+" "+ns, func(t *testing.T) {
				t.Parallel()
				var stdout, stderr bytes.Buffer
				args := append(tt.args[:len(tt.args):len(tt.args)], ns, "elsewhere", "--context", "c", "--kubeconfig", missing)
				err := run(t.Context(), args, &stdout, &stderr)
				require.ErrorContains(t, err, "load kubeconfig "+missing)
			})
		}
	}
}

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

// TestPlanHonoursKUBECONFIG checks that plan, given no --kubeconfig, asks the cluster $KUBECONFIG
// names. It sets $KUBECONFIG, so it does not run in parallel.
func TestPlanHonoursKUBECONFIG(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("KUBECONFIG", writeKubeconfig(t, srv.URL, srv.URL))
	_, err := runPlanTest(t, "--to", "v1.6.0", "--current-kubernetes", "v1.33.0", "--release", writePlanFile(t, "target.yaml", planTargetYAML))
	require.Error(t, err)
	require.Positive(t, asked.Load(), "plan did not ask the API server of $KUBECONFIG")
}

// TestApplyChecksFlagsFirst checks that upgrade apply refuses its own bad flags before it reads a
// kubeconfig (here one that does not exist).
func TestApplyChecksFlagsFirst(t *testing.T) {
	t.Parallel()
	sum := "sha512:" + strings.Repeat("a", 128)
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "ftp URL", args: []string{"--iso-url", "ftp://x/v1.2.3.iso", "--iso-checksum", sum}, wantErr: "not an http or https URL"},
		{name: "bad checksum", args: []string{"--iso-url", "http://x/v1.2.3.iso", "--iso-checksum", "md5:00"}},
		{name: "no version in the name", args: []string{"--iso-url", "http://x/release.iso", "--iso-checksum", sum}, wantErr: "--version"},
		{name: "bad plan name", args: []string{"--iso-url", "http://x/v1.2.3.iso", "--iso-checksum", sum, "--name", "Not_A_Name"}, wantErr: "cannot name an UpgradePlan"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			args := append([]string{"upgrade", "apply"}, append(tt.args, "--kubeconfig", "/nonexistent/kc")...)
			err := run(t.Context(), args, &stdout, &stderr)
			require.ErrorIs(t, err, errUsage)
			require.NotContains(t, err.Error(), "kubeconfig")
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// TestOutputFlagWording checks that every command's -o refuses an unknown format in one wording.
func TestOutputFlagWording(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "plan", args: []string{"plan", "-o", "xml"}, want: `-o must be text or json, got "xml"`},
		{name: "status", args: []string{"upgrade", "status", "-o", "xml"}, want: `-o must be text, wide, json or yaml, got "xml"`},
		{name: "preload", args: []string{"preload", "--iso", "x.iso", "-o", "xml"}, want: `-o must be text or json, got "xml"`},
		{name: "release pack", args: []string{"release", "pack", "--out", "x.iso", "-o", "xml"}, want: `-o must be text or json, got "xml"`},
		{name: "iso info", args: []string{"iso", "info", "-o", "xml", "x.iso"}, want: `-o must be text or json, got "xml"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tt.args, &stdout, &stderr)
			require.ErrorIs(t, err, errUsage)
			require.ErrorContains(t, err, tt.want)
		})
	}
}
