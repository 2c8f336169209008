package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/isorelease"
	"github.com/upgrade-repo/upgrade-repo/planctl"
	"github.com/upgrade-repo/upgrade-repo/planview"
	"github.com/upgrade-repo/upgrade-repo/policy"
	"github.com/upgrade-repo/upgrade-repo/release"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// TestPlanAndSequencerAgree runs the same cluster (nodes, the target Version, the installed
// ConfigMap, other plans) through what `plan` and `upgrade apply --dry-run` show (makePlan) and
// through what the sequencer does in Initializing (Decide), and requires the same judgement:
// the same checks with the same outcomes and messages, the same node order, and the sequencer
// going on exactly when the command says the upgrade is allowed.
func TestPlanAndSequencerAgree(t *testing.T) {
	t.Parallel()
	const ns = "upgrade-repo-system"
	target, err := release.ParseRelease([]byte(planTargetYAML))
	require.NoError(t, err)
	current, err := release.ParseRelease([]byte(planCurrentYAML))
	require.NoError(t, err)
	currentJSON, err := json.Marshal(current)
	require.NoError(t, err)
	targetFile := writePlanFile(t, "target.yaml", planTargetYAML)

	node := func(name string, cp, ready bool, kubelet string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		n.Status.NodeInfo.KubeletVersion = kubelet
		if cp {
			n.Labels["node-role.kubernetes.io/control-plane"] = "true"
		}
		st := corev1.ConditionTrue
		if !ready {
			st = corev1.ConditionFalse
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st,
			LastTransitionTime: metav1.NewTime(time.Unix(1000, 0))}}
		return n
	}
	installed := func(version string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sequencer.InstalledConfigMap},
			Data:       map[string]string{sequencer.InstalledVersionKey: version, sequencer.InstalledReleaseKey: string(currentJSON)},
		}
	}
	version := &v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: "v1.6.0"}, Spec: v1beta1.VersionSpec{
		ISOURL: "https://origin.example/harvester-v1.6.0.iso", ISOChecksum: "sha512:" + strings.Repeat("ab", 64)}}
	older := &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: "older", CreationTimestamp: metav1.NewTime(time.Unix(1, 0))},
		Spec:       v1beta1.UpgradePlanSpec{Version: "v1.5.2"},
		Status:     v1beta1.UpgradePlanStatus{Phase: v1beta1.PhaseImagePreloading},
	}
	const kubelet = "v1.32.7+rke2r1"
	cluster := func(workerReady bool, kubelet string) []client.Object {
		return []client.Object{
			node("cp-b", true, true, kubelet), node("w-2", false, workerReady, kubelet),
			node("cp-a", true, true, kubelet), node("w-1", false, true, kubelet), node("w-3", false, true, kubelet),
		}
	}
	with := func(objs []client.Object, more ...client.Object) []client.Object { return append(objs, more...) }
	cordoned := func(objs []client.Object, name string) []client.Object {
		for _, o := range objs {
			if n, ok := o.(*corev1.Node); ok && n.Name == name {
				n.Spec.Unschedulable = true
			}
		}
		return objs
	}
	repoNode := func(name string, free int64) *v1beta1.RepoNode {
		return &v1beta1.RepoNode{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1beta1.RepoNodeStatus{
			Cache:      v1beta1.RepoNodeCache{Path: "/var/lib/upgrade-repo", FreeBytes: free, TotalBytes: 100 << 30, FilesystemID: "1"},
			Containerd: &v1beta1.RepoNodeCache{Path: "/var/lib/containerd", FreeBytes: free, TotalBytes: 100 << 30, FilesystemID: "1"},
		}}
	}
	undrainable := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "pg"},
		Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pg"}}},
		Status: policyv1.PodDisruptionBudgetStatus{ExpectedPods: 1, DesiredHealthy: 1, CurrentHealthy: 1}}
	pgPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "pg-0", Labels: map[string]string{"app": "pg"}},
		Spec: corev1.PodSpec{NodeName: "w-1"}}
	// zoned is the cluster with its workers in zones z1 (w-1, w-3) and z2 (w-2), and a
	// PodDisruptionBudget that allows one disruption over pods on w-1 and w-2.
	zoned := func() []client.Object {
		objs := cluster(true, kubelet)
		for _, o := range objs {
			switch o.GetName() {
			case "w-1", "w-3":
				o.SetLabels(map[string]string{corev1.LabelTopologyZone: "z1"})
			case "w-2":
				o.SetLabels(map[string]string{corev1.LabelTopologyZone: "z2"})
			}
		}
		web := map[string]string{"app": "web"}
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: web}}}
		pdb.Status.DisruptionsAllowed = 1
		objs = append(objs, pdb)
		for _, n := range []string{"w-1", "w-2"} {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web-" + n, Labels: web}, Spec: corev1.PodSpec{NodeName: n}}
			p.Status.Phase = corev1.PodRunning
			objs = append(objs, p)
		}
		return objs
	}

	// An etcd-like control-plane port: its certificate expires 5 hours after the instant both
	// judge at, and it refuses the handshake for want of a client certificate.
	judged := time.Unix(2000, 0)
	etcd := etcdLike(t, judged.Add(5*time.Hour))
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	sources := []sequencer.CertificateSource{
		{Component: "etcd", Port: etcd.Listener.Addr().(*net.TCPAddr).Port, Renewal: policy.RenewedByKubeadm},
		{Component: "kube-scheduler", Port: closed.Addr().(*net.TCPAddr).Port, Renewal: policy.RenewedOnRestart},
	}
	// addressed gives the control planes of objs an internal address, where the certificates
	// are read.
	addressed := func(objs []client.Object) []client.Object {
		for _, o := range objs {
			if n, ok := o.(*corev1.Node); ok && n.Labels["node-role.kubernetes.io/control-plane"] != "" {
				n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
			}
		}
		return objs
	}

	tests := []struct {
		name string
		objs []client.Object
		// known is whether the target release is known: --release for the command, the
		// release read from the ISO's URL for the sequencer.
		known bool
		// iso is whether the target release is read from its ISO (its size and archives known,
		// for the disk forecast), as the sequencer reads it from the ISO's URL.
		iso     bool
		force   bool
		options *v1beta1.NodeUpgradeOption
		allowed bool
		// batches, when not nil, are the worker batches both must show.
		batches [][]string
		// certificates is whether both read the control planes' certificates (their internal
		// address is the etcd-like server's) and judge them expiring.
		certificates bool
	}{
		{name: "every node Ready", objs: with(cluster(true, kubelet), installed("v1.5.2"), version), known: true, allowed: true},
		{name: "release not read yet", objs: with(cluster(true, kubelet), installed("v1.5.2"), version), allowed: true},
		{name: "a worker not Ready", objs: with(cluster(false, kubelet), installed("v1.5.2"), version), known: true},
		{name: "the worker not Ready skipped", objs: with(cluster(false, kubelet), installed("v1.5.2"), version), known: true,
			options: &v1beta1.NodeUpgradeOption{SkipNodes: []string{"w-2"}}, allowed: true},
		{name: "only the nodes listed", objs: with(cluster(false, kubelet), installed("v1.5.2"), version), known: true,
			options: &v1beta1.NodeUpgradeOption{Nodes: []string{"w-3", "w-1"}}, allowed: true},
		{name: "a control plane is never skipped", objs: with(cluster(true, kubelet), installed("v1.5.2"), version), known: true,
			options: &v1beta1.NodeUpgradeOption{SkipNodes: []string{"cp-a", "w-1"}}, allowed: true},
		{name: "a downgrade", objs: with(cluster(true, kubelet), installed("v1.6.1"), version), known: true},
		{name: "a downgrade forced", objs: with(cluster(true, kubelet), installed("v1.6.1"), version), known: true, force: true, allowed: true},
		{name: "below the minimum upgradable", objs: with(cluster(true, kubelet), installed("v1.4.9"), version), known: true},
		{name: "no Version", objs: with(cluster(true, kubelet), installed("v1.5.2")), known: true},
		{name: "another plan in flight", objs: with(cluster(true, kubelet), installed("v1.5.2"), version, older), known: true},
		{name: "kubelets too old", objs: with(cluster(true, "v1.30.1+rke2r1"), installed("v1.5.2"), version), known: true},
		{name: "no kubelet version: the installed release's", objs: with(cluster(true, ""), installed("v1.5.2"), version), known: true, allowed: true},
		{name: "a node cordoned by someone else", objs: with(cordoned(cluster(true, kubelet), "w-3"), installed("v1.5.2"), version), known: true},
		{name: "a node cordoned by someone else, forced", objs: with(cordoned(cluster(true, kubelet), "w-3"), installed("v1.5.2"), version), known: true,
			force: true, allowed: true},
		{name: "a budget no drain meets", objs: with(cluster(true, kubelet), installed("v1.5.2"), version, undrainable, pgPod), known: true},
		{name: "room on every node that reports", objs: with(cluster(true, kubelet), installed("v1.5.2"), version,
			repoNode("cp-a", 50<<30), repoNode("w-1", 50<<30)), known: true, iso: true, allowed: true},
		{name: "a node without room for the release", objs: with(cluster(true, kubelet), installed("v1.5.2"), version,
			repoNode("cp-a", 50<<30), repoNode("w-1", 2<<20)), known: true, iso: true},
		{name: "three at a time, no zones", objs: with(cluster(true, kubelet), installed("v1.5.2"), version), known: true, allowed: true,
			options: &v1beta1.NodeUpgradeOption{Concurrency: 3}, batches: [][]string{{"w-1", "w-2", "w-3"}}},
		{name: "a control-plane certificate expiring within the plan's window", objs: with(addressed(cluster(true, kubelet)), installed("v1.5.2"), version),
			known: true, certificates: true},
		{name: "a control-plane certificate expiring, forced", objs: with(addressed(cluster(true, kubelet)), installed("v1.5.2"), version),
			known: true, certificates: true, force: true, allowed: true},
		{name: "three at a time, zones and a budget", objs: with(zoned(), installed("v1.5.2"), version), known: true, allowed: true,
			options: &v1beta1.NodeUpgradeOption{Concurrency: 3}, batches: [][]string{{"w-1"}, {"w-2", "w-3"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := kubeFake(t, tt.objs...)
			plan := &v1beta1.UpgradePlan{
				ObjectMeta: metav1.ObjectMeta{Name: "to-v1-6-0", CreationTimestamp: metav1.NewTime(time.Unix(2, 0))},
				Spec:       v1beta1.UpgradePlanSpec{Version: "v1.6.0", Force: tt.force, NodeUpgradeOption: tt.options},
			}

			// What the operator is shown.
			o := planctl.PreviewOptions{To: "v1.6.0", Namespace: ns, Force: tt.force, Plan: plan, CertificateSources: sources, Now: judged}
			if tt.known {
				o.Release = targetFile
			}
			var contents *isorelease.Contents
			if tt.iso {
				o.Release = planISO(t, planTargetYAML, "docker.io/rancher/harvester:v1.6.0\n", "docker.io/rancher/rke2-runtime:v1.33.3-rke2r1\n")
				var ierr error
				contents, ierr = isorelease.Open(t.Context(), http.DefaultClient, o.Release)
				require.NoError(t, ierr)
			}
			rep, err := planctl.Preview(t.Context(), o, c, http.DefaultClient)
			require.NoError(t, err)

			// What the sequencer does.
			f, err := sequencer.GatherFacts(t.Context(), c, ns, plan.Name, plan.Spec.Version)
			require.NoError(t, err)
			started := plan.DeepCopy()
			started.Status.Phase = v1beta1.PhaseInitializing
			// Past the wait for the agents' measures of the release (none here: the plan command
			// reads the same reports).
			started.Status.PhaseTransitionTimestamps = []v1beta1.PhaseTransitionTimestamp{{Phase: v1beta1.PhaseInitializing,
				PhaseTransitionTimestamp: metav1.NewTime(time.Unix(2000, 0).Add(-sequencer.MeasureWait))}}
			budgets, err := sequencer.GatherDisruptions(t.Context(), c, nil)
			require.NoError(t, err)
			obs := sequencer.NewObservation(judged, started, f)
			obs.UpgradeImage = "upgrade:v1.6.0"
			obs.Disruptions = budgets
			if tt.known {
				obs.EarlyRelease = target
			}
			if contents != nil {
				obs.EarlyRelease, obs.ISOSize, obs.EarlyArchives = contents.Release, contents.Size, contents.Archives
			}
			// As the Reconciler reads them in Initializing.
			obs.Certificates, obs.CertificatesNote = sequencer.ControlPlaneCertificates(t.Context(), f.Nodes, sources)
			d := sequencer.Decide(sequencer.DefaultConfig, obs)
			require.NotNil(t, d.Judgement, "Decide judged the plan in Initializing")
			j := d.Judgement

			require.Equal(t, tt.allowed, rep.Allowed)
			require.Equal(t, rep.Allowed, j.Result.Allowed)
			require.Equal(t, checkOutcomes(j.Result.Checks), reportOutcomes(rep.Checks), "the same checks, outcomes and messages")
			require.Equal(t, rep.ControlPlaneNodes, j.ControlPlaneNodes, "the same control-plane order")
			require.Equal(t, rep.OtherNodes, j.OtherNodes, "the same order of the other nodes")
			require.Equal(t, rep.Batches, j.Batches, "the same worker batches")
			if tt.batches != nil {
				require.Equal(t, tt.batches, j.Batches)
			}
			require.Equal(t, rep.Current, j.Input.Current)
			require.Equal(t, rep.CurrentKubernetes, j.Input.KubernetesCurrent)
			require.Equal(t, rep.Disk, j.Disk, "the same disk forecast")
			if tt.iso {
				require.Len(t, j.Disk, 2, "a forecast for each node that reports its file systems")
			}
			for _, c := range j.Result.Checks {
				if c.Name == policy.CheckCertificateExpiry {
					require.Equal(t, !tt.certificates, c.Passed, c.Message)
					if tt.certificates {
						require.Contains(t, c.Message, "etcd's serving certificate on node cp-a (CN etcd-server) expires 1970-01-01T05:33:20Z (in 5h0m0s; kubeadm renews it")
					}
				}
			}

			// The sequencer acts on that judgement: it goes on when allowed, over the nodes in
			// that order, and otherwise says why.
			switch {
			case j.Result.Allowed:
				require.Equal(t, v1beta1.PhaseInitialized, d.Status.Phase)
				var worked []string
				for name, st := range d.Status.NodeUpgradeStatuses {
					if st.State != v1beta1.NodeSkipped {
						worked = append(worked, name)
					}
				}
				require.ElementsMatch(t, append(append([]string{}, j.ControlPlaneNodes...), j.OtherNodes...), worked)

				// Once the control planes are upgraded, the sequencer starts the first batch.
				upgrading := started.DeepCopy()
				upgrading.Status.Phase = v1beta1.PhaseNodeUpgrading
				upgrading.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
				for _, n := range j.ControlPlaneNodes {
					upgrading.Status.NodeUpgradeStatuses[n] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgraded}
				}
				obs := sequencer.NewObservation(time.Unix(2000, 0), upgrading, f)
				obs.UpgradeImage, obs.Disruptions = "upgrade:v1.6.0", budgets
				var cordoned []string
				for _, a := range sequencer.Decide(sequencer.DefaultConfig, obs).Actions {
					if a.Kind == sequencer.ActionCordon {
						cordoned = append(cordoned, a.Node)
					}
				}
				require.Equal(t, j.Batches[0], cordoned, "the sequencer starts the first batch plan shows")
			default:
				cond := meta.FindStatusCondition(d.Status.Conditions, v1beta1.ConditionDegraded)
				require.NotNil(t, cond)
				require.Contains(t, cond.Message, j.Result.Summary())
			}
		})
	}
}

// outcome is one check as both sides must tell it.
type outcome struct{ name, result, message string }

func checkOutcomes(checks []policy.Check) []outcome {
	out := make([]outcome, 0, len(checks))
	for _, c := range checks {
		out = append(out, outcome{c.Name, planview.CheckResult(c), c.Message})
	}
	return out
}

func reportOutcomes(checks []planview.Check) []outcome {
	out := make([]outcome, 0, len(checks))
	for _, c := range checks {
		out = append(out, outcome{c.Name, c.Result, c.Message})
	}
	return out
}

// etcdLike serves TLS on 127.0.0.1 with a certificate (CN etcd-server) that expires at
// notAfter, and, as etcd's client port does, refuses a client without a certificate.
func etcdLike(t *testing.T, notAfter time.Time) *httptest.Server {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcd-server"},
		NotBefore: notAfter.Add(-time.Hour * 24), NotAfter: notAfter, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}
	// The refused handshakes are the point; the server need not log them.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}
