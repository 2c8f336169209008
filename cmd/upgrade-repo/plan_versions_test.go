package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/planctl"
	"github.com/upgrade-repo/upgrade-repo/planview"
)

// TestPlanVersionsGolden pins `plan --kubeconfig` without --to: the cluster's Versions, newest
// first, each judged by the policies against the installed v1.5.2.
func TestPlanVersionsGolden(t *testing.T) {
	t.Parallel()
	version := func(name string, reachable metav1.ConditionStatus) client.Object {
		v := &v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1beta1.VersionSpec{ISOURL: "https://releases.example.com/" + name + ".iso", ISOChecksum: "sha512:" + applySum}}
		if reachable != "" {
			v.Status.Conditions = []metav1.Condition{{Type: v1beta1.VersionURLReachable, Status: reachable, Reason: "Test", LastTransitionTime: metav1.NewTime(upgradeT0)}}
		}
		return v
	}
	c := applyCluster(t, false, version("v1.4.0", metav1.ConditionTrue), version("v1.5.2", metav1.ConditionTrue),
		version("v1.6.0", metav1.ConditionTrue), version("v1.7.0-rc1", metav1.ConditionFalse), version("v1.6.1", ""))
	var b bytes.Buffer
	got, err := planctl.Versions(t.Context(), c, planctl.PreviewOptions{Namespace: "upgrade-repo-system", CurrentKubernetes: "v1.32.7"}, http.DefaultClient)
	require.NoError(t, err)
	require.NoError(t, planview.WriteVersions(&b, got))
	golden := filepath.Join("testdata", "plan-versions.golden")
	if *updateGolden {
		require.NoError(t, os.WriteFile(golden, b.Bytes(), 0o644))
	}
	want, rerr := os.ReadFile(golden)
	require.NoError(t, rerr, "go test ./cmd/upgrade-repo -run Golden -update writes it")
	require.Equal(t, string(want), b.String())
	allowed := map[string]bool{}
	for _, v := range got {
		allowed[v.Name] = v.Allowed
	}
	require.Equal(t, map[string]bool{"v1.4.0": false, "v1.5.2": true, "v1.6.0": true, "v1.6.1": true, "v1.7.0-rc1": false}, allowed)
}
