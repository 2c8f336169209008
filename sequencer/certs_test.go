package sequencer_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/policy"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// Each control plane's serving certificates are read from real TLS handshakes: a server that
// requires a client certificate (etcd's client port) still gives its own, over TLS 1.3 and 1.2;
// a port that refuses or does not speak TLS is skipped and said; the other nodes are not asked.
func TestControlPlaneCertificates(t *testing.T) {
	t.Parallel()
	notAfter := time.Now().Add(5 * time.Hour).Truncate(time.Second)
	api := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(api.Close)
	etcd13 := clientAuthServer(t, selfSigned(t, "etcd-tls13", notAfter), tls.VersionTLS13)
	etcd12 := clientAuthServer(t, selfSigned(t, "etcd-tls12", notAfter.Add(time.Hour)), tls.VersionTLS12)
	plain := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(plain.Close)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := port(t, closed.Addr().String())
	require.NoError(t, closed.Close())

	sources := []sequencer.CertificateSource{
		{Component: "kube-apiserver", Port: port(t, api.Listener.Addr().String()), Renewal: policy.RenewedByKubeadm},
		{Component: "etcd", Port: port(t, etcd13.Listener.Addr().String()), Renewal: policy.RenewedByKubeadm},
		{Component: "etcd-1.2", Port: port(t, etcd12.Listener.Addr().String()), Renewal: policy.RenewedByKubeadm},
		{Component: "kube-scheduler", Port: refused, Renewal: policy.RenewedOnRestart},
		{Component: "kubelet", Port: port(t, plain.Listener.Addr().String())},
	}
	node := func(name string, cp bool, addr string) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if cp {
			n.Labels["node-role.kubernetes.io/control-plane"] = ""
		}
		if addr != "" {
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}}
		}
		return n
	}
	certs, note := sequencer.ControlPlaneCertificates(t.Context(), []corev1.Node{
		node("cp-a", true, "127.0.0.1"), node("w-1", false, "127.0.0.1"), node("cp-b", true, ""),
	}, sources)

	require.Equal(t, []policy.Certificate{
		{Node: "cp-a", Component: "kube-apiserver", CommonName: api.Certificate().Subject.CommonName,
			NotAfter: api.Certificate().NotAfter, Renewal: policy.RenewedByKubeadm},
		{Node: "cp-a", Component: "etcd", CommonName: "etcd-tls13", NotAfter: notAfter.UTC(), Renewal: policy.RenewedByKubeadm},
		{Node: "cp-a", Component: "etcd-1.2", CommonName: "etcd-tls12", NotAfter: notAfter.Add(time.Hour).UTC(), Renewal: policy.RenewedByKubeadm},
	}, certs)
	require.Equal(t, fmt.Sprintf("not read from control plane cp-b (no internal address); "+
		"kube-scheduler (:%d) on cp-a: refused, skipped; kubelet (:%d) on cp-a: no TLS handshake, skipped",
		refused, sources[4].Port), note)
}

// clientAuthServer serves TLS with cert, at most version, and, as etcd's client port does,
// refuses a client without a certificate its (empty) pool verifies.
func clientAuthServer(t *testing.T, cert tls.Certificate, version uint16) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs: x509.NewCertPool(), MaxVersion: version, MinVersion: tls.VersionTLS12}
	// The refused handshakes are the point; the server need not log them.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// selfSigned is a self-signed serving certificate for 127.0.0.1 with common name cn.
func selfSigned(t *testing.T, cn string, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return n
}

// The window the certificates must outlast is twice the plan's time estimate (here from an
// earlier plan's node steps), never less than a day.
func TestJudgeCertificateWindow(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	nodes := []sequencer.NodeInfo{{Name: "cp-a", ControlPlane: true, Ready: true}, {Name: "w-1", Ready: true}}
	// An earlier plan whose two nodes took 10 hours each: this plan's two are estimated at 20.
	earlier := v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "earlier"}, Status: v1beta1.UpgradePlanStatus{
		Phase: v1beta1.PhaseSucceeded, NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{}}}
	for _, n := range nodes {
		earlier.Status.NodeUpgradeStatuses[n.Name] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgraded,
			UpgradeStartTime: &metav1.Time{Time: now.Add(-48 * time.Hour)}, StateTime: &metav1.Time{Time: now.Add(-38 * time.Hour)}}
	}
	etcd := policy.Certificate{Node: "cp-a", Component: "etcd", CommonName: "cp-a", NotAfter: now.Add(30 * time.Hour), Renewal: policy.RenewedByKubeadm}
	tests := []struct {
		name    string
		plans   []v1beta1.UpgradePlan
		passed  bool
		message string
	}{
		// The steps assumed: 4m the control plane, 1m the worker.
		{name: "no earlier plan: the node steps assumed, a day", passed: true,
			message: "the first to expire, etcd's serving certificate on node cp-a (CN cp-a), expires 2026-05-02T18:00:00Z, " +
				"after the plan's window of 24h0m0s (at least 24h0m0s; the plan is estimated to take 5m0s); " + policy.ClientCertificatesUnchecked},
		{name: "an earlier plan's long node steps: twice the estimate", plans: []v1beta1.UpgradePlan{earlier},
			message: "etcd's serving certificate on node cp-a (CN cp-a) expires 2026-05-02T18:00:00Z (in 30h0m0s; kubeadm renews it as it upgrades " +
				"that node, which may be after it expires): within the plan's window of 40h0m0s (twice the plan's estimate of 20h0m0s); " +
				"renew them before the upgrade (kubeadm certs renew on the node, for kubeadm's), or force; " + policy.ClientCertificatesUnchecked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "up"}, Spec: v1beta1.UpgradePlanSpec{Version: "v1.6.0"}}
			j := sequencer.Judge(p, sequencer.JudgeFacts{Installed: sequencer.Installed{Version: "v1.5.2"}, VersionExists: true,
				Nodes: nodes, Now: now, Certificates: []policy.Certificate{etcd}, Plans: tt.plans})
			var got *policy.Check
			for i := range j.Result.Checks {
				if j.Result.Checks[i].Name == policy.CheckCertificateExpiry {
					got = &j.Result.Checks[i]
				}
			}
			require.NotNil(t, got)
			require.Equal(t, tt.passed, got.Passed)
			require.Equal(t, tt.message, got.Message)
		})
	}
}

// etcd's peer port is read as its client port is: its server requires a peer certificate its CA
// signed, and still sends its own (kubeadm's etcd-peer, for server and client use) first.
func TestEtcdPeerCertificate(t *testing.T) {
	t.Parallel()
	i := slices.IndexFunc(sequencer.DefaultCertificateSources, func(s sequencer.CertificateSource) bool { return s.Component == "etcd-peer" })
	require.GreaterOrEqual(t, i, 0, "etcd's peer port is read by default")
	src := sequencer.DefaultCertificateSources[i]
	require.Equal(t, 2380, src.Port)
	require.Equal(t, policy.RenewedByKubeadm, src.Renewal, "kubeadm renews etcd-peer as it upgrades the node")

	notAfter := time.Now().Add(48 * time.Hour).Truncate(time.Second)
	ca := selfSigned(t, "etcd-ca", notAfter.Add(24*time.Hour))
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "cp-a"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	require.NoError(t, err)
	peers := x509.NewCertPool()
	peers.AddCert(caCert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: peers, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	refused := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			refused <- err
			return
		}
		defer c.Close()
		refused <- c.(*tls.Conn).HandshakeContext(t.Context())
	}()

	src.Port = port(t, ln.Addr().String())
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp-a", Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}}}
	certs, note := sequencer.ControlPlaneCertificates(t.Context(), []corev1.Node{n}, []sequencer.CertificateSource{src})
	require.Empty(t, note)
	require.Equal(t, []policy.Certificate{{Node: "cp-a", Component: "etcd-peer", CommonName: "cp-a", NotAfter: notAfter.UTC(),
		Renewal: policy.RenewedByKubeadm}}, certs)
	require.ErrorContains(t, <-refused, "certificate", "the server refused the handshake without a peer certificate")
}
