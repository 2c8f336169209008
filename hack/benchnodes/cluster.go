package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// apiServer is a local etcd and kube-apiserver, started from the binaries in binDir, with a
// static token per user and an audit log of the requests of the users audited.
type apiServer struct {
	url     string
	dir     string
	procs   []*exec.Cmd
	tokens  map[string]string
	auditAt string
}

// freePort returns a TCP port free on 127.0.0.1 now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startAPIServer starts etcd and kube-apiserver in dir. users are given a token each, in group
// system:masters; the requests of audited are written to the audit log, one line each.
func startAPIServer(ctx context.Context, binDir, dir string, users, audited []string, logTo *os.File) (*apiServer, error) {
	a := &apiServer{dir: dir, tokens: map[string]string{}, auditAt: filepath.Join(dir, "audit.log")}
	ports := make([]int, 3)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	etcd := exec.CommandContext(ctx, filepath.Join(binDir, "etcd"), "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", ports[1]),
		"--unsafe-no-fsync", "--quota-backend-bytes", strconv.Itoa(4<<30))
	etcd.Stdout, etcd.Stderr = logTo, logTo
	if err := etcd.Start(); err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	a.procs = append(a.procs, etcd)

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"sa.key": pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"sa.pub": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
	}
	tokens := ""
	for i, u := range users {
		tok := fmt.Sprintf("token-%s-%d", u, time.Now().UnixNano())
		a.tokens[u] = tok
		tokens += fmt.Sprintf("%s,%s,%d,\"system:masters\"\n", tok, u, i+1)
	}
	files["tokens.csv"] = []byte(tokens)
	policy := "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted]\nrules:\n"
	for _, u := range audited {
		policy += fmt.Sprintf("- level: Metadata\n  users: [%q]\n", u)
	}
	policy += "- level: None\n"
	files["audit-policy.yaml"] = []byte(policy)
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	apiserver := exec.CommandContext(ctx, filepath.Join(binDir, "kube-apiserver"),
		"--etcd-servers", etcdURL, "--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(ports[2]),
		"--cert-dir", filepath.Join(dir, "certs"), "--token-auth-file", filepath.Join(dir, "tokens.csv"),
		"--authorization-mode", "AlwaysAllow", "--allow-privileged=true", "--service-cluster-ip-range", "10.0.0.0/24",
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-account-key-file", filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--audit-policy-file", filepath.Join(dir, "audit-policy.yaml"), "--audit-log-path", a.auditAt, "--audit-log-format", "json",
		"--audit-log-mode", "blocking", "--audit-log-maxsize", "0",
		"--enable-priority-and-fairness=false", "--max-requests-inflight", "2000", "--max-mutating-requests-inflight", "1000",
		"--watch-cache=true", "--profiling=false")
	apiserver.Stdout, apiserver.Stderr = logTo, logTo
	if err := apiserver.Start(); err != nil {
		a.stop()
		return nil, fmt.Errorf("start kube-apiserver: %w", err)
	}
	a.procs = append(a.procs, apiserver)
	a.url = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a local, throwaway API server
	deadline := time.Now().Add(2 * time.Minute)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.url+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+a.tokens[users[0]])
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return a, nil
			}
		}
		if time.Now().After(deadline) {
			a.stop()
			return nil, errors.New("kube-apiserver not ready after 2 minutes")
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// kubeconfig writes a kubeconfig for user and returns its path.
func (a *apiServer) kubeconfig(user string) (string, error) {
	p := filepath.Join(a.dir, user+".kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: bench
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: %s
  user: {token: %q}
contexts:
- name: bench
  context: {cluster: bench, user: %s}
current-context: bench
`, a.url, user, a.tokens[user], user)
	return p, os.WriteFile(p, []byte(cfg), 0o600)
}

// stop ends kube-apiserver, then etcd.
func (a *apiServer) stop() {
	for i := len(a.procs) - 1; i >= 0; i-- {
		p := a.procs[i]
		if p.Process != nil {
			_ = p.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = p.Process.Kill()
				<-done
			}
		}
	}
}
