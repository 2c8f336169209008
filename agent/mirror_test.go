package agent

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/registry"
)

func version(name string, images []string, installed metav1.ConditionStatus) v1beta1.Version {
	v := v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1beta1.VersionStatus{Images: images}}
	if installed != "" {
		v.Status.Conditions = []metav1.Condition{{Type: v1beta1.VersionInstalled, Status: installed, Reason: "X"}}
	}
	return v
}

func plan(version string, phase v1beta1.Phase) v1beta1.UpgradePlan {
	return v1beta1.UpgradePlan{Spec: v1beta1.UpgradePlanSpec{Version: version}, Status: v1beta1.UpgradePlanStatus{Phase: phase}}
}

func TestServedVersions(t *testing.T) {
	a, b := []string{"docker.io/x/a:1"}, []string{"docker.io/x/b:2"}
	tests := []struct {
		name     string
		versions []v1beta1.Version
		plans    []v1beta1.UpgradePlan
		want     map[string][]string
	}{
		{name: "nothing recorded", want: map[string][]string{}},
		{name: "the installed release", versions: []v1beta1.Version{version("v1", a, metav1.ConditionTrue)}, want: map[string][]string{"v1": a}},
		{name: "a superseded release is not served", versions: []v1beta1.Version{version("v1", a, metav1.ConditionFalse), version("v2", b, metav1.ConditionTrue)},
			want: map[string][]string{"v2": b}},
		{name: "the release a plan upgrades to", versions: []v1beta1.Version{version("v1", a, metav1.ConditionTrue), version("v2", b, "")},
			plans: []v1beta1.UpgradePlan{plan("v2", v1beta1.PhaseImagePreloading)}, want: map[string][]string{"v1": a, "v2": b}},
		{name: "a failed plan's release is not served", versions: []v1beta1.Version{version("v2", b, "")},
			plans: []v1beta1.UpgradePlan{plan("v2", v1beta1.PhaseFailed)}, want: map[string][]string{}},
		{name: "a Version without recorded images", versions: []v1beta1.Version{version("v1", nil, metav1.ConditionTrue)}, want: map[string][]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, servedVersions(tt.versions, tt.plans, nil))
		})
	}
}

// An agent whose node preloaded nothing (it joined after the upgrade) serves the images the
// cluster records for its installed release, and stops when the release is superseded.
func TestFollowVersions(t *testing.T) {
	refs := []string{"docker.io/rancher/harvester:v1.5.2", "docker.io/rancher/harvester-webhook:v1.5.2"}
	v := version("v1.5.2", refs, metav1.ConditionTrue)
	kube := kubeFake(t, &v)
	lists := &registry.Lists{}
	lists.Set("v1.4.0", []string{"docker.io/rancher/harvester:v1.4.0"}) // preloaded by the node itself
	a := &Agent{log: slog.New(slog.DiscardHandler), kube: kube, mirror: &Mirror{Lists: lists}}
	go a.followVersions(t.Context(), 10*time.Millisecond)
	want := append([]string{"docker.io/rancher/harvester:v1.4.0"}, refs...)
	require.Eventually(t, func() bool { return len(lists.Refs()) == 3 }, 10*time.Second, 10*time.Millisecond)
	require.ElementsMatch(t, want, lists.Refs())

	// Superseded: its list goes, the node's own stays.
	var got v1beta1.Version
	require.NoError(t, kube.Get(t.Context(), client.ObjectKey{Name: "v1.5.2"}, &got))
	got.Status.Conditions[0].Status = metav1.ConditionFalse
	require.NoError(t, kube.Update(t.Context(), &got))
	require.Eventually(t, func() bool { return len(lists.Refs()) == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"docker.io/rancher/harvester:v1.4.0"}, lists.Refs())
}
