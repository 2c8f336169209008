package suc_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/upgrade-repo/upgrade-repo/sequencer/suc"
)

func TestPlans(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		opts        suc.Options
		wantImage   string
		wantVersion string
		wantConc    int64
		wantErr     string
	}{
		{
			name:      "tagged image",
			opts:      suc.Options{UpgradePlan: "up", Namespace: "cattle-system", Image: "registry:5000/harvester/upgrade:v1.6.0", Version: "v1.6.0", RepoURL: "http://repo:8080", Concurrency: 3},
			wantImage: "registry:5000/harvester/upgrade", wantVersion: "v1.6.0", wantConc: 3,
		},
		{
			name:      "untagged image takes the version",
			opts:      suc.Options{UpgradePlan: "up", Namespace: "cattle-system", Image: "registry:5000/harvester/upgrade", Version: "v1.6.1"},
			wantImage: "registry:5000/harvester/upgrade", wantVersion: "v1.6.1", wantConc: 1,
		},
		{name: "no namespace", opts: suc.Options{UpgradePlan: "up", Image: "x:1"}, wantErr: "required"},
		{name: "no version at all", opts: suc.Options{UpgradePlan: "up", Namespace: "n", Image: "x"}, wantErr: "has no tag"},
		{name: "digest and no version", opts: suc.Options{UpgradePlan: "up", Namespace: "n", Image: "x@sha256:abc"}, wantErr: "has no tag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			plans, err := suc.Plans(tt.opts)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Len(t, plans, 2)
			server, agent := plans[0], plans[1]
			for _, p := range plans {
				require.Equal(t, "upgrade.cattle.io/v1", p.GetAPIVersion())
				require.Equal(t, "Plan", p.GetKind())
				require.Equal(t, tt.opts.Namespace, p.GetNamespace())
				require.Equal(t, "up", p.GetLabels()[suc.PlanLabel])
				v, _, _ := unstructured.NestedString(p.Object, "spec", "version")
				require.Equal(t, tt.wantVersion, v)
				img, _, _ := unstructured.NestedString(p.Object, "spec", "upgrade", "image")
				require.Equal(t, tt.wantImage, img)
				cordon, _, _ := unstructured.NestedBool(p.Object, "spec", "cordon")
				require.True(t, cordon)
				ignoreDS, _, _ := unstructured.NestedBool(p.Object, "spec", "drain", "ignoreDaemonSets")
				require.True(t, ignoreDS)
				envs, _, _ := unstructured.NestedSlice(p.Object, "spec", "upgrade", "envs")
				require.Contains(t, envs, map[string]any{"name": "UPGRADE_REPO_URL", "value": tt.opts.RepoURL})
			}
			require.Equal(t, "up-server", server.GetName())
			require.Equal(t, "up-agent", agent.GetName())
			c, _, _ := unstructured.NestedInt64(server.Object, "spec", "concurrency")
			require.Equal(t, int64(1), c, "control-plane nodes go one at a time")
			c, _, _ = unstructured.NestedInt64(agent.Object, "spec", "concurrency")
			require.Equal(t, tt.wantConc, c)
			sel, _, _ := unstructured.NestedSlice(server.Object, "spec", "nodeSelector", "matchExpressions")
			require.Equal(t, []any{map[string]any{"key": suc.ControlPlaneLabel, "operator": "Exists"}}, sel)
			sel, _, _ = unstructured.NestedSlice(agent.Object, "spec", "nodeSelector", "matchExpressions")
			require.Equal(t, []any{map[string]any{"key": suc.ControlPlaneLabel, "operator": "DoesNotExist"}}, sel)
			_, hasPrepare, _ := unstructured.NestedMap(server.Object, "spec", "prepare")
			require.False(t, hasPrepare)
			args, _, _ := unstructured.NestedSlice(agent.Object, "spec", "prepare", "args")
			require.Equal(t, []any{"prepare", "up-server"}, args)
			// The objects must be valid JSON-able unstructured content (deep-copyable).
			require.NotPanics(t, func() { _ = agent.DeepCopy() })
		})
	}
}

func TestUpgraded(t *testing.T) {
	t.Parallel()
	plan := func(name, hash string) unstructured.Unstructured {
		u := unstructured.Unstructured{Object: map[string]any{}}
		u.SetName(name)
		if hash != "" {
			require.NoError(t, unstructured.SetNestedField(u.Object, hash, "status", "latestHash"))
		}
		return u
	}
	node := func(name string, cp bool, labels map[string]string) corev1.Node {
		l := map[string]string{}
		for k, v := range labels {
			l[k] = v
		}
		if cp {
			l[suc.ControlPlaneLabel] = "true"
		}
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
	}
	nodes := []corev1.Node{
		node("cp-1", true, map[string]string{"plan.upgrade.cattle.io/up-server": "h1"}),
		node("cp-2", true, map[string]string{"plan.upgrade.cattle.io/up-server": "old"}),
		node("w-1", false, map[string]string{"plan.upgrade.cattle.io/up-agent": "h2"}),
		node("w-2", false, map[string]string{"plan.upgrade.cattle.io/up-server": "h1"}),
	}
	tests := []struct {
		name  string
		plans []unstructured.Unstructured
		want  []string
	}{
		{name: "no plans", want: nil},
		{name: "no hash yet", plans: []unstructured.Unstructured{plan("up-server", ""), plan("up-agent", "")}, want: nil},
		{name: "hashes", plans: []unstructured.Unstructured{plan("up-server", "h1"), plan("up-agent", "h2")}, want: []string{"cp-1", "w-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, suc.Upgraded("up", tt.plans, nodes))
		})
	}
}
