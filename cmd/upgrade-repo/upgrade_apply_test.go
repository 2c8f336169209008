package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/cli"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden with the current output")

// applySum is the checksum of the test ISO: 128 hex digits.
var applySum = strings.Repeat("ab", 64)

// applyNode is a Ready node with a kubelet of v1.32.7.
func applyNode(name string, controlPlane, ready bool) *corev1.Node {
	n := upgradeTestNode(name, "v1.32.7", controlPlane)
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
	return n
}

// applyCluster is a cluster at v1.5.2 (the installed ConfigMap) with control-plane node cp-a,
// worker w-1 (Ready unless notReady) and objs.
func applyCluster(t *testing.T, notReady bool, objs ...client.Object) client.WithWatch {
	t.Helper()
	s, err := kubeclient.Scheme()
	require.NoError(t, err)
	objs = append(objs, applyNode("cp-a", true, true), applyNode("w-1", false, !notReady),
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "upgrade-repo-system", Name: sequencer.InstalledConfigMap},
			Data:       map[string]string{sequencer.InstalledVersionKey: "v1.5.2"},
		})
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
}

// sequencerStandIn plays the sequencer's part: every plan created through it is already in
// phase, with a Degraded reason when Failed; an empty phase leaves the plan unstarted.
type sequencerStandIn struct {
	client.WithWatch
	phase v1beta1.Phase
}

func (s *sequencerStandIn) Create(ctx context.Context, o client.Object, opts ...client.CreateOption) error {
	if p, ok := o.(*v1beta1.UpgradePlan); ok && s.phase != "" {
		p.Status.Phase = s.phase
		p.Status.PhaseTransitionTimestamps = []v1beta1.PhaseTransitionTimestamp{{Phase: s.phase, PhaseTransitionTimestamp: metav1.NewTime(upgradeT0)}}
		if s.phase == v1beta1.PhaseFailed {
			p.Status.FailedPhase = v1beta1.PhaseNodeUpgrading
			p.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionDegraded, Status: metav1.ConditionTrue,
				Reason: "NodeUpgradeFailed", Message: "node w-1: job failed", LastTransitionTime: metav1.NewTime(upgradeT0)}}
		}
	}
	return s.WithWatch.Create(ctx, o, opts...)
}

func applyOpts(mod func(*upgradeApplyOptions)) upgradeApplyOptions {
	o := upgradeApplyOptions{Options: kubeclient.Options{Namespace: "upgrade-repo-system"}, yes: true}
	o.req.ISOURL = "https://releases.example.com/v1.6.0/harvester-v1.6.0-amd64.iso"
	o.req.Checksum = "sha512:" + applySum
	if mod != nil {
		mod(&o)
	}
	return o
}

// created lists the Versions and UpgradePlans in the cluster by name.
func created(t *testing.T, c client.Reader) (versions, plans []string) {
	t.Helper()
	var vl v1beta1.VersionList
	require.NoError(t, c.List(t.Context(), &vl))
	for _, v := range vl.Items {
		versions = append(versions, v.Name)
	}
	var pl v1beta1.UpgradePlanList
	require.NoError(t, c.List(t.Context(), &pl))
	for _, p := range pl.Items {
		plans = append(plans, p.Name)
	}
	return versions, plans
}

func TestUpgradeApply(t *testing.T) {
	t.Parallel()
	sums := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/rel/harvester-v1.6.0-amd64.iso.sha512" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "%s  harvester-v1.6.0-amd64.iso\n", strings.ToUpper(applySum))
	}))
	t.Cleanup(sums.Close)
	otherPlan := upgradeTestPlan("other", 0, v1beta1.PhaseImagePreloading)
	// An ISO of v1.6.0 that upgrades from v1.5.3 on: the installed v1.5.2 is refused.
	iso := planISO(t, "harvester: v1.6.0\nminUpgradableVersion: v1.5.3\n", "docker.io/rancher/harvester:v1.6.0\n", "docker.io/rancher/rke2-runtime:v1.33.3-rke2r1\n")
	isoSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, iso) }))
	t.Cleanup(isoSrv.Close)
	refusingISO := isoSrv.URL
	tests := []struct {
		name         string
		opts         upgradeApplyOptions
		objs         []client.Object
		notReady     bool
		interactive  bool
		answer       string
		phase        v1beta1.Phase // the stand-in sequencer's
		wantErr      error         // errors.Is
		wantErrText  string
		wantStatus   int // the exit status main gives the error
		wantVersions []string
		wantPlans    []string
		wantOut      []string
	}{
		{
			name: "creates the Version and the plan and follows it to Succeeded", opts: applyOpts(nil), phase: v1beta1.PhaseSucceeded,
			wantVersions: []string{"v1.6.0"}, wantPlans: []string{"to-v1-6-0"},
			wantOut: []string{"Version:   v1.6.0 (to create)", "The upgrade is allowed.", "Created version v1.6.0; created upgradeplan to-v1-6-0", "Phase:       Succeeded", "Installed:   v1.5.2"},
		},
		{
			name: "names given, checksum from the .sha512 file beside the ISO", phase: v1beta1.PhaseSucceeded,
			opts: applyOpts(func(o *upgradeApplyOptions) {
				o.req.ISOURL, o.req.Checksum = sums.URL+"/rel/harvester-v1.6.0-amd64.iso", ""
				o.req.Version, o.req.Plan, o.req.UpgradeImage = "v1.6.0", "up", "example.com/up:1"
			}),
			wantVersions: []string{"v1.6.0"}, wantPlans: []string{"up"},
			wantOut: []string{"Checksum:  sha512:" + applySum + " (read from " + sums.URL + "/rel/harvester-v1.6.0-amd64.iso.sha512)"},
		},
		{
			name: "refused from the release read at the ISO's URL: nothing created", opts: applyOpts(func(o *upgradeApplyOptions) {
				o.req.ISOURL = refusingISO + "/rel/harvester-v1.6.0-amd64.iso"
			}),
			wantErr: errNotAllowed, wantErrText: "the upgrade is not allowed (MinUpgradableVersion failed): nothing was created", wantStatus: 1,
			wantOut: []string{"MinUpgradableVersion    required    fail"},
		},
		{
			name: "no checksum file", opts: applyOpts(func(o *upgradeApplyOptions) { o.req.ISOURL, o.req.Checksum = sums.URL+"/none/v1.6.0.iso", "" }),
			wantErrText: "no --iso-checksum, and the .sha512 file beside the ISO: checksum file " + sums.URL + "/none/v1.6.0.iso.sha512: 404 Not Found",
			wantStatus:  1,
		},
		{
			name: "refused: a node is not Ready; nothing created", opts: applyOpts(nil), notReady: true,
			wantErr: errNotAllowed, wantErrText: "the upgrade is not allowed (NodesReady failed): nothing was created", wantStatus: 1,
		},
		{
			name: "refused: another plan runs", opts: applyOpts(nil), objs: []client.Object{otherPlan},
			wantErr: errNotAllowed, wantPlans: []string{"other"}, wantStatus: 1,
		},
		{
			name: "dry run: the judgement and the drains, nothing created", opts: applyOpts(func(o *upgradeApplyOptions) { o.dryRun = true }),
			objs: []client.Object{
				&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1"}, Spec: corev1.PodSpec{NodeName: "w-1"}},
				&corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "proxy-x", OwnerReferences: []metav1.OwnerReference{{
						APIVersion: "apps/v1", Kind: "DaemonSet", Name: "proxy", UID: "u", Controller: ptrTo(true),
					}}},
					Spec: corev1.PodSpec{NodeName: "w-1"},
				},
				&corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: "upgrade-repo-system", Name: "sequencer-0", Labels: map[string]string{"app.kubernetes.io/component": "sequencer"}},
					Spec:       corev1.PodSpec{NodeName: "cp-a"},
				},
			},
			wantOut: []string{"Node order: control plane cp-a one at a time, then w-1", "  cp-a (control plane): nothing to evict",
				"  w-1: 1 pods to evict: default/web-1", "Dry run: nothing was created."},
		},
		{
			name: "no terminal and no --yes: refused, nothing created", opts: applyOpts(func(o *upgradeApplyOptions) { o.yes = false }),
			wantErr: errUsage, wantErrText: "give --yes", wantStatus: 2,
		},
		{
			name: "asked on a terminal, answered no", opts: applyOpts(func(o *upgradeApplyOptions) { o.yes = false }),
			interactive: true, answer: "n\n", wantErrText: "not confirmed: nothing was created", wantOut: []string{"Proceed? [y/N] "}, wantStatus: 1,
		},
		{
			name: "asked on a terminal, answered yes", opts: applyOpts(func(o *upgradeApplyOptions) { o.yes = false }),
			interactive: true, answer: "y\n", phase: v1beta1.PhaseSucceeded, wantVersions: []string{"v1.6.0"}, wantPlans: []string{"to-v1-6-0"},
		},
		{
			name: "the plan fails: exit 1 with its reason", opts: applyOpts(nil), phase: v1beta1.PhaseFailed,
			wantVersions: []string{"v1.6.0"}, wantPlans: []string{"to-v1-6-0"},
			wantErrText: "upgradeplan to-v1-6-0 failed in NodeUpgrading: NodeUpgradeFailed: node w-1: job failed", wantStatus: 1,
		},
		{
			name: "timeout: errTimeout (exit 3), the plan stays", opts: applyOpts(func(o *upgradeApplyOptions) { o.timeout = 50 * time.Millisecond }),
			wantErr: errTimeout, wantVersions: []string{"v1.6.0"}, wantPlans: []string{"to-v1-6-0"},
			wantErrText: "timed out after 50ms: upgradeplan to-v1-6-0 is not started; the upgrade goes on (upgrade-repo upgrade status to-v1-6-0 -w)",
			wantStatus:  3,
		},
		{
			name: "a Version of that name for another ISO", opts: applyOpts(nil),
			objs: []client.Object{&v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: "v1.6.0"},
				Spec: v1beta1.VersionSpec{ISOURL: "https://elsewhere.example.com/x.iso", ISOChecksum: applySum}}},
			wantErrText: "version v1.6.0 exists for another ISO", wantVersions: []string{"v1.6.0"}, wantStatus: 1,
		},
		{
			name: "the same Version exists: reused", opts: applyOpts(nil), phase: v1beta1.PhaseSucceeded,
			objs: []client.Object{&v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: "v1.6.0"},
				Spec: v1beta1.VersionSpec{ISOURL: "https://releases.example.com/v1.6.0/harvester-v1.6.0-amd64.iso", ISOChecksum: strings.ToUpper(applySum)}}},
			wantVersions: []string{"v1.6.0"}, wantPlans: []string{"to-v1-6-0"}, wantOut: []string{"(exists with this ISO, reused)", "Reused version v1.6.0"},
		},
		{
			name: "no version in the ISO's name", opts: applyOpts(func(o *upgradeApplyOptions) { o.req.ISOURL = "https://example.com/latest.iso" }),
			wantErr: errUsage, wantErrText: "give the Version's name (--version)", wantStatus: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &sequencerStandIn{WithWatch: applyCluster(t, tt.notReady, tt.objs...), phase: tt.phase}
			a, stdout, _ := upgradeTestApp()
			env := applyEnv{c: c, hc: loopbackOnly(), stdin: strings.NewReader(tt.answer), interactive: tt.interactive, now: upgradeClock}
			err := upgradeApply(t.Context(), a, env, tt.opts)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			}
			if tt.wantErrText != "" {
				require.ErrorContains(t, err, tt.wantErrText)
			}
			if tt.wantErr == nil && tt.wantErrText == "" {
				require.NoError(t, err)
			}
			require.Equal(t, tt.wantStatus, cli.ExitStatus(err), "exit status")
			for _, want := range tt.wantOut {
				require.Contains(t, stdout.String(), want)
			}
			versions, plans := created(t, c)
			require.Equal(t, tt.wantVersions, versions, "the Versions in the cluster")
			require.Equal(t, tt.wantPlans, plans, "the UpgradePlans in the cluster")
			if len(tt.wantPlans) == 1 && tt.wantPlans[0] == "up" {
				var p v1beta1.UpgradePlan
				require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: "up"}, &p))
				require.Equal(t, "v1.6.0", p.Spec.Version)
				require.Equal(t, "example.com/up:1", *p.Spec.Upgrade)
				var v v1beta1.Version
				require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: "v1.6.0"}, &v))
				require.Equal(t, "sha512:"+applySum, v.Spec.ISOChecksum)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestUpgradeApplyRefusedGolden pins what an operator reads when the policies refuse: the
// judgement on stdout, the reason on stderr (as main prints it), exit status 1.
func TestUpgradeApplyRefusedGolden(t *testing.T) {
	t.Parallel()
	c := applyCluster(t, true)
	a, stdout, _ := upgradeTestApp()
	o := applyOpts(func(o *upgradeApplyOptions) { o.req.ISOURL = "https://releases.example.com/harvester-v1.8.0-amd64.iso" })
	err := upgradeApply(t.Context(), a, applyEnv{c: c, hc: loopbackOnly(), now: upgradeClock, serverVersion: func() (string, error) { return "v1.32.7", nil }}, o)
	require.ErrorIs(t, err, errNotAllowed)
	require.Equal(t, 1, cli.ExitStatus(err))
	got := stdout.String() + "--- stderr\nupgrade-repo: " + err.Error() + "\n"
	golden := filepath.Join("testdata", "upgrade-apply-refused.golden")
	if *updateGolden {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
	}
	want, rerr := os.ReadFile(golden)
	require.NoError(t, rerr, "go test ./cmd/upgrade-repo -run Golden -update writes it")
	require.Equal(t, string(want), got)
	_, plans := created(t, c)
	require.Empty(t, plans)
	var v v1beta1.Version
	require.True(t, apierrors.IsNotFound(c.Get(t.Context(), client.ObjectKey{Name: "v1.8.0"}, &v)), "no Version created")
}

// TestUpgradeApplyDryRunGolden pins what a dry run shows of a cluster whose Version exists
// (its URL checked: the ISO's size known) and whose agents have reported: cp-a holds the ISO and
// preloaded it, w-1 began its preload and has too little room for the ISO; a third node has no
// agent report. Nothing is created.
func TestUpgradeApplyDryRunGolden(t *testing.T) {
	t.Parallel()
	const gib = 1 << 30
	v := &v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: "v1.6.0"},
		Spec:   v1beta1.VersionSpec{ISOURL: "https://releases.example.com/v1.6.0/harvester-v1.6.0-amd64.iso", ISOChecksum: "sha512:" + applySum},
		Status: v1beta1.VersionStatus{ISOSize: 6 * gib}}
	report := func(node string, st v1beta1.RepoNodeStatus) *v1beta1.RepoNode {
		return &v1beta1.RepoNode{ObjectMeta: metav1.ObjectMeta{Name: node}, Status: st}
	}
	cache := v1beta1.RepoNodeCache{Path: "/var/lib/upgrade-repo", TotalBytes: 100 * gib}
	cpCache, wCache := cache, cache
	cpCache.FreeBytes, wCache.FreeBytes = 40*gib, 4*gib
	c := applyCluster(t, false, v, applyNode("w-2", false, true),
		report("cp-a", v1beta1.RepoNodeStatus{Cache: cpCache,
			ISO:     v1beta1.RepoNodeISO{Checksum: applySum, State: v1beta1.ISOReady, BytesDone: 6 * gib, BytesTotal: 6 * gib},
			Preload: v1beta1.RepoNodePreload{State: v1beta1.PreloadDone, ImagesDone: 40, ImagesTotal: 40, BytesDone: 3 * gib, BytesTotal: 3 * gib}}),
		report("w-1", v1beta1.RepoNodeStatus{Cache: wCache,
			ISO:     v1beta1.RepoNodeISO{Checksum: applySum, State: v1beta1.ISODownloading, BytesDone: gib, BytesTotal: 6 * gib},
			Preload: v1beta1.RepoNodePreload{State: v1beta1.PreloadRunning, ImagesDone: 10, ImagesTotal: 40, BytesDone: gib, BytesTotal: 3 * gib}}),
	)
	a, stdout, _ := upgradeTestApp()
	o := applyOpts(func(o *upgradeApplyOptions) { o.dryRun = true })
	err := upgradeApply(t.Context(), a, applyEnv{c: c, hc: loopbackOnly(), now: upgradeClock, serverVersion: func() (string, error) { return "v1.32.7", nil }}, o)
	require.NoError(t, err)
	golden := filepath.Join("testdata", "upgrade-apply-dry-run.golden")
	if *updateGolden {
		require.NoError(t, os.WriteFile(golden, stdout.Bytes(), 0o644))
	}
	want, rerr := os.ReadFile(golden)
	require.NoError(t, rerr, "go test ./cmd/upgrade-repo -run Golden -update writes it")
	require.Equal(t, string(want), stdout.String())
	_, plans := created(t, c)
	require.Empty(t, plans)
}

// loopbackOnly is an HTTP client that reaches the test's own servers on 127.0.0.1 and fails at
// once for any other host, without a DNS lookup: the tests give the same output on any machine.
func loopbackOnly() *http.Client {
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
			return nil, fmt.Errorf("dial %s: this test reaches only its own servers", addr)
		}
		return d.DialContext(ctx, network, addr)
	}}}
}
