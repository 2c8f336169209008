package main

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/planctl"
	"github.com/upgrade-repo/upgrade-repo/planctl/planctltest"
)

// signalWriter is a buffer that closes seen the first time what it holds contains want.
type signalWriter struct {
	mu   sync.Mutex
	b    bytes.Buffer
	want string
	seen chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	if w.seen != nil && strings.Contains(w.b.String(), w.want) {
		close(w.seen)
		w.seen = nil
	}
	return n, err
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// Each verb, started while the API server refuses connections, says once that it waits for it
// and completes once it is back, with the change made once.
func TestVerbsWaitForAPIServer(t *testing.T) {
	t.Parallel()
	running := func() *v1beta1.UpgradePlan {
		return controlPlan(v1beta1.PhaseNodeUpgrading, map[string]v1beta1.NodeState{"cp-a": v1beta1.NodeUpgraded})
	}
	paused := func() *v1beta1.UpgradePlan {
		p := running()
		p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: []string{"aa-worker", "cp-b"}}
		p.Annotations = map[string]string{planctl.PausedAnnotation: "aa-worker,cp-b"}
		return p
	}
	failed := func() *v1beta1.UpgradePlan {
		p := controlPlan(v1beta1.PhaseFailed, nil)
		p.Status.FailedPhase = v1beta1.PhaseNodeUpgrading
		return p
	}
	succeeded := func() *v1beta1.UpgradePlan { return controlPlan(v1beta1.PhaseSucceeded, nil) }
	tests := []struct {
		name    string
		args    []string
		objs    []client.Object
		wantOut string
		check   func(t *testing.T, srv *planctltest.APIServer)
	}{
		{
			name: "pause", args: []string{"pause", "p"}, objs: []client.Object{running()},
			wantOut: "Paused upgradeplan p: aa-worker, cp-b added",
			check: func(t *testing.T, srv *planctltest.APIServer) {
				var p v1beta1.UpgradePlan
				require.True(t, srv.Get(client.ObjectKey{Name: "p"}, &p))
				require.Equal(t, []string{"aa-worker", "cp-b"}, p.Spec.NodeUpgradeOption.PauseNodes)
			},
		},
		{
			name: "resume", args: []string{"resume", "p"}, objs: []client.Object{paused()},
			wantOut: "Resumed upgradeplan p: aa-worker, cp-b removed",
			check: func(t *testing.T, srv *planctltest.APIServer) {
				var p v1beta1.UpgradePlan
				require.True(t, srv.Get(client.ObjectKey{Name: "p"}, &p))
				require.Empty(t, p.Spec.NodeUpgradeOption.PauseNodes)
			},
		},
		{
			name: "retry", args: []string{"retry", "p"}, objs: []client.Object{failed()},
			wantOut: "Asked upgradeplan p to retry",
			check: func(t *testing.T, srv *planctltest.APIServer) {
				var p v1beta1.UpgradePlan
				require.True(t, srv.Get(client.ObjectKey{Name: "p"}, &p))
				require.NotEmpty(t, p.Annotations[v1beta1.RetryAnnotation])
			},
		},
		{
			name: "abort", args: []string{"abort", "p", "--yes"}, objs: []client.Object{running()},
			wantOut: "Deleted upgradeplan p (it was NodeUpgrading)",
			check: func(t *testing.T, srv *planctltest.APIServer) {
				require.False(t, srv.Get(client.ObjectKey{Name: "p"}, &v1beta1.UpgradePlan{}))
			},
		},
		{
			name: "status of a held plan", args: []string{"status", "p"}, objs: []client.Object{paused()},
			wantOut: "aa-worker, cp-b in spec.nodeUpgradeOption.pauseNodes: no new node starts until upgrade-repo upgrade resume p\n",
		},
		{
			name: "skip", args: []string{"skip", "aa-worker"}, objs: []client.Object{running()},
			wantOut: "Skipped in upgradeplan p: aa-worker added to spec.nodeUpgradeOption.skipNodes",
			check: func(t *testing.T, srv *planctltest.APIServer) {
				var p v1beta1.UpgradePlan
				require.True(t, srv.Get(client.ObjectKey{Name: "p"}, &p))
				require.Equal(t, []string{"aa-worker"}, p.Spec.NodeUpgradeOption.SkipNodes)
			},
		},
		{
			name: "node", args: []string{"node", "aa-worker"},
			objs:    []client.Object{succeeded(), &v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: "v1.6.0"}}},
			wantOut: "Created upgradeplan v1-6-0-aa-worker: node aa-worker alone to version v1.6.0",
			check: func(t *testing.T, srv *planctltest.APIServer) {
				var p v1beta1.UpgradePlan
				require.True(t, srv.Get(client.ObjectKey{Name: "v1-6-0-aa-worker"}, &p))
				require.Equal(t, []string{"aa-worker"}, p.Spec.NodeUpgradeOption.Nodes)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			objs := append([]client.Object{upgradeTestNode("aa-worker", "v1.32.7", false), upgradeTestNode("cp-b", "v1.32.7", true),
				upgradeTestNode("cp-a", "v1.32.7", true)}, tt.objs...)
			srv := planctltest.Start(t, objs...)
			kc := srv.Kubeconfig()
			srv.Stop()
			var stdout bytes.Buffer
			stderr := &signalWriter{want: "waiting up to", seen: make(chan struct{})}
			seen := stderr.seen
			done := make(chan error, 1)
			go func() {
				done <- run(t.Context(), append([]string{"upgrade"}, append(tt.args, "--kubeconfig", kc)...), &stdout, stderr)
			}()
			select {
			case <-seen:
			case err := <-done:
				t.Fatalf("ended without waiting: %v\n%s", err, stderr.String())
			}
			srv.Restart()
			require.NoError(t, <-done, stderr.String())
			require.Contains(t, stdout.String(), tt.wantOut)
			require.Regexp(t, `^upgrade-repo: waiting up to 2m0s for the API server \([a-z ]+.*: connection refused\)\n`, stderr.String())
			require.Equal(t, 1, strings.Count(stderr.String(), "waiting up to"), "one line per outage")
			if tt.check != nil {
				tt.check(t, srv)
			}
		})
	}
}

// A verb gives up after --api-timeout with the reason, and fails at once on an answer.
func TestVerbsGiveUp(t *testing.T) {
	t.Parallel()
	srv := planctltest.Start(t, upgradeTestNode("aa-worker", "v1.32.7", false))
	kc := srv.Kubeconfig()
	a, _, stderr := upgradeTestApp()
	err := runUpgrade(t.Context(), a, []string{"pause", "p", "--kubeconfig", kc})
	require.ErrorContains(t, err, `get upgradeplan p: upgradeplans.management.harvesterhci.io "p" not found`)
	require.Empty(t, stderr.String())

	srv.Stop()
	start := time.Now()
	err = runUpgrade(t.Context(), a, []string{"resume", "p", "--kubeconfig", kc, "--api-timeout", "300ms"})
	require.ErrorIs(t, err, planctl.ErrAPIUnavailable)
	require.ErrorContains(t, err, "connection refused")
	require.Less(t, time.Since(start), time.Minute)
	require.Contains(t, stderr.String(), "waiting up to 300ms for the API server")

	require.ErrorIs(t, runUpgrade(t.Context(), a, []string{"status", "--api-timeout", "0s"}), errUsage)
}
