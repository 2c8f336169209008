package sequencer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/upgrade-repo/upgrade-repo/policy"
)

// certTimeout bounds the handshake with one port of one control plane.
const certTimeout = 3 * time.Second

// maxControlPlanes bounds the control planes a pre-flight reads the certificates of.
const maxControlPlanes = 9

// maxHandshakes bounds the handshakes made at once: with maxControlPlanes and the
// DefaultCertificateSources, a read that no port answers takes 4 × certTimeout.
const maxHandshakes = 16

// DefaultAPIServerPort is the port the control planes' API servers listen on (kubeadm's and
// RKE2's).
const DefaultAPIServerPort = 6443

// CertificateSource is a port of each control-plane node whose serving certificate the
// pre-flight reads.
type CertificateSource struct {
	// Component names what listens on it (kube-apiserver, etcd, kubelet...).
	Component string
	// Port is the port on the node's internal address.
	Port int
	// Renewal says whether the upgrade renews the certificate.
	Renewal policy.Renewal
}

// DefaultCertificateSources are the ports of a kubeadm control plane that serve TLS: the API
// server, etcd's client port and its peer port (both ask for a client certificate, but send
// their own first; kubeadm's etcd-server and etcd-peer certificates), the kubelet, and the
// scheduler and the controller manager, which kubeadm binds to 127.0.0.1 (they answer only where
// they were bound to the node's address). The certificates a control plane presents only as a
// client are not among them: no handshake shows them (policy.ClientCertificatesUnchecked).
var DefaultCertificateSources = []CertificateSource{
	{Component: "kube-apiserver", Port: DefaultAPIServerPort, Renewal: policy.RenewedByKubeadm},
	{Component: "etcd", Port: 2379, Renewal: policy.RenewedByKubeadm},
	{Component: "etcd-peer", Port: 2380, Renewal: policy.RenewedByKubeadm},
	{Component: "kubelet", Port: 10250, Renewal: policy.NotRenewed},
	{Component: "kube-scheduler", Port: 10259, Renewal: policy.RenewedOnRestart},
	{Component: "kube-controller-manager", Port: 10257, Renewal: policy.RenewedOnRestart},
}

// ControlPlaneCertificates reads, from every control-plane node of nodes (at most
// maxControlPlanes), when the serving certificate of each of sources expires: a TLS handshake
// with the node's internal address on the source's port, each bounded by certTimeout and
// maxHandshakes at once, that reads the certificate chain the server sends and nothing else.
// It is the least privileged way to the expiry: no host mount of the kubeadm PKI (its directory
// holds the cluster's private keys) and no RBAC. The certificate is not verified and no client
// certificate is sent: a server that requires one (etcd) has sent its own before it refuses the
// handshake (etcd's client and peer ports). note says which ports did not answer (a scheduler
// bound to 127.0.0.1 does not); they are skipped. kubeadm's client certificates are not seen from
// the network, and not read (policy.ClientCertificatesUnchecked).
func ControlPlaneCertificates(ctx context.Context, nodes []corev1.Node, sources []CertificateSource) (certs []policy.Certificate, note string) {
	type answer struct {
		node   string
		src    CertificateSource
		cert   *x509.Certificate
		failed string
	}
	var answers []answer
	var noAddress []string
	cps := 0
	for i := range nodes {
		n := &nodes[i]
		if !IsControlPlane(n) || cps >= maxControlPlanes {
			continue
		}
		cps++
		if internalIP(n) == "" {
			noAddress = append(noAddress, n.Name)
			continue
		}
		for _, s := range sources {
			answers = append(answers, answer{node: n.Name, src: s})
		}
	}
	addrs := map[string]string{}
	for i := range nodes {
		addrs[nodes[i].Name] = internalIP(&nodes[i])
	}
	sem := make(chan struct{}, maxHandshakes)
	var wg sync.WaitGroup
	for i := range answers {
		a := &answers[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cert, err := servingCertificate(ctx, net.JoinHostPort(addrs[a.node], strconv.Itoa(a.src.Port)))
			if err != nil {
				a.failed = failure(err)
				return
			}
			a.cert = cert
		}()
	}
	wg.Wait()

	// What did not answer, by component and why: "etcd (:2379) on cp-a, cp-b: refused".
	type miss struct{ component, why string }
	var misses []miss
	missed := map[miss][]string{}
	for _, a := range answers {
		if a.cert != nil {
			certs = append(certs, policy.Certificate{Node: a.node, Component: a.src.Component,
				CommonName: a.cert.Subject.CommonName, NotAfter: a.cert.NotAfter, Renewal: a.src.Renewal})
			continue
		}
		m := miss{fmt.Sprintf("%s (:%d)", a.src.Component, a.src.Port), a.failed}
		if _, ok := missed[m]; !ok {
			misses = append(misses, m)
		}
		missed[m] = append(missed[m], a.node)
	}
	var notes []string
	if len(noAddress) > 0 {
		notes = append(notes, "not read from control plane "+strings.Join(noAddress, ", ")+" (no internal address)")
	}
	for _, m := range misses {
		notes = append(notes, fmt.Sprintf("%s on %s: %s, skipped", m.component, strings.Join(missed[m], ", "), m.why))
	}
	return certs, strings.Join(notes, "; ")
}

// failure says in a few words why a handshake did not give a certificate.
func failure(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "no answer in " + certTimeout.String()
	case errors.Is(err, errNoCertificate):
		return "no certificate"
	}
	return "no TLS handshake"
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

var errNoCertificate = errors.New("no certificate")

// servingCertificate returns the leaf certificate the TLS server at addr sends. It is read as
// the handshake receives it, so a server that goes on to refuse the handshake for want of a
// client certificate (etcd's client port) still gives it; the handshake's own bounds (Go's TLS
// caps the size of each handshake message) bound the bytes read.
func servingCertificate(ctx context.Context, addr string) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(ctx, certTimeout)
	defer cancel()
	var leaf *x509.Certificate
	d := tls.Dialer{Config: &tls.Config{
		// Only the certificate is read; nothing is sent over the connection and nothing it says
		// is trusted. No client certificate is configured, so none is ever sent.
		InsecureSkipVerify: true,
		MinVersion:         tls.VersionTLS12,
		// Called once the server's certificate is in, before the client's is asked for.
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 {
				leaf = cs.PeerCertificates[0]
			}
			return nil
		},
	}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if conn != nil {
		_ = conn.Close()
	}
	switch {
	case leaf != nil:
		// A failure after the server's certificate (a client certificate required) is etcd's
		// answer to a client with none, not a port that did not answer.
		return leaf, nil
	case err != nil:
		return nil, fmt.Errorf("handshake: %w", err)
	}
	return nil, errNoCertificate
}

// certReads keeps the last certificates read, so that the reconciles of one Initializing phase
// make the handshakes once a minute at most.
type certReads struct {
	mu      sync.Mutex
	sources []CertificateSource
	certs   []policy.Certificate
	note    string
	at      time.Time
}

// read returns the control planes' certificates among nodes (ControlPlaneCertificates), read
// again after a minute; with no sources it reads none.
func (c *certReads) read(ctx context.Context, nodes []corev1.Node) ([]policy.Certificate, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sources) == 0 {
		return nil, "the sequencer does not read the control planes' certificates"
	}
	if !c.at.IsZero() && time.Since(c.at) < time.Minute {
		return slices.Clone(c.certs), c.note
	}
	c.certs, c.note = ControlPlaneCertificates(ctx, nodes, c.sources)
	c.at = time.Now()
	return slices.Clone(c.certs), c.note
}
