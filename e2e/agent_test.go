package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiv1beta1 "github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// agentStatus is the part of an agent's GET /v1/status the tests read.
type agentStatus struct {
	Node    string `json:"node"`
	Ready   bool   `json:"ready"`
	Members int    `json:"members"`
	ISO     struct {
		SHA512     string `json:"sha512"`
		State      string `json:"state"`
		Size       int64  `json:"size"`
		Held       int64  `json:"held"`
		FromPeers  int64  `json:"fromPeers"`
		FromOrigin int64  `json:"fromOrigin"`
		Verified   bool   `json:"verified"`
	} `json:"iso"`
	Preload *struct {
		State         string `json:"state"`
		Message       string `json:"message"`
		ImagesPresent int    `json:"imagesPresent"`
		ImagesTotal   int    `json:"imagesTotal"`
	} `json:"preload"`
	Error string `json:"error"`
}

// TestAgents checks the chart's agents end to end. hack/e2e.sh put the release ISO into the node
// cache of the seed nodes only and pointed the agents at an origin that does not answer yet, so
// the other nodes can get the ISO from their peers alone. Then every node must serve the release
// byte for byte through the Service and report itself in its RepoNode. (In a cluster an agent
// preloads only when an UpgradePlan lets its node; TestServeAndPreload covers the import.)
func TestAgents(t *testing.T) {
	c := env(t)
	rel := releaseISO(t)
	require.NotEmpty(t, rel.seeds, "E2E_SEED_NODES names no node")
	waitDaemonSetReady(t, c, c.release+"-agent", 8*time.Minute)
	port := nodePort(t, c, c.release)
	base := func(t *testing.T, node string) string {
		for _, n := range c.nodes {
			if n.Name == node {
				return fmt.Sprintf("http://%s:%d", internalIP(t, n), port)
			}
		}
		require.Failf(t, "no such node", "%s", node)
		return ""
	}

	t.Run("serve through the Service from every node", func(t *testing.T) {
		for _, n := range c.nodes {
			t.Run(n.Name, func(t *testing.T) { checkServes(t, base(t, n.Name), rel) })
		}
	})

	t.Run("peers carried the ISO to the nodes that lacked it", func(t *testing.T) {
		for _, n := range c.nodes {
			t.Run(n.Name, func(t *testing.T) {
				st := getStatus(t, base(t, n.Name))
				require.Equal(t, n.Name, st.Node)
				require.Equal(t, strings.TrimPrefix(rel.checksum, "sha512:"), st.ISO.SHA512)
				require.Equal(t, "verified", st.ISO.State)
				require.Equal(t, len(c.nodes), st.Members, "gossip members seen by %s", n.Name)
				m := getMetrics(t, base(t, n.Name))
				peerBytes := m[`upgrade_repo_peer_fetched_bytes_total{source="peer"}`]
				originBytes := m[`upgrade_repo_peer_fetched_bytes_total{source="origin"}`]
				t.Logf("%s: %.0f bytes of the ISO from peers, %.0f from the origin, %.0f served to peers; %d gossip members",
					n.Name, peerBytes, originBytes, m[`upgrade_repo_peer_served_bytes_total{kind="iso"}`], st.Members)
				if rel.seeds[n.Name] {
					require.Zero(t, peerBytes+originBytes, "seed node %s had the ISO and fetched nothing", n.Name)
					return
				}
				require.Zero(t, originBytes, "node %s fetched from the origin, which never answered", n.Name)
				require.Equal(t, float64(rel.size), peerBytes, "node %s: bytes of the ISO from peers (metrics)", n.Name)
				require.Equal(t, rel.size, st.ISO.FromPeers, "node %s: bytes of the ISO from peers (status)", n.Name)
			})
		}
		served := 0.0
		for _, n := range c.nodes {
			served += getMetrics(t, base(t, n.Name))[`upgrade_repo_peer_served_bytes_total{kind="iso"}`]
		}
		require.GreaterOrEqual(t, served, float64(rel.size*int64(len(c.nodes)-len(rel.seeds))), "ISO bytes the agents served to each other")
	})

	t.Run("every agent reports its node in a RepoNode", func(t *testing.T) {
		for _, n := range c.nodes {
			t.Run(n.Name, func(t *testing.T) {
				var rn apiv1beta1.RepoNode
				eventually(t, 2*time.Minute, "RepoNode "+n.Name+" reports the ISO ready and served", func(ctx context.Context) error {
					if err := c.cl.Get(ctx, client.ObjectKey{Name: n.Name}, &rn); err != nil {
						return err
					}
					if rn.Status.ISO.State != apiv1beta1.ISOReady || !rn.Status.Repo.Ready {
						return fmt.Errorf("RepoNode %s: ISO %q, repo ready %v", n.Name, rn.Status.ISO.State, rn.Status.Repo.Ready)
					}
					return nil
				})
				if !rel.seeds[n.Name] {
					require.Equal(t, rel.size, rn.Status.ISO.BytesTotal, "RepoNode %s: ISO size", n.Name)
					require.Equal(t, rel.size, rn.Status.ISO.BytesFromPeers, "RepoNode %s: ISO bytes from peers", n.Name)
					require.Zero(t, rn.Status.ISO.BytesFromOrigin, "RepoNode %s: ISO bytes from the origin", n.Name)
				}
			})
		}
	})

	t.Run("a deleted agent pod comes back from its node cache", func(t *testing.T) {
		var node string
		for _, n := range c.nodes {
			if !rel.seeds[n.Name] {
				node = n.Name
				break
			}
		}
		require.NotEmpty(t, node, "every node is a seed")
		old := deleteAgentPod(t, c, node)
		eventually(t, 3*time.Minute, "a new agent pod ready on "+node, func(ctx context.Context) error {
			pods, err := agentPods(ctx, c, node)
			if err != nil {
				return err
			}
			for _, p := range pods {
				if string(p.UID) == old || p.DeletionTimestamp != nil {
					continue
				}
				for _, cond := range p.Status.Conditions {
					if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
						return nil
					}
				}
			}
			return fmt.Errorf("no new ready agent pod on %s yet", node)
		})
		st := getStatus(t, base(t, node))
		require.Equal(t, "verified", st.ISO.State)
		m := getMetrics(t, base(t, node))
		require.Zero(t, m[`upgrade_repo_peer_fetched_bytes_total{source="peer"}`]+m[`upgrade_repo_peer_fetched_bytes_total{source="origin"}`],
			"the new agent on %s fetched ISO bytes instead of reusing its node cache", node)
		checkServes(t, base(t, node), rel)
	})
}

// fetchStatus reads an agent's /v1/status.
func fetchStatus(ctx context.Context, base string) (*agentStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/v1/status: %s", base, resp.Status)
	}
	var st agentStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("GET %s/v1/status: %w", base, err)
	}
	return &st, nil
}

func getStatus(t *testing.T, base string) *agentStatus {
	t.Helper()
	var st *agentStatus
	eventually(t, time.Minute, "status of "+base, func(ctx context.Context) error {
		var err error
		st, err = fetchStatus(ctx, base)
		return err
	})
	return st
}

// getMetrics reads the Prometheus text exposition at base/metrics into series → value, the
// series written as `name{label="value",...}` exactly as exposed.
func getMetrics(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, body := httpGet(t, base+"/metrics", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return parseMetrics(t, body)
}

// parseMetrics reads a Prometheus text exposition into series → value, as getMetrics.
func parseMetrics(t *testing.T, body []byte) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, "metrics line %q", line)
		out[line[:i]] = v
	}
	require.NoError(t, sc.Err())
	return out
}

// requireImages checks, with the node's own ctr, that its containerd holds every ref in the
// namespace the kubelet uses.
func requireImages(t *testing.T, node string, refs []string) {
	t.Helper()
	var listed string
	eventually(t, time.Minute, "list the images of "+node, func(ctx context.Context) error {
		var err error
		listed, err = nodeCmd(ctx, node, "ctr", "-n", "k8s.io", "images", "ls", "-q")
		return err
	})
	have := map[string]bool{}
	for _, l := range strings.Fields(listed) {
		have[l] = true
	}
	for _, ref := range refs {
		require.True(t, have[ref], "node %s: containerd lacks %s", node, ref)
	}
}
