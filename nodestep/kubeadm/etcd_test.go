package kubeadm

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/upgrade-repo/upgrade-repo/nodestep"
)

func TestJudgeEtcd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		members []EtcdMember
		ok      bool
		says    string
	}{
		{name: "all healthy", members: []EtcdMember{{Name: "a", Healthy: true}, {Name: "b", Healthy: true}, {Name: "c", Healthy: true}}, ok: true, says: "3 of 3 members healthy, quorum 2"},
		{name: "one of three down: one more would cost quorum", members: []EtcdMember{{Name: "a", Healthy: true}, {Name: "b", Healthy: true}, {Name: "c", Reason: "timeout"}},
			says: "2 of 3 members healthy, quorum 2; not healthy: c (timeout); taking this node's member down now would leave 1, below quorum"},
		{name: "one of five down: not every member healthy", members: []EtcdMember{{Name: "a", Healthy: true}, {Name: "b", Healthy: true}, {Name: "c", Healthy: true}, {Name: "d", Healthy: true}, {Name: "e", Reason: "x"}},
			says: "4 of 5 members healthy, quorum 3; not healthy: e (x)"},
		{name: "no member", says: "0 of 0 members healthy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := JudgeEtcd(tt.members)
			assert.Equal(t, tt.ok, q.OK())
			assert.Contains(t, q.String(), tt.says)
			if !tt.ok && len(tt.members) == 5 {
				assert.NotContains(t, q.String(), "below quorum")
			}
		})
	}
}

// scriptedEtcd answers Members with its readings in turn, the last one for ever.
type scriptedEtcd struct {
	mu       sync.Mutex
	readings [][]EtcdMember
	calls    int
}

func (e *scriptedEtcd) Members(context.Context) ([]EtcdMember, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.readings[min(e.calls, len(e.readings)-1)]
	e.calls++
	return r, nil
}

func TestStepWaitsForEveryEtcdMember(t *testing.T) {
	t.Parallel()
	healthy := []EtcdMember{{Name: "cp1", Healthy: true}, {Name: "cp2", Healthy: true}, {Name: "cp3", Healthy: true}}
	paused := []EtcdMember{{Name: "cp1", Healthy: true}, {Name: "cp2", Healthy: true}, {Name: "cp3", Reason: "context deadline exceeded"}}
	files := map[string]string{"kubeadm": "new kubeadm", "kubelet": "new kubelet", "kubectl": "new kubectl"}
	var sums strings.Builder
	for _, n := range []string{"kubeadm", "kubelet", "kubectl"} {
		sums.WriteString(sum(files[n]) + "  " + n + "\n")
	}
	tests := []struct {
		name     string
		readings [][]EtcdMember
		timeout  time.Duration
		wantErr  string
	}{
		{name: "a member comes back: the step goes on", readings: [][]EtcdMember{paused, paused, healthy}, timeout: time.Minute},
		{name: "a member stays away: nothing changes", readings: [][]EtcdMember{paused}, timeout: 200 * time.Millisecond,
			wantErr: "etcd not healthy after 200ms (before kubeadm upgrade node): etcd: 2 of 3 members healthy, quorum 2; not healthy: cp3 (context deadline exceeded); taking this node's member down now would leave 1, below quorum; nothing on the node was changed"},
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
			require.NoError(t, os.WriteFile(filepath.Join(root, "etc/kubernetes/manifests/kube-apiserver.yaml"),
				[]byte("spec:\n  containers:\n  - image: registry.k8s.io/kube-apiserver:v1.33.13\n"), 0o600))
			cs := fake.NewClientset(node("n1", "v1.33.13", true), kubeadmConfig("v1.34.4"))
			host := &fakeHost{kubeadm: "v1.34.4"}
			host.onReboot = func() {
				_, err := cs.CoreV1().Nodes().Update(context.Background(), node("n1", "v1.34.4", true), metav1.UpdateOptions{})
				assert.NoError(t, err)
			}
			srv, stages := release(t, files, sums.String())
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			etcd := &scriptedEtcd{readings: tt.readings}
			s := &Step{
				Node: "n1", Target: "v1.34.4", Root: root, Host: host, Cluster: KubeCluster{Client: cs},
				Fetch:  &nodestep.Fetcher{RepoURL: srv.URL, Attempts: 1},
				Report: &nodestep.Reporter{RepoURL: srv.URL, Plan: "p", Log: log}, Log: log, Poll: 10e6,
				Etcd: etcd, EtcdTimeout: tt.timeout,
			}
			err := s.Run(t.Context())
			ran := strings.Join(host.commands(), "\n")
			reports := strings.Join(stages(), "\n")
			assert.Contains(t, reports, "waiting for every etcd member to be healthy before kubeadm upgrade node: etcd: 2 of 3 members healthy")
			if tt.wantErr != "" {
				require.EqualError(t, err, "node n1: "+tt.wantErr)
				assert.NotContains(t, ran, "kubeadm upgrade")
				b, _ := os.ReadFile(filepath.Join(root, "usr/bin/kubelet"))
				assert.Equal(t, "old kubelet", string(b))
				return
			}
			require.NoError(t, err)
			assert.Contains(t, ran, "kubeadm upgrade node")
			assert.Contains(t, reports, "etcd: 3 of 3 members healthy, quorum 2; going on kubeadm upgrade node now")
			etcd.mu.Lock()
			defer etcd.mu.Unlock()
			assert.GreaterOrEqual(t, etcd.calls, 4, "read before (3 readings) and after the upgrade")
		})
	}
}

func TestStepNotDoneWhileAComponentLagsBehind(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "etc/kubernetes/manifests")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for c, v := range map[string]string{"kube-apiserver": "v1.34.4", "kube-controller-manager": "v1.34.4", "kube-scheduler": "v1.33.13"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, c+".yaml"), []byte("spec:\n  containers:\n  - image: registry.k8s.io/"+c+":"+v+"\n"), 0o600))
	}
	cs := fake.NewClientset(node("n1", "v1.34.4", true), kubeadmConfig("v1.34.4"))
	s := &Step{Node: "n1", Target: "v1.34.4", Root: root, Cluster: KubeCluster{Client: cs}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), ReadyTimeout: time.Second}
	f, err := s.facts(t.Context())
	require.NoError(t, err)
	assert.Equal(t, "v1.33.13", f.APIServer, "the oldest control-plane component")
	a, _, err := Decide(f)
	require.NoError(t, err)
	assert.Equal(t, UpgradeNode, a, "a scheduler left at the old version is upgraded again, not called done")
}

// etcdServer plays etcd's client API over TLS with client certificates: its member list names
// itself and a member that does not answer.
func etcdServer(t *testing.T, root string) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	var self string
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "no client certificate", http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/v3/cluster/member/list":
			_ = json.NewEncoder(w).Encode(map[string]any{"members": []map[string]any{
				{"name": "cp1", "clientURLs": []string{self}},
				{"name": "cp2", "clientURLs": []string{"https://127.0.0.1:1"}},
				{"name": "cp3"},
			}})
		case "/health":
			_, _ = io.WriteString(w, `{"health":"true","reason":""}`)
		default:
			http.NotFound(w, r)
		}
	})
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	self = srv.URL
	// The node's files as kubeadm lays them out: the manifest, the CA, a client certificate.
	pki := filepath.Join(root, "etc/kubernetes/pki/etcd")
	require.NoError(t, os.MkdirAll(pki, 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc/kubernetes/manifests"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/kubernetes/manifests/etcd.yaml"),
		[]byte("spec:\n  containers:\n  - command:\n    - etcd\n    - --advertise-client-urls="+srv.URL+"\n"), 0o600))
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	require.NoError(t, os.WriteFile(filepath.Join(pki, "ca.crt"), ca, 0o600))
	certPEM, keyPEM := clientCert(t)
	require.NoError(t, os.WriteFile(filepath.Join(pki, "healthcheck-client.crt"), certPEM, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(pki, "healthcheck-client.key"), keyPEM, 0o600))
	return srv
}

// clientCert makes a self-signed client certificate and its key, in PEM.
func clientCert(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kube-etcd-healthcheck-client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func TestEtcdClientReadsEveryMember(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	etcdServer(t, root)
	c, err := NewEtcdClient(root)
	require.NoError(t, err)
	members, err := c.Members(t.Context())
	require.NoError(t, err)
	require.Len(t, members, 3)
	assert.True(t, members[0].Healthy, "cp1: %s", members[0].Reason)
	assert.False(t, members[1].Healthy)
	assert.Contains(t, members[1].Reason, "connection refused")
	assert.Equal(t, "not started: no client URL", members[2].Reason)
	q := JudgeEtcd(members)
	assert.Equal(t, 1, q.Healthy)
	assert.False(t, q.OK())

	_, err = NewEtcdClient(t.TempDir())
	require.ErrorIs(t, err, ErrNoLocalEtcd, "a worker has no member")
}
