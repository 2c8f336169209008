package sequencer_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/yaml"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// origin serves a 4096-byte ISO at /ok.iso as presigned-URL stores do (HEAD refused, ranges
// served), the whole file to any request at /whole.iso, a bad Content-Range at /bad.iso and
// 403 elsewhere.
func origin(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method != http.MethodGet:
			w.WriteHeader(http.StatusForbidden)
		case r.URL.Path == "/ok.iso" && r.Header.Get("Range") == "bytes=0-0":
			w.Header().Set("Content-Range", "bytes 0-0/4096")
			w.WriteHeader(http.StatusPartialContent)
			_, _ = w.Write([]byte{0})
		case r.URL.Path == "/whole.iso":
			w.Header().Set("Content-Length", "4096")
			_, _ = w.Write(make([]byte, 4096))
		case r.URL.Path == "/bad.iso":
			w.Header().Set("Content-Range", "bytes 0-0/*")
			w.WriteHeader(http.StatusPartialContent)
		default:
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestVersionReconcilerChecksTheURL(t *testing.T) {
	t.Parallel()
	base := origin(t)
	tests := []struct {
		name, path      string
		status          metav1.ConditionStatus
		reason, message string
		size            int64
		requeue         bool
	}{
		{name: "ranges served", path: "/ok.iso?X-Amz-Signature=secret", status: metav1.ConditionTrue, reason: "RangesSupported", message: "4096 bytes; the origin serves ranges", size: 4096},
		{name: "whole file only", path: "/whole.iso", status: metav1.ConditionTrue, reason: "RangesUnsupported", message: "4096 bytes; the origin sends the whole file", size: 4096},
		{name: "size not given", path: "/bad.iso", status: metav1.ConditionFalse, reason: "Unreachable", message: `Content-Range "bytes 0-0/*" does not give the size`, requeue: true},
		{name: "refused", path: "/missing.iso?X-Amz-Signature=secret", status: metav1.ConditionFalse, reason: "Unreachable", message: "/missing.iso: status 403 Forbidden", requeue: true},
		{name: "nothing listens", path: "closed", status: metav1.ConditionFalse, reason: "Unreachable", message: "connection refused", requeue: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := base + tt.path
			if tt.path == "closed" {
				srv := httptest.NewServer(http.NotFoundHandler())
				u = srv.URL + "/x.iso"
				srv.Close()
			}
			v := &v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: "v1.6.0", Generation: 2}, Spec: v1beta1.VersionSpec{ISOURL: u, ISOChecksum: testChecksum}}
			c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(v).WithStatusSubresource(&v1beta1.Version{}).Build()
			r, err := sequencer.NewVersionReconciler(c, slog.New(slog.NewTextHandler(t.Output(), nil)), nil,
				func() time.Time { return time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC) })
			require.NoError(t, err)
			res, err := r.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "v1.6.0"}})
			require.NoError(t, err)
			require.Equal(t, tt.requeue, res.RequeueAfter > 0)
			var got v1beta1.Version
			require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: "v1.6.0"}, &got))
			cond := meta.FindStatusCondition(got.Status.Conditions, v1beta1.VersionURLReachable)
			require.NotNil(t, cond)
			require.Equal(t, tt.status, cond.Status)
			require.Equal(t, tt.reason, cond.Reason)
			require.Contains(t, cond.Message, tt.message)
			require.NotContains(t, cond.Message, "secret", "the URL's signature is redacted")
			require.Equal(t, tt.size, got.Status.ISOSize)
			require.Equal(t, int64(2), got.Status.ObservedGeneration)
		})
	}
}

func TestReadInstalled(t *testing.T) {
	t.Parallel()
	installed := func(name string, status metav1.ConditionStatus, at int) *v1beta1.Version {
		v := &v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1beta1.VersionSpec{ISOURL: "http://o/" + name + ".iso", ISOChecksum: testChecksum}}
		v.Status.Conditions = []metav1.Condition{{Type: v1beta1.VersionInstalled, Status: status, Reason: "Test",
			LastTransitionTime: metav1.NewTime(time.Date(2026, 1, at, 0, 0, 0, 0, time.UTC))}}
		return v
	}
	cm := func(version, rel string) *corev1.ConfigMap {
		c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: sequencer.InstalledConfigMap},
			Data: map[string]string{sequencer.InstalledVersionKey: version}}
		if rel != "" {
			c.Data[sequencer.InstalledReleaseKey] = rel
		}
		return c
	}
	tests := []struct {
		name         string
		objs         []client.Object
		want, source string
		kubernetes   string
		err          string
	}{
		{name: "nothing recorded"},
		{name: "the configmap alone", objs: []client.Object{cm("v1.5.2", `{"harvester":"v1.5.2","kubernetes":"v1.32.7+rke2r1"}`)},
			want: "v1.5.2", source: "configmap upgrade-repo/upgrade-repo-installed", kubernetes: "v1.32.7+rke2r1"},
		{name: "the installed version wins over an older configmap", objs: []client.Object{cm("v1.5.2", `{"kubernetes":"old"}`), installed("v1.6.0", metav1.ConditionTrue, 2)},
			want: "v1.6.0", source: "version v1.6.0"},
		{name: "the configmap's release of the same version", objs: []client.Object{cm("v1.6.0", `{"kubernetes":"v1.33.3+rke2r1"}`), installed("v1.6.0", metav1.ConditionTrue, 2)},
			want: "v1.6.0", source: "version v1.6.0", kubernetes: "v1.33.3+rke2r1"},
		{name: "the latest of two installed", objs: []client.Object{installed("v1.6.0", metav1.ConditionTrue, 2), installed("v1.5.2", metav1.ConditionTrue, 1)},
			want: "v1.6.0", source: "version v1.6.0"},
		{name: "a superseded version is not installed", objs: []client.Object{installed("v1.6.0", metav1.ConditionFalse, 2), cm("v1.5.2", "")},
			want: "v1.5.2", source: "configmap upgrade-repo/upgrade-repo-installed"},
		{name: "a damaged release record", objs: []client.Object{cm("v1.5.2", "{")}, err: "configmap upgrade-repo/upgrade-repo-installed key release"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(tt.objs...).WithStatusSubresource(&v1beta1.Version{}).Build()
			in, err := sequencer.ReadInstalled(t.Context(), c, testNS)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, in.Version)
			require.Equal(t, tt.source, in.Source)
			if tt.kubernetes == "" {
				require.Nil(t, in.Release)
			} else {
				require.Equal(t, tt.kubernetes, in.Release.Kubernetes)
			}
		})
	}
}

func TestSeedInstalled(t *testing.T) {
	t.Parallel()
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).Build()
	created, err := sequencer.SeedInstalled(t.Context(), c, testNS, "v1.5.2")
	require.NoError(t, err)
	require.True(t, created)
	created, err = sequencer.SeedInstalled(t.Context(), c, testNS, "v1.4.0")
	require.NoError(t, err)
	require.False(t, created, "a recorded version is never overwritten")
	in, err := sequencer.ReadInstalled(t.Context(), c, testNS)
	require.NoError(t, err)
	require.Equal(t, "v1.5.2", in.Version)
	created, err = sequencer.SeedInstalled(t.Context(), c, testNS, "")
	require.NoError(t, err)
	require.False(t, created)
}

// TestReconcileRecordsTheVersion: a plan that succeeds marks its Version Downloaded, Verified and
// Installed, the one installed before Superseded, and the next plan judges against it.
func TestReconcileRecordsTheVersion(t *testing.T) {
	t.Parallel()
	old := &v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: "v1.5.2"}, Spec: v1beta1.VersionSpec{ISOURL: "http://origin/v1.5.2.iso", ISOChecksum: testChecksum}}
	old.Status.Conditions = []metav1.Condition{{Type: v1beta1.VersionInstalled, Status: metav1.ConditionTrue, Reason: "PlanSucceeded",
		LastTransitionTime: metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))}}
	k := newCluster(t, newPlan("up", nil), old)
	p := k.run("up", 300, "", 2, 2, nil)
	require.Equal(t, v1beta1.PhaseSucceeded, p.Status.Phase, "conditions: %+v", p.Status.Conditions)
	var v, o v1beta1.Version
	require.NoError(t, k.c.Get(t.Context(), client.ObjectKey{Name: "v1.6.0"}, &v))
	require.NoError(t, k.c.Get(t.Context(), client.ObjectKey{Name: "v1.5.2"}, &o))
	for _, typ := range []string{v1beta1.VersionDownloaded, v1beta1.VersionVerified, v1beta1.VersionInstalled} {
		require.True(t, meta.IsStatusConditionTrue(v.Status.Conditions, typ), "%s: %+v", typ, v.Status.Conditions)
	}
	require.Equal(t, "up", v.Status.InstalledBy)
	c := meta.FindStatusCondition(o.Status.Conditions, v1beta1.VersionInstalled)
	require.Equal(t, [2]string{string(metav1.ConditionFalse), "Superseded"}, [2]string{string(c.Status), c.Reason})
	in, err := sequencer.ReadInstalled(t.Context(), k.c, testNS)
	require.NoError(t, err)
	require.Equal(t, "v1.6.0", in.Version)
	require.Equal(t, "version v1.6.0", in.Source)
	require.Equal(t, "v1.33.3+rke2r1", in.Release.Kubernetes, "the configmap keeps the release of the same version")
	require.Equal(t, "v1.5.2", p.Status.PreviousVersion, fmt.Sprint("judged against ", in.Source))
}

// TestReconcileUpgradeDesignTestPlan runs the upgrade design's test-plan objects (the Version and
// the UpgradePlan as the design writes them, with the defaults the CRD gives) on a sequencer
// configured as the chart's defaults configure it: no default image, the image repository
// rancher/harvester-upgrade. The plan runs that repository tagged with its version.
func TestReconcileUpgradeDesignTestPlan(t *testing.T) {
	t.Parallel()
	var v v1beta1.Version
	var p v1beta1.UpgradePlan
	for file, obj := range map[string]any{"version.yaml": &v, "upgradeplan.yaml": &p} {
		data, err := os.ReadFile(filepath.Join("..", "api", "v1beta1", "testdata", "hep", file))
		require.NoError(t, err)
		require.NoError(t, yaml.UnmarshalStrict(data, obj))
	}
	// What the API server does: a name from generateName, the CRD's default mode.
	p.Name, p.Spec.Mode = p.GenerateName+"x7k2q", v1beta1.ModeAutomatic
	k := newCluster(t, &p, &v)
	var cm corev1.ConfigMap
	require.NoError(t, k.c.Get(t.Context(), client.ObjectKey{Namespace: testNS, Name: sequencer.InstalledConfigMap}, &cm))
	cm.Data[sequencer.InstalledVersionKey] = "v1.5.0"
	require.NoError(t, k.c.Update(t.Context(), &cm))
	r := []sequencer.Option{sequencer.WithUpgradeImage(""), sequencer.WithUpgradeImageRepository("rancher/harvester-upgrade")}
	k.opts = r
	images := map[string]bool{}
	got := k.run(p.Name, 300, "", 1, 0, func(*v1beta1.UpgradePlan) {
		var jobs batchv1.JobList
		require.NoError(t, k.c.List(t.Context(), &jobs, client.InNamespace(testNS)))
		for _, j := range jobs.Items {
			images[j.Spec.Template.Spec.Containers[0].Image] = true
		}
	})
	require.Equal(t, v1beta1.PhaseSucceeded, got.Status.Phase, "conditions: %+v", got.Status.Conditions)
	require.Equal(t, map[string]bool{"rancher/harvester-upgrade:v1.5.2": true}, images)
	in, err := sequencer.ReadInstalled(t.Context(), k.c, testNS)
	require.NoError(t, err)
	require.Equal(t, "v1.5.2", in.Version)
	// The release's images, read through the repo, are on the Version for the agents' registries.
	require.NoError(t, k.c.Get(t.Context(), client.ObjectKey{Name: v.Name}, &v))
	require.Equal(t, []string{"docker.io/rancher/harvester:v1.5.2", "docker.io/rancher/rke2-runtime:v1.33.3-rke2r1"}, v.Status.Images)
	// With what an agent read from the ISO's archives: the digests the registries pin tags to.
	require.Equal(t, []v1beta1.ImageDigest{{Ref: "docker.io/rancher/harvester:v1.5.2", Config: "sha256:" + strings.Repeat("a", 64)}}, v.Status.ImageDigests)
}
