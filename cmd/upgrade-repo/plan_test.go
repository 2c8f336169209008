package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
	"github.com/upgrade-repo/upgrade-repo/planctl"
	"github.com/upgrade-repo/upgrade-repo/planview"
	"github.com/upgrade-repo/upgrade-repo/release"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

const (
	planCurrentYAML = "harvester: v1.5.2\nkubernetes: v1.32.7+rke2r1\nrancher: v2.11.3\nkubevirt: v1.4.0\nos: Harvester v1.5.2\nminUpgradableVersion: v1.4.2\n"
	planTargetYAML  = "harvester: v1.6.0\nkubernetes: v1.33.3+rke2r1\nrancher: v2.11.3\nkubevirt: v1.5.0\nos: Harvester v1.6.0\nminUpgradableVersion: v1.5.0\n"
	planRCYAML      = "harvester: v1.6.0-rc1\nkubernetes: v1.33.3+rke2r1\n"
	planFarYAML     = "harvester: v1.8.0\n"
	// planKubeadmYAML is a kubeadm release: an upstream Kubernetes version, etcd and CoreDNS.
	planKubeadmYAML = "harvester: v1.6.0\nkubernetes: v1.34.1\netcd: 3.6.4-0\ncoredns: v1.12.1\nminUpgradableVersion: v1.5.0\n"
)

func writePlanFile(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(data), 0o600))
	return p
}

func runPlanTest(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	a := &app{stdout: &stdout, stderr: &stderr, log: slog.New(slog.NewTextHandler(&stderr, nil))}
	err := runPlan(t.Context(), a, args)
	return stdout.String(), err
}

// planRepo serves a release the way the repo server does.
func planRepo(t *testing.T, yamlText string) string {
	t.Helper()
	rel, err := release.ParseRelease([]byte(yamlText))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/release", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rel)
	})
	mux.HandleFunc("GET /harvester-release.yaml", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(yamlText)) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestPlanOffline(t *testing.T) {
	t.Parallel()
	target := writePlanFile(t, "target.yaml", planTargetYAML)
	current := writePlanFile(t, "current.yaml", planCurrentYAML)
	rc := writePlanFile(t, "rc.yaml", planRCYAML)
	far := writePlanFile(t, "far.yaml", planFarYAML)
	kubeadm := writePlanFile(t, "kubeadm.yaml", planKubeadmYAML)
	repo := planRepo(t, planTargetYAML)
	tests := []struct {
		name     string
		args     []string
		allowed  bool
		results  map[string]string
		changed  []string
		contains []string
	}{
		{
			name: "file allowed", args: []string{"--current", "v1.5.2", "--release", target, "--current-release", current}, allowed: true,
			results: map[string]string{"MinUpgradableVersion": "pass", "NoDowngrade": "pass", "VersionExists": "skip"},
			changed: []string{"harvester", "kubernetes", "kubevirt", "os"},
		},
		{
			name: "repo base url", args: []string{"--current", "v1.5.2", "--release", repo}, allowed: true,
			results: map[string]string{"MinUpgradableVersion": "pass"},
			changed: []string{"harvester", "kubernetes", "kubevirt", "os", "rancher"},
		},
		{
			name: "yaml url", args: []string{"--current", "v1.5.2", "--release", repo + "/harvester-release.yaml"}, allowed: true,
		},
		{
			name: "below min", args: []string{"--current", "v1.4.9", "--release", target},
			results: map[string]string{"MinUpgradableVersion": "fail"},
		},
		{
			name: "below min forced still refused", args: []string{"--current", "v1.4.9", "--release", target, "--force"},
			results: map[string]string{"MinUpgradableVersion": "fail"},
		},
		{
			name: "two minors without min", args: []string{"--current", "v1.6.0", "--release", far},
			results: map[string]string{"MinorVersionStep": "fail"},
		},
		{
			name: "downgrade", args: []string{"--current", "v1.6.1", "--release", target},
			results: map[string]string{"NoDowngrade": "fail"},
		},
		{
			name: "downgrade forced", args: []string{"--current", "v1.6.1", "--release", target, "--force"}, allowed: true,
			results: map[string]string{"NoDowngrade": "warn"},
		},
		{
			name: "prerelease refused", args: []string{"--current", "v1.5.2", "--release", rc},
			results: map[string]string{"Prerelease": "fail"},
		},
		{
			name: "prerelease allowed", args: []string{"--current", "v1.5.2", "--release", rc, "--allow-prerelease"}, allowed: true,
			results: map[string]string{"Prerelease": "pass"},
		},
		{
			name: "same version", args: []string{"--current", "v1.6.0", "--release", target}, allowed: true,
		},
		{
			name: "kubernetes one minor up, from the current release", args: []string{"--current", "v1.5.2", "--release", target, "--current-release", current}, allowed: true,
			results: map[string]string{"KubernetesNoDowngrade": "pass", "KubernetesMinorStep": "pass", "KubeletVersionSkew": "pass"},
		},
		{
			name: "kubernetes two minors up", args: []string{"--current", "v1.5.2", "--release", kubeadm, "--current-kubernetes", "v1.32.9"},
			results: map[string]string{"KubernetesMinorStep": "fail", "KubernetesNoDowngrade": "pass"},
		},
		{
			name: "kubernetes two minors up forced", args: []string{"--current", "v1.5.2", "--release", kubeadm, "--current-kubernetes", "v1.32.9", "--force"}, allowed: true,
			results: map[string]string{"KubernetesMinorStep": "warn"},
		},
		{
			name: "kubernetes downgrade", args: []string{"--current", "v1.5.2", "--release", kubeadm, "--current-kubernetes", "v1.35.0"},
			results: map[string]string{"KubernetesNoDowngrade": "fail"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := runPlanTest(t, append(tt.args, "-o", "json")...)
			if tt.allowed {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, errNotAllowed)
			}
			var rep planview.Report
			require.NoError(t, json.Unmarshal([]byte(out), &rep))
			require.Equal(t, tt.allowed, rep.Allowed)
			require.Len(t, rep.Checks, 15)
			got := map[string]string{}
			for _, c := range rep.Checks {
				got[c.Name] = c.Result
			}
			for name, want := range tt.results {
				require.Equal(t, want, got[name], "check %s", name)
			}
			if tt.changed != nil {
				var changed []string
				for _, c := range rep.Components {
					if c.Changed {
						changed = append(changed, c.Name)
					}
				}
				require.ElementsMatch(t, tt.changed, changed)
			}
			require.Len(t, rep.Phases, len(sequencer.Steps))
			require.Equal(t, v1beta1.PhaseInitializing, rep.Phases[0].Phase)
			require.Equal(t, v1beta1.PhaseCleaningUp, rep.Phases[len(rep.Phases)-1].Phase)
		})
	}
}

func TestPlanText(t *testing.T) {
	t.Parallel()
	target := writePlanFile(t, "target.yaml", planTargetYAML)
	current := writePlanFile(t, "current.yaml", planCurrentYAML)
	out, err := runPlanTest(t, "--current", "v1.5.2", "--release", target, "--current-release", current)
	require.NoError(t, err)
	require.Contains(t, out, "Upgrade plan: v1.5.2 -> v1.6.0")
	require.Contains(t, out, "Kubernetes: v1.32.7+rke2r1 -> v1.33.3+rke2r1")
	require.Regexp(t, `KubernetesMinorStep\s+skippable\s+pass`, out)
	require.Regexp(t, `kubernetes\s+v1.32.7\+rke2r1\s+v1.33.3\+rke2r1`, out)
	require.NotRegexp(t, `(?m)^rancher\s`, out, "unchanged components are not listed")
	require.Regexp(t, `MinUpgradableVersion\s+required\s+pass`, out)
	require.Regexp(t, `NoDowngrade\s+skippable\s+pass`, out)
	require.Contains(t, out, "6. ClusterUpgrading")
	require.Contains(t, out, "The upgrade is allowed.")

	out, err = runPlanTest(t, "--current", "v1.4.0", "--release", target)
	require.ErrorIs(t, err, errNotAllowed)
	require.Contains(t, out, "The upgrade is not allowed: MinUpgradableVersion failed.")
}

func TestPlanBadInput(t *testing.T) {
	t.Parallel()
	target := writePlanFile(t, "target.yaml", planTargetYAML)
	broken := writePlanFile(t, "broken.yaml", "kubernetes: [\n")
	repo := planRepo(t, planTargetYAML)
	tests := []struct {
		name    string
		args    []string
		usage   bool
		wantErr string
	}{
		{name: "nothing", args: nil, usage: true, wantErr: "give --current and --release"},
		{name: "no release", args: []string{"--current", "v1.5.2"}, usage: true},
		{name: "bad output", args: []string{"--current", "v1.5.2", "--release", target, "-o", "yaml"}, usage: true},
		{name: "stray argument", args: []string{"--current", "v1.5.2", "--release", target, "extra"}, usage: true},
		{name: "missing file", args: []string{"--current", "v1.5.2", "--release", "/nonexistent/r.yaml"}, wantErr: "target release: read release"},
		{name: "broken yaml", args: []string{"--current", "v1.5.2", "--release", broken}, wantErr: broken},
		{name: "repo 404", args: []string{"--current", "v1.5.2", "--release", repo + "/nothing/"}, wantErr: "404"},
		{name: "to disagrees with release", args: []string{"--current", "v1.5.2", "--release", target, "--to", "v1.7.0"}, wantErr: "--to v1.7.0 but the release given by --release is v1.6.0"},
		{name: "bad kubeconfig", args: []string{"--kubeconfig", "/nonexistent", "--to", "v1.6.0"}, wantErr: "load kubeconfig /nonexistent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := runPlanTest(t, tt.args...)
			require.Error(t, err)
			if tt.usage {
				require.ErrorIs(t, err, errUsage)
			}
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
			}
		})
	}
}

func TestPlanCluster(t *testing.T) {
	t.Parallel()
	s, err := kubeclient.Scheme()
	require.NoError(t, err)
	node := func(name string, cp, ready bool, kubelet ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if len(kubelet) > 0 {
			n.Status.NodeInfo.KubeletVersion = kubelet[0]
		}
		if cp {
			n.Labels["node-role.kubernetes.io/control-plane"] = "true"
		}
		st := corev1.ConditionTrue
		if !ready {
			st = corev1.ConditionFalse
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
		return n
	}
	installed := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "upgrade-repo", Name: sequencer.InstalledConfigMap},
		Data:       map[string]string{sequencer.InstalledVersionKey: "v1.5.2"},
	}
	version := &v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: "v1.6.0"}, Spec: v1beta1.VersionSpec{ISOURL: "http://x/h.iso"}}
	running := &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: "older", CreationTimestamp: metav1.NewTime(time.Unix(1, 0))},
		Spec:       v1beta1.UpgradePlanSpec{Version: "v1.6.0"},
		Status:     v1beta1.UpgradePlanStatus{Phase: v1beta1.PhaseImagePreloading},
	}
	done := running.DeepCopy()
	done.Name, done.Status.Phase = "done", v1beta1.PhaseSucceeded
	target := writePlanFile(t, "target.yaml", planTargetYAML)
	kubeadm := writePlanFile(t, "kubeadm.yaml", planKubeadmYAML)

	tests := []struct {
		name    string
		objs    []client.Object
		args    []string
		allowed bool
		results map[string]string
		// current is the control plane's Kubernetes version the report shows.
		current string
	}{
		{
			name: "allowed", objs: []client.Object{installed, version, done, node("cp-1", true, true), node("w-1", false, true)},
			args: []string{"--release", target}, allowed: true,
			results: map[string]string{"VersionExists": "pass", "NoPlanInFlight": "pass", "NodesReady": "pass", "CurrentVersion": "pass"},
		},
		{
			name: "without release metadata", objs: []client.Object{installed, version, node("cp-1", true, true)}, allowed: true,
			results: map[string]string{"MinUpgradableVersion": "pass"},
		},
		{
			name: "no version object", objs: []client.Object{installed, node("cp-1", true, true)},
			results: map[string]string{"VersionExists": "fail"},
		},
		{
			name: "plan in flight", objs: []client.Object{installed, version, running, node("cp-1", true, true)},
			results: map[string]string{"NoPlanInFlight": "fail"},
		},
		{
			name: "node not ready", objs: []client.Object{installed, version, node("cp-1", true, true), node("w-1", false, false)},
			results: map[string]string{"NodesReady": "fail"},
		},
		{
			name: "node not ready forced", objs: []client.Object{installed, version, node("cp-1", true, true), node("w-1", false, false)},
			args: []string{"--force"}, allowed: true, results: map[string]string{"NodesReady": "warn"},
		},
		{
			name: "installed version unknown", objs: []client.Object{version, node("cp-1", true, true)},
			results: map[string]string{"CurrentVersion": "fail"},
		},
		{
			name: "kubernetes minor upgrade judged from the control plane's kubelets", args: []string{"--release", kubeadm}, allowed: true,
			objs:    []client.Object{installed, version, node("cp-1", true, true, "v1.33.5"), node("w-1", false, true, "v1.33.4")},
			results: map[string]string{"KubernetesNoDowngrade": "pass", "KubernetesMinorStep": "pass", "KubeletVersionSkew": "pass"},
			current: "v1.33.5",
		},
		{
			name: "the API server's version comes first", args: []string{"--release", kubeadm, "--current-kubernetes", "v1.32.0"},
			objs:    []client.Object{installed, version, node("cp-1", true, true, "v1.32.0")},
			results: map[string]string{"KubernetesMinorStep": "fail"},
			current: "v1.32.0",
		},
		{
			name: "kubernetes downgrade and kubelets newer than the release", args: []string{"--release", kubeadm},
			objs:    []client.Object{installed, version, node("cp-1", true, true, "v1.35.0"), node("w-1", false, true, "v1.35.0")},
			results: map[string]string{"KubernetesNoDowngrade": "fail", "KubeletVersionSkew": "fail"},
			current: "v1.35.0",
		},
		{
			name: "a kubelet newer than the control plane", args: []string{"--release", kubeadm},
			objs:    []client.Object{installed, version, node("cp-1", true, true, "v1.34.0"), node("w-1", false, true, "v1.34.1")},
			results: map[string]string{"KubernetesNoDowngrade": "pass", "KubeletVersionSkew": "fail"},
			current: "v1.34.0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(tt.objs...).Build()
			o := planctl.PreviewOptions{To: "v1.6.0", Namespace: "upgrade-repo"}
			for i := 0; i < len(tt.args); i++ {
				switch tt.args[i] {
				case "--release":
					i++
					o.Release = tt.args[i]
				case "--force":
					o.Force = true
				case "--current-kubernetes":
					i++
					o.CurrentKubernetes = tt.args[i]
				}
			}
			rep, err := planctl.Preview(t.Context(), o, c, http.DefaultClient)
			require.NoError(t, err)
			require.Equal(t, tt.allowed, rep.Allowed, "%+v", rep.Checks)
			got := map[string]string{}
			for _, ch := range rep.Checks {
				got[ch.Name] = ch.Result
			}
			for name, want := range tt.results {
				require.Equal(t, want, got[name], "check %s", name)
			}
			require.Equal(t, []string{"cp-1"}, rep.ControlPlaneNodes)
			require.Equal(t, tt.current, rep.CurrentKubernetes)
		})
	}
}
