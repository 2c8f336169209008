package sequencer

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/upgrade-repo/upgrade-repo/policy"
)

// ServingCertificateName names, in the pre-flight's messages, the certificate read from each
// control plane.
const ServingCertificateName = "the API server's serving certificate"

// certTimeout bounds the handshake with one control plane.
const certTimeout = 3 * time.Second

// maxControlPlanes bounds the control planes a pre-flight reads the certificate of.
const maxControlPlanes = 9

// ServingCertificates reads, from every control-plane node of nodes (at most maxControlPlanes),
// when the API server's serving certificate expires: a TLS handshake with the node's internal
// address on port, each bounded by certTimeout, that reads the certificate the server sends and
// nothing else. It is the least privileged way to the expiry: no host mount of the kubeadm PKI
// (its directory holds the cluster's private keys) and no RBAC. The certificate is not verified
// (only its expiry is read, and nothing is sent). note says which control planes did not answer;
// kubeadm's other certificates (the API server's clients, etcd's) are not seen from the network.
func ServingCertificates(ctx context.Context, nodes []corev1.Node, port int) (certs []policy.Certificate, note string) {
	type answer struct {
		cert   *policy.Certificate
		failed string
	}
	var cps []*corev1.Node
	for i := range nodes {
		if IsControlPlane(&nodes[i]) && len(cps) < maxControlPlanes {
			cps = append(cps, &nodes[i])
		}
	}
	// One handshake per control plane at once, so that the check takes certTimeout at most.
	answers := make([]answer, len(cps))
	var wg sync.WaitGroup
	for i, node := range cps {
		addr := internalIP(node)
		if addr == "" {
			answers[i].failed = node.Name + " (no internal address)"
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			notAfter, err := servingNotAfter(ctx, net.JoinHostPort(addr, strconv.Itoa(port)))
			if err != nil {
				answers[i].failed = fmt.Sprintf("%s (%v)", node.Name, err)
				return
			}
			answers[i].cert = &policy.Certificate{Node: node.Name, Name: ServingCertificateName, NotAfter: notAfter}
		}()
	}
	wg.Wait()
	var failed []string
	for _, a := range answers {
		if a.cert != nil {
			certs = append(certs, *a.cert)
		} else {
			failed = append(failed, a.failed)
		}
	}
	if len(failed) > 0 {
		note = "not read from control plane " + strings.Join(failed, ", ")
	}
	return certs, note
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// servingNotAfter returns when the leaf certificate the TLS server at addr sends expires.
func servingNotAfter(ctx context.Context, addr string) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, certTimeout)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{
		// Only the expiry is read; nothing is sent over the connection and nothing it says is
		// trusted.
		InsecureSkipVerify: true,
		MinVersion:         tls.VersionTLS12,
	}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return time.Time{}, fmt.Errorf("handshake: %w", err)
	}
	defer conn.Close()
	chain := conn.(*tls.Conn).ConnectionState().PeerCertificates
	if len(chain) == 0 {
		return time.Time{}, fmt.Errorf("handshake: no certificate")
	}
	return chain[0].NotAfter, nil
}

// certReads keeps the last certificates read, so that the reconciles of one Initializing phase
// make the handshakes once a minute at most.
type certReads struct {
	mu    sync.Mutex
	port  int
	certs []policy.Certificate
	note  string
	at    time.Time
}

// read returns the control planes' serving certificates among nodes (ServingCertificates), read
// again after a minute; with port 0 it reads none.
func (c *certReads) read(ctx context.Context, nodes []corev1.Node) ([]policy.Certificate, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.port <= 0 {
		return nil, "the sequencer does not read the control planes' certificates"
	}
	if !c.at.IsZero() && time.Since(c.at) < time.Minute {
		return c.certs, c.note
	}
	c.certs, c.note = ServingCertificates(ctx, nodes, c.port)
	c.at = time.Now()
	return c.certs, c.note
}
