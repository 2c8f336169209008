package kubeadm

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// EtcdMember is one member of the cluster's etcd, as etcd reports it.
type EtcdMember struct {
	// Name is the member's name (kubeadm names it after its node).
	Name string
	// ClientURL is the first URL the member serves clients on.
	ClientURL string
	// Healthy is true when the member answered its /health with "true".
	Healthy bool
	// Reason says why a member is not healthy.
	Reason string
}

// Etcd reads the health of the cluster's etcd from etcd itself.
type Etcd interface {
	// Members lists every member of the cluster with its health. An error means the list
	// itself could not be read (no quorum, or this node's member is down). Safe for
	// concurrent use; blocks for at most the implementation's timeouts.
	Members(ctx context.Context) ([]EtcdMember, error)
}

// EtcdQuorum is the judgement of one reading of etcd before a control-plane node goes down.
type EtcdQuorum struct {
	// Members and Healthy count the members and the healthy ones.
	Members, Healthy int
	// Unhealthy names the members that are not healthy, with why.
	Unhealthy []string
}

// Quorum is how many members the cluster needs up.
func (q EtcdQuorum) Quorum() int { return q.Members/2 + 1 }

// OK reports whether every member is healthy: only then may a control-plane node, and its
// member with it, go down without risking the quorum.
func (q EtcdQuorum) OK() bool { return q.Members > 0 && q.Healthy == q.Members }

// String says what was read, for the step's log and its reports.
func (q EtcdQuorum) String() string {
	s := fmt.Sprintf("etcd: %d of %d members healthy, quorum %d", q.Healthy, q.Members, q.Quorum())
	if len(q.Unhealthy) > 0 {
		s += "; not healthy: " + strings.Join(q.Unhealthy, ", ")
		if q.Healthy-1 < q.Quorum() {
			s += fmt.Sprintf("; taking this node's member down now would leave %d, below quorum", max(q.Healthy-1, 0))
		}
	}
	return s
}

// JudgeEtcd sums up members.
func JudgeEtcd(members []EtcdMember) EtcdQuorum {
	q := EtcdQuorum{Members: len(members)}
	for _, m := range members {
		if m.Healthy {
			q.Healthy++
			continue
		}
		q.Unhealthy = append(q.Unhealthy, m.Name+" ("+m.Reason+")")
	}
	slices.Sort(q.Unhealthy)
	return q
}

// EtcdClient is Etcd over etcd's HTTP API (its gRPC gateway and /health), with the node's etcd
// client certificates, as kubeadm lays them out.
type EtcdClient struct {
	// Endpoint is the local member's client URL.
	Endpoint string
	// HTTP carries the client certificate and etcd's CA.
	HTTP *http.Client
}

var _ Etcd = (*EtcdClient)(nil)

// advertiseClientURLs finds the member's client URLs in its static pod manifest.
var advertiseClientURLs = regexp.MustCompile(`--advertise-client-urls=(\S+)`)

// ErrNoLocalEtcd is returned by NewEtcdClient on a node that runs no etcd member of kubeadm's
// (a worker, or a control plane with external etcd).
var ErrNoLocalEtcd = errors.New("no local etcd member")

// NewEtcdClient reads, under root (the node's / as the step sees it), the etcd static pod's
// manifest for the member's client URL and kubeadm's health-check client certificate, and
// returns a client of that member.
func NewEtcdClient(root string) (*EtcdClient, error) {
	manifest, err := os.ReadFile(filepath.Join(root, "etc/kubernetes/manifests/etcd.yaml"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoLocalEtcd
	}
	if err != nil {
		return nil, fmt.Errorf("read the etcd manifest: %w", err)
	}
	m := advertiseClientURLs.FindSubmatch(manifest)
	if m == nil {
		return nil, fmt.Errorf("the etcd manifest names no --advertise-client-urls")
	}
	endpoint, _, _ := strings.Cut(strings.Trim(string(m[1]), `"'`), ",")
	pki := filepath.Join(root, "etc/kubernetes/pki/etcd")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "healthcheck-client.crt"), filepath.Join(pki, "healthcheck-client.key"))
	if err != nil {
		return nil, fmt.Errorf("read etcd's health-check client certificate: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("read etcd's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("etcd's CA %s holds no certificate", filepath.Join(pki, "ca.crt"))
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}}
	return &EtcdClient{Endpoint: endpoint, HTTP: &http.Client{Transport: tr, Timeout: 5 * time.Second}}, nil
}

// maxEtcdAnswer bounds what is read of one answer of etcd's.
const maxEtcdAnswer = 1 << 20

// Members lists the members through the local one, then asks each for its /health.
func (c *EtcdClient) Members(ctx context.Context) ([]EtcdMember, error) {
	var list struct {
		Members []struct {
			Name       string   `json:"name"`
			ClientURLs []string `json:"clientURLs"`
		} `json:"members"`
	}
	if err := c.call(ctx, http.MethodPost, c.Endpoint+"/v3/cluster/member/list", []byte("{}"), &list); err != nil {
		return nil, fmt.Errorf("list etcd's members through %s: %w", c.Endpoint, err)
	}
	out := make([]EtcdMember, 0, len(list.Members))
	for _, m := range list.Members {
		em := EtcdMember{Name: m.Name}
		if len(m.ClientURLs) == 0 {
			// A member added but not started yet serves no client.
			em.Reason = "not started: no client URL"
			out = append(out, em)
			continue
		}
		em.ClientURL = m.ClientURLs[0]
		var h struct {
			Health string `json:"health"`
			Reason string `json:"reason"`
		}
		switch err := c.call(ctx, http.MethodGet, em.ClientURL+"/health", nil, &h); {
		case err != nil:
			em.Reason = err.Error()
		case h.Health != "true":
			em.Reason = "health " + h.Health
			if h.Reason != "" {
				em.Reason += ": " + h.Reason
			}
		default:
			em.Healthy = true
		}
		if em.Name == "" {
			em.Name = em.ClientURL
		}
		out = append(out, em)
	}
	return out, nil
}

func (c *EtcdClient) call(ctx context.Context, method, url string, body []byte, into any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxEtcdAnswer))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, strings.TrimSpace(string(b[:min(len(b), 200)])))
	}
	if err := json.Unmarshal(b, into); err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	return nil
}
