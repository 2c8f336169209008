package kubeadm

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/upgrade-repo/upgrade-repo/nodestep"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		facts    Facts
		want     Action
		warnings int
		refused  string
	}{
		{name: "first control plane, minor upgrade", facts: Facts{Target: "v1.34.4", ControlPlane: "v1.33.13", Kubelet: "v1.33.13", IsControlPlane: true, APIServer: "v1.33.13"}, want: Apply},
		{name: "first control plane, patch upgrade", facts: Facts{Target: "v1.34.4", ControlPlane: "v1.34.2", Kubelet: "v1.34.2", IsControlPlane: true, APIServer: "v1.34.2"}, want: Apply},
		{name: "control plane done by apply, kubelet not yet (killed step)", facts: Facts{Target: "v1.34.4", ControlPlane: "v1.34.4", Kubelet: "v1.33.13", IsControlPlane: true, APIServer: "v1.34.4"}, want: UpgradeNode},
		{name: "second control plane", facts: Facts{Target: "v1.34.4", ControlPlane: "v1.34.4", Kubelet: "v1.33.13", IsControlPlane: true, APIServer: "v1.33.13"}, want: UpgradeNode},
		{name: "worker", facts: Facts{Target: "v1.34.4", ControlPlane: "v1.34.4", Kubelet: "v1.33.13"}, want: UpgradeNode},
		{name: "worker at target", facts: Facts{Target: "v1.34.4", ControlPlane: "v1.34.4", Kubelet: "v1.34.4"}, want: Done},
		{name: "control plane at target", facts: Facts{Target: "v1.34.4", ControlPlane: "v1.34.4", Kubelet: "v1.34.4", IsControlPlane: true, APIServer: "v1.34.4"}, want: Done},
		{name: "control plane node whose static pods lag", facts: Facts{Target: "v1.34.4", ControlPlane: "v1.34.4", Kubelet: "v1.34.4", IsControlPlane: true, APIServer: "v1.33.13"}, want: UpgradeNode},
		{name: "worker before the control plane", facts: Facts{Target: "v1.34.4", ControlPlane: "v1.33.13", Kubelet: "v1.33.13"}, refused: "no kubelet is newer than the control plane"},
		{name: "two minor versions", facts: Facts{Target: "v1.35.0", ControlPlane: "v1.33.13", Kubelet: "v1.33.13", IsControlPlane: true}, refused: "skips a minor version"},
		{name: "two minor versions, forced", facts: Facts{Target: "v1.35.0", ControlPlane: "v1.33.13", Kubelet: "v1.33.13", IsControlPlane: true, Force: true}, want: Apply, warnings: 1},
		{name: "downgrade", facts: Facts{Target: "v1.33.13", ControlPlane: "v1.34.4", Kubelet: "v1.34.4", IsControlPlane: true}, refused: "downgrade of the control plane"},
		{name: "kubelet newer than target", facts: Facts{Target: "v1.34.2", ControlPlane: "v1.34.2", Kubelet: "v1.34.4"}, refused: "downgrade of the node's kubelet"},
		{name: "major version", facts: Facts{Target: "v2.0.0", ControlPlane: "v1.34.4", Kubelet: "v1.34.4", IsControlPlane: true}, refused: "major version"},
		{name: "bad target", facts: Facts{Target: "latest", ControlPlane: "v1.34.4", Kubelet: "v1.34.4"}, refused: "release's Kubernetes version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, warnings, err := Decide(tt.facts)
			if tt.refused != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.refused)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got, got.String())
			assert.Len(t, warnings, tt.warnings)
		})
	}
}

// fakeHost records the commands run and plays kubeadm and systemctl: the kubelet restart makes
// the fake cluster's node report the new kubelet.
type fakeHost struct {
	mu       sync.Mutex
	ran      []string
	kubeadm  string // what `kubeadm version -o short` says
	fail     string // a command prefix that fails
	failOut  string // what it prints as it fails (default "boom")
	onReboot func()
}

func (h *fakeHost) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cmd := strings.TrimSpace(filepath.Base(name) + " " + strings.Join(args, " "))
	h.ran = append(h.ran, cmd)
	if h.fail != "" && strings.HasPrefix(cmd, h.fail) {
		if h.failOut != "" {
			return []byte(h.failOut), errors.New("exit status 1")
		}
		return []byte("boom"), errors.New("exit status 1")
	}
	switch {
	case cmd == "kubeadm version -o short":
		return []byte(h.kubeadm + "\n"), nil
	case cmd == "systemctl restart kubelet" && h.onReboot != nil:
		h.onReboot()
	case strings.HasPrefix(cmd, "systemctl show"):
		return []byte("ExecStart={ path=/usr/bin/kubelet ; argv[]=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS }\n"), nil
	}
	return nil, nil
}

func (h *fakeHost) commands() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.ran...)
}

// release serves a release's kubernetes/linux-amd64 directory and records the step reports.
func release(t *testing.T, files map[string]string, sums string) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var stages []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/step" {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			stages = append(stages, string(b))
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, "/"+BinDir("linux", "amd64")+"/")
		if name == nodestep.SumsFile {
			_, _ = io.WriteString(w, sums)
			return
		}
		body, ok := files[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), stages...) }
}

// controlPlanePod is node's kube-apiserver mirror pod, Ready or not since now.
func controlPlanePod(node string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-apiserver-" + node, Labels: map[string]string{"tier": "control-plane"}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.Now()}}},
	}
}

func node(name, kubelet string, ready bool) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: kubelet},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}},
		},
	}
}

func kubeadmConfig(v string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kubeadm-config"},
		Data:       map[string]string{"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: " + v + "\n"},
	}
}

func sum(s string) string { return fmt.Sprintf("%x", sha256.Sum256([]byte(s))) }

func TestStepRun(t *testing.T) {
	t.Parallel()
	files := map[string]string{"kubeadm": "new kubeadm", "kubelet": "new kubelet", "kubectl": "new kubectl"}
	var sums strings.Builder
	for _, n := range []string{"kubeadm", "kubelet", "kubectl"} {
		sums.WriteString(sum(files[n]) + "  " + n + "\n")
	}
	tests := []struct {
		name       string
		cp         string // control plane version
		kubelet    string
		controlPln bool
		force      bool
		hostFail   string
		hostOut    string   // what the failing command prints
		permanent  bool     // the error says running the step again would repeat it
		wantCmds   []string // in order, a subset of what ran
		wantErr    string
		unchanged  bool // the node's binaries must be the old ones afterwards
		wantStages []string
	}{
		{
			name: "first control plane", cp: "v1.33.13", kubelet: "v1.33.13", controlPln: true,
			wantCmds:   []string{"kubeadm version -o short", "kubeadm upgrade plan v1.34.4", "kubeadm upgrade apply v1.34.4 --yes", "systemctl daemon-reload", "systemctl restart kubelet"},
			wantStages: []string{"KubernetesUpgrading", "KubernetesUpgrading", "KubernetesUpgraded"},
		},
		{
			name: "worker", cp: "v1.34.4", kubelet: "v1.33.13",
			wantCmds:   []string{"kubeadm upgrade node", "systemctl restart kubelet"},
			wantStages: []string{"KubernetesUpgrading", "KubernetesUpgrading", "KubernetesUpgraded"},
		},
		{name: "at target: a no-op", cp: "v1.34.4", kubelet: "v1.34.4", unchanged: true, wantStages: []string{"KubernetesUpgraded"}},
		{name: "refused before any change", cp: "v1.32.1", kubelet: "v1.32.1", controlPln: true, wantErr: "skips a minor version", unchanged: true},
		{
			name: "kubeadm fails: the kubelet is left alone", cp: "v1.33.13", kubelet: "v1.33.13", controlPln: true, hostFail: "kubeadm upgrade apply",
			wantErr: "kubeadm upgrade apply v1.34.4 --yes", wantStages: []string{"KubernetesUpgrading"},
		},
		{
			name: "the release's control plane does not come up: every binary as it was, and not run again", cp: "v1.33.13", kubelet: "v1.33.13", controlPln: true,
			hostFail: "kubeadm upgrade apply", permanent: true,
			hostOut: "couldn't upgrade control plane. kubeadm has tried to recover everything into the earlier state. Errors faced: " +
				"static Pod hash for component kube-apiserver on Node n1 did not change after 5m0s: context deadline exceeded",
			wantErr: "node n1: the release's kube-apiserver did not come up within 5m0s; kubeadm restored", wantStages: []string{"KubernetesUpgrading"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			for _, d := range []string{"usr/bin", "etc/kubernetes/manifests"} {
				require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
			}
			for _, n := range []string{"kubeadm", "kubelet", "kubectl"} {
				require.NoError(t, os.WriteFile(filepath.Join(root, "usr/bin", n), []byte("old "+n), 0o755))
			}
			if tt.controlPln {
				require.NoError(t, os.WriteFile(filepath.Join(root, "etc/kubernetes/manifests/kube-apiserver.yaml"),
					[]byte("spec:\n  containers:\n  - image: registry.k8s.io/kube-apiserver:"+tt.cp+"\n"), 0o600))
			}
			// Another node's control-plane pod, not Ready, is not this node's to wait for.
			cs := fake.NewClientset(node("n1", tt.kubelet, true), kubeadmConfig(tt.cp), controlPlanePod("n2", false))
			host := &fakeHost{kubeadm: "v1.34.4", fail: tt.hostFail, failOut: tt.hostOut}
			host.onReboot = func() {
				n := node("n1", "v1.34.4", true)
				_, err := cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
				assert.NoError(t, err)
				_, err = cs.CoreV1().Pods("kube-system").Create(context.Background(), controlPlanePod("n1", true), metav1.CreateOptions{})
				assert.NoError(t, err)
			}
			srv, stages := release(t, files, sums.String())
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			s := &Step{
				Node: "n1", Target: "v1.34.4", Force: tt.force, Root: root, Host: host, Cluster: KubeCluster{Client: cs},
				Fetch:  &nodestep.Fetcher{RepoURL: srv.URL, Attempts: 1},
				Report: &nodestep.Reporter{RepoURL: srv.URL, Plan: "p", Log: log}, Log: log, Poll: 10e6, ReadyTimeout: 5 * time.Second,
			}
			err := s.Run(t.Context())
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.Equal(t, tt.permanent, errors.Is(err, nodestep.ErrPermanent), "permanent: %v", err)
			} else {
				require.NoError(t, err)
			}
			ran := strings.Join(host.commands(), "\n")
			last := -1
			for _, c := range tt.wantCmds {
				i := strings.Index(ran, c)
				require.Greater(t, i, last, "%q after the commands before it in:\n%s", c, ran)
				last = i
			}
			for _, n := range []string{"kubeadm", "kubelet", "kubectl"} {
				b, err := os.ReadFile(filepath.Join(root, "usr/bin", n))
				require.NoError(t, err)
				if tt.unchanged || tt.wantErr != "" {
					assert.Equal(t, "old "+n, string(b))
				} else {
					assert.Equal(t, "new "+n, string(b))
				}
			}
			assert.NoDirExists(t, filepath.Join(root, stagingDir), "the staged kubeadm is removed")
			if tt.unchanged {
				assert.NotContains(t, ran, "kubeadm upgrade")
				assert.NotContains(t, ran, "systemctl restart")
			}
			var got []string
			for _, s := range stages() {
				for _, st := range []string{"KubernetesUpgrading", "KubernetesUpgraded"} {
					if strings.Contains(s, `"stage":"`+st+`"`) {
						got = append(got, st)
					}
				}
			}
			assert.Equal(t, tt.wantStages, got)
		})
	}
}

func TestApplyFailure(t *testing.T) {
	t.Parallel()
	const moved = `[upgrade/staticpods] Moving new manifest to "/etc/kubernetes/manifests/kube-apiserver.yaml" and backing up old manifest to "/etc/kubernetes/tmp/kubeadm-backup-manifests-2026-11-26-17-30-00/kube-apiserver.yaml"
[upgrade/staticpods] Waiting for the kubelet to restart the component
[upgrade/staticpods] This can take up to 5m0s
`
	tests := []struct {
		name, out, want string
	}{
		{
			name: "the API server never came up: restored",
			out: moved + "error: error execution phase control-plane: couldn't complete the static pod upgrade: couldn't upgrade control plane. " +
				"kubeadm has tried to recover everything into the earlier state. Errors faced: static Pod hash for component kube-apiserver on Node cp1 " +
				"did not change after 5m0s: context deadline exceeded\n",
			want: "the release's kube-apiserver did not come up within 5m0s; kubeadm restored the node's earlier static pod manifests, so the node runs its previous control plane",
		},
		{
			name: "the API server never came up, so its pod could not be read (kubeadm 1.34 on kind): restored",
			out: moved + "error: error execution phase control-plane: couldn't complete the static pod upgrade: couldn't upgrade control plane. " +
				"kubeadm has tried to recover everything into the earlier state. Errors faced: failed to obtain static Pod hash for component kube-apiserver " +
				`on Node upgrade-repo-e2e-control-plane: Get "https://upgrade-repo-e2e-control-plane:6443/api/v1/namespaces/kube-system/pods/kube-apiserver-upgrade-repo-e2e-control-plane?timeout=10s": ` +
				"dial tcp 172.18.0.4:6443: connect: connection refused\n",
			want: "the release's kube-apiserver did not come up: kubeadm could not read its pod, the API server not answering; " +
				"kubeadm restored the node's earlier static pod manifests, so the node runs its previous control plane",
		},
		{
			name: "the scheduler's pods never listed",
			out: "couldn't upgrade control plane. kubeadm has tried to recover everything into the earlier state. Errors faced: " +
				`timed out waiting for pods with label "component=kube-scheduler": context deadline exceeded`,
			want: "the release's kube-scheduler did not come up; kubeadm restored the node's earlier static pod manifests, so the node runs its previous control plane",
		},
		{name: "preflight error: nothing to say", out: "[preflight] Some fatal errors occurred:\n\t[ERROR CoreDNSUnsupportedPlugins]: ...", want: ""},
		{name: "empty", out: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, ApplyFailure([]byte(tt.out)))
		})
	}
}

// podsCluster answers ControlPlanePods from a list of readings, one a call, the last repeated.
type podsCluster struct {
	Cluster
	mu       sync.Mutex
	readings []podsReading
	calls    int
}

type podsReading struct {
	pods []PodReadiness
	err  error
}

func (c *podsCluster) ControlPlanePods(context.Context, string) ([]PodReadiness, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.readings[min(c.calls, len(c.readings)-1)]
	c.calls++
	return r.pods, r.err
}

func TestWaitControlPlanePods(t *testing.T) {
	t.Parallel()
	restarted := time.Now().Add(-time.Minute)
	before, after := restarted.Add(-time.Hour), restarted.Add(time.Second)
	api := func(ready bool, since time.Time) PodReadiness {
		return PodReadiness{Name: "kube-apiserver-n1", Ready: ready, Since: since}
	}
	etcd := func(ready bool, since time.Time) PodReadiness {
		return PodReadiness{Name: "etcd-n1", Ready: ready, Since: since}
	}
	tests := []struct {
		name      string
		readings  []podsReading
		wantErr   string
		wantCalls int // at least
		wantWait  string
	}{
		{name: "no control-plane pods: nothing to wait for", readings: []podsReading{{}}, wantCalls: 1},
		{name: "Ready since the restart", readings: []podsReading{{pods: []PodReadiness{api(true, after), etcd(true, after)}}}, wantCalls: 1},
		{
			name: "not Ready after the restart, then Ready",
			readings: []podsReading{
				{pods: []PodReadiness{api(false, after), etcd(true, after)}},
				{pods: []PodReadiness{api(false, after), etcd(true, after)}},
				{pods: []PodReadiness{api(true, after), etcd(true, after)}},
			},
			wantCalls: 3, wantWait: "kube-apiserver-n1 to be Ready",
		},
		{
			name: "the kubelet's word from before the restart is not believed at once",
			readings: []podsReading{
				{pods: []PodReadiness{api(true, before)}},
				{pods: []PodReadiness{api(false, after)}},
				{pods: []PodReadiness{api(true, after)}},
			},
			wantCalls: 3, wantWait: "kube-apiserver-n1 to be Ready",
		},
		{
			name:      "Ready, unchanged since before the restart, believed after the grace",
			readings:  []podsReading{{pods: []PodReadiness{api(true, before)}}},
			wantCalls: 3, wantWait: "kube-apiserver-n1 to be Ready",
		},
		{
			name: "the API server not answering, then Ready",
			readings: []podsReading{
				{err: errors.New("connection refused")},
				{pods: []PodReadiness{api(true, after)}},
			},
			wantCalls: 2, wantWait: "connection refused",
		},
		{
			name:     "never Ready: the pods named",
			readings: []podsReading{{pods: []PodReadiness{api(true, after), etcd(false, after)}}},
			wantErr:  "node n1: not whole after 300ms: waited for control-plane pods etcd-n1 to be Ready",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &podsCluster{readings: tt.readings}
			srv, stages := release(t, nil, "")
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			s := &Step{
				Node: "n1", Target: "v1.34.4", Cluster: c, Log: log, Poll: 10 * time.Millisecond, ReadyTimeout: 300 * time.Millisecond,
				Report: &nodestep.Reporter{RepoURL: srv.URL, Plan: "p", Log: log}, staleGrace: 25 * time.Millisecond,
			}
			err := s.waitControlPlanePods(t.Context(), log, restarted)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Equal(t, tt.wantErr, err.Error())
				return
			}
			require.NoError(t, err)
			c.mu.Lock()
			assert.GreaterOrEqual(t, c.calls, tt.wantCalls)
			c.mu.Unlock()
			reported := strings.Join(stages(), "\n")
			if tt.wantWait == "" {
				assert.Empty(t, reported, "nothing waited for, nothing reported")
			} else {
				assert.Contains(t, reported, tt.wantWait)
			}
		})
	}
}

// TestStepDoneWaitsForTheControlPlane runs the step on a control plane at the target whose pods
// are not all Ready, as after the node restarted mid-step: the step reports only once they are.
func TestStepDoneWaitsForTheControlPlane(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc/kubernetes/manifests"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/kubernetes/manifests/kube-apiserver.yaml"),
		[]byte("spec:\n  containers:\n  - image: registry.k8s.io/kube-apiserver:v1.34.4\n"), 0o600))
	cs := fake.NewClientset(node("n1", "v1.34.4", true), kubeadmConfig("v1.34.4"))
	long := time.Now().Add(-time.Hour)
	c := &podsCluster{Cluster: KubeCluster{Client: cs}, readings: []podsReading{
		{pods: []PodReadiness{{Name: "etcd-n1", Since: long}, {Name: "kube-apiserver-n1", Ready: true, Since: long}}},
		{pods: []PodReadiness{{Name: "etcd-n1", Ready: true, Since: time.Now()}, {Name: "kube-apiserver-n1", Ready: true, Since: long}}},
	}}
	srv, stages := release(t, nil, "")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := &Step{
		Node: "n1", Target: "v1.34.4", Root: root, Host: &fakeHost{kubeadm: "v1.34.4"}, Cluster: c, Log: log,
		Report: &nodestep.Reporter{RepoURL: srv.URL, Plan: "p", Log: log}, Poll: 10 * time.Millisecond, ReadyTimeout: 5 * time.Second,
	}
	require.NoError(t, s.Run(t.Context()))
	c.mu.Lock()
	assert.Equal(t, 2, c.calls, "read until every pod was Ready, the one Ready all along included")
	c.mu.Unlock()
	got := stages()
	require.Len(t, got, 2)
	assert.Contains(t, got[0], "waiting for control-plane pods etcd-n1 to be Ready")
	assert.Contains(t, got[1], "already at v1.34.4: nothing to do")
}
