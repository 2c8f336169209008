package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgrade-repo/upgrade-repo/agent"
	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd"
	"github.com/upgrade-repo/upgrade-repo/preload/containerd/containerdtest"
	"github.com/upgrade-repo/upgrade-repo/repo"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// freeAddr returns a loopback address with a port that was free a moment ago, taken below
// Linux's ephemeral ports (32768 and up): the test servers (":0") and the outgoing connections of
// the tests running beside it take theirs from that range, so none of them takes this one first.
func freeAddr(t *testing.T) string {
	t.Helper()
	for {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000)))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		return addr
	}
}

func agentStatusOf(t *testing.T, addr string) (agent.Status, bool) {
	resp, err := http.Get("http://" + addr + "/v1/status")
	if err != nil {
		return agent.Status{}, false
	}
	defer resp.Body.Close()
	var s agent.Status
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	return s, true
}

func waitReady(t *testing.T, addr string, done <-chan error) agent.Status {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		if s, ok := agentStatusOf(t, addr); ok && s.Ready {
			return s
		}
		select {
		case err := <-done:
			t.Fatalf("agent at %s stopped: %v", addr, err)
		case <-deadline:
			t.Fatalf("agent at %s never turned ready", addr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Two agents: the first gets the release from the origin, the second joins it and gets the whole
// ISO from it; both serve the release, and the origin sent one copy.
func TestAgentsShareTheRelease(t *testing.T) {
	t.Parallel()
	isoPath, sum := packTestISO(t)
	origin, sent := countingOrigin(t, isoPath)
	ctx, cancel := context.WithCancel(t.Context())
	a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}
	start := func(name, join string) (string, string, chan error) {
		httpAddr, gossipAddr := freeAddr(t), freeAddr(t)
		args := []string{"--node-name", name, "--listen", httpAddr, "--gossip-listen", gossipAddr,
			"--cache-dir", t.TempDir(), "--iso-url", origin.URL + "/release.iso", "--iso-checksum", sum.String(),
			"--settle", "200ms"}
		if join != "" {
			args = append(args, "--join", join)
		}
		done := make(chan error, 1)
		go func() { done <- runAgent(ctx, a, args) }()
		return httpAddr, gossipAddr, done
	}
	first, firstGossip, firstDone := start("first", "")
	s := waitReady(t, first, firstDone)
	require.Equal(t, "verified", s.ISO.State)
	require.Equal(t, sum.Hex(), s.ISO.SHA512)
	size := s.ISO.Size
	require.Equal(t, size, s.ISO.FromOrigin)

	second, _, secondDone := start("second", firstGossip)
	s = waitReady(t, second, secondDone)
	require.Equal(t, 2, s.Members)
	require.Equal(t, size, s.ISO.FromPeers)
	require.Zero(t, s.ISO.FromOrigin)
	require.Equal(t, size, sent.Load(), "the origin sent one copy for two nodes")

	resp, err := http.Get("http://" + second + "/v1/release")
	require.NoError(t, err)
	var rel map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rel))
	resp.Body.Close()
	require.Equal(t, "v1.5.2", rel["harvester"])

	cancel()
	require.NoError(t, <-firstDone)
	require.NoError(t, <-secondDone)
}

func TestAgentUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
	}{
		{name: "nothing to serve", args: []string{"--node-name", "n"}},
		{name: "url without checksum", args: []string{"--node-name", "n", "--iso-url", "http://x/r.iso", "--cache-dir", "/tmp"}},
		{name: "bad checksum", args: []string{"--node-name", "n", "--iso-url", "http://x/r.iso", "--cache-dir", "/tmp", "--iso-checksum", "md5:00"}},
		{name: "url without cache", args: []string{"--node-name", "n", "--iso-url", "http://x/r.iso", "--iso-checksum", "sha512:" + strings.Repeat("a", 128)}},
		{name: "bad listen", args: []string{"--node-name", "n", "--iso", "/r.iso", "--listen", "nope"}},
		{name: "argument", args: []string{"--node-name", "n", "--iso", "/r.iso", "extra"}},
		{name: "checksum without url", args: []string{"--node-name", "n", "--cache-dir", "/tmp", "--iso-checksum", "sha512:" + strings.Repeat("a", 128)}},
		{name: "report without cache", args: []string{"--node-name", "n", "--report"}},
		{name: "report every zero", args: []string{"--node-name", "n", "--report", "--cache-dir", "/tmp", "--report-interval", "0s"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}
			err := runAgent(t.Context(), a, tc.args)
			require.ErrorIs(t, err, errUsage)
		})
	}
}

type countingResponse struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingResponse) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// kubeFake is the API server as controller-runtime's fake client sees it, with the status
// subresources the agent and the sequencer write.
func kubeFake(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	s, err := kubeclient.Scheme()
	require.NoError(t, err)
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithStatusSubresource(&v1beta1.RepoNode{}, &v1beta1.UpgradePlan{}).Build()
}

// waitRepoNode polls the RepoNode of node until ok accepts its status.
func waitRepoNode(t *testing.T, c client.Client, node string, done <-chan error, ok func(v1beta1.RepoNodeStatus) bool) v1beta1.RepoNodeStatus {
	t.Helper()
	deadline := time.After(60 * time.Second)
	var last v1beta1.RepoNodeStatus
	for {
		var rn v1beta1.RepoNode
		if err := c.Get(t.Context(), client.ObjectKey{Name: node}, &rn); err == nil {
			last = rn.Status
			if ok(rn.Status) {
				return rn.Status
			}
		}
		select {
		case err := <-done:
			t.Fatalf("agent %s stopped: %v", node, err)
		case <-deadline:
			t.Fatalf("the RepoNode of %s never got there; last: %+v", node, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// setAgents rewrites the plan's instructions to the agents, as the sequencer would.
func setAgents(t *testing.T, c client.Client, plan string, phase v1beta1.Phase, a *v1beta1.AgentInstructions) *v1beta1.UpgradePlan {
	t.Helper()
	var p v1beta1.UpgradePlan
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: plan}, &p))
	p.Status.Phase, p.Status.Agents = phase, a
	require.NoError(t, c.Status().Update(t.Context(), &p))
	return &p
}

// decide runs the sequencer's decision on the plan with the one node's report.
func decide(p *v1beta1.UpgradePlan, node string, st v1beta1.RepoNodeStatus) v1beta1.Phase {
	o := sequencer.Observation{
		Now: time.Now(), Plan: p, ReadyEndpoints: 1,
		Nodes:     []sequencer.NodeInfo{{Name: node, Ready: true}},
		RepoNodes: map[string]*v1beta1.RepoNodeStatus{node: &st},
	}
	return sequencer.Decide(sequencer.DefaultConfig, o).Status.Phase
}

func testAgentConfig(t *testing.T, node string, kube client.WithWatch) agentConfig {
	return agentConfig{
		Config: agent.Config{Node: node, CacheDir: t.TempDir(), Grace: 5 * time.Second, ReportInterval: 100 * time.Millisecond},
		listen: freeAddr(t), gossipListen: freeAddr(t), kube: kube, report: true,
	}
}

// An agent without an ISO of its own follows the cluster: it gets the ISO a plan names, reports
// what the sequencer waits for through ISODownloading and RepoCreating, and drops the ISO from its
// cache once the plan releases it.
func TestAgentFollowsPlans(t *testing.T) {
	t.Parallel()
	isoPath, sum := packTestISO(t)
	origin, sent := countingOrigin(t, isoPath)
	kube := kubeFake(t, &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: "up"},
		Spec:       v1beta1.UpgradePlanSpec{Version: "v1.5.2"},
	})
	c := testAgentConfig(t, "n1", kube)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}
	done := make(chan error, 1)
	go func() { done <- runNodeAgent(ctx, a, c) }()

	// No plan holds an ISO: the agent reports that it holds none.
	st := waitRepoNode(t, kube, "n1", done, func(s v1beta1.RepoNodeStatus) bool { return !s.HeartbeatTime.IsZero() })
	require.Equal(t, v1beta1.ISOPending, st.ISO.State)
	require.False(t, st.Repo.Ready)

	agents := &v1beta1.AgentInstructions{ISOURL: origin.URL + "/release.iso", ISOChecksum: sum.Hex(), Hold: true}
	plan := setAgents(t, kube, "up", v1beta1.PhaseISODownloading, agents)
	st = waitRepoNode(t, kube, "n1", done, func(s v1beta1.RepoNodeStatus) bool { return s.ISO.State == v1beta1.ISOReady })
	require.Equal(t, sum.Hex(), st.ISO.Checksum)
	require.Positive(t, st.ISO.BytesTotal)
	require.Equal(t, st.ISO.BytesTotal, st.ISO.BytesDone)
	require.Equal(t, st.ISO.BytesTotal, st.ISO.BytesFromOrigin)
	size := st.ISO.BytesTotal
	require.Equal(t, v1beta1.PhaseISODownloaded, decide(plan, "n1", st))

	st = waitRepoNode(t, kube, "n1", done, func(s v1beta1.RepoNodeStatus) bool { return s.Repo.Ready })
	require.Equal(t, "http://"+c.listen+"/", st.Repo.URL)
	require.Empty(t, st.Preload.State, "no containerd, no preload")
	plan = setAgents(t, kube, "up", v1beta1.PhaseRepoCreating, agents)
	require.Equal(t, v1beta1.PhaseRepoCreated, decide(plan, "n1", st))
	resp, err := http.Get(st.Repo.URL + "v1/release")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// A second plan holding the same ISO keeps it when the first lets go.
	require.NoError(t, kube.Create(t.Context(), &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "later"}, Spec: v1beta1.UpgradePlanSpec{Version: "v1.5.2"}}))
	setAgents(t, kube, "later", v1beta1.PhaseISODownloading, agents)
	setAgents(t, kube, "up", v1beta1.PhaseCleaningUp, &v1beta1.AgentInstructions{ISOURL: agents.ISOURL, ISOChecksum: agents.ISOChecksum})
	// A report stamped a second after the change comes after many reads of the plans.
	changed := time.Now()
	st = waitRepoNode(t, kube, "n1", done, func(s v1beta1.RepoNodeStatus) bool { return s.HeartbeatTime.After(changed.Add(time.Second)) })
	require.Equal(t, v1beta1.ISOReady, st.ISO.State)
	require.True(t, st.Repo.Ready)

	// Released by every plan: the cached ISO goes, and the repo stops serving it.
	setAgents(t, kube, "later", v1beta1.PhaseCleaningUp, &v1beta1.AgentInstructions{ISOURL: agents.ISOURL, ISOChecksum: agents.ISOChecksum})
	st = waitRepoNode(t, kube, "n1", done, func(s v1beta1.RepoNodeStatus) bool { return s.ISO.State == v1beta1.ISOPending })
	require.False(t, st.Repo.Ready)
	require.Empty(t, st.ISO.Checksum)
	left, err := os.ReadDir(c.CacheDir)
	require.NoError(t, err)
	require.Empty(t, left, "the cache holds nothing once no plan holds the ISO")
	resp, err = http.Get("http://" + c.listen + "/v1/release")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, size, sent.Load(), "the origin sent one copy")

	cancel()
	require.NoError(t, <-done)
}

// An agent with its own ISO and a real containerd preloads only once the plan lets its node.
func TestAgentPreloadsWhenAllowed(t *testing.T) {
	d := containerdtest.Start(t)
	isoPath, sum := packTestISO(t)
	// The plan writes the checksum with its prefix: the report must carry it as written.
	planSum := "sha512:" + sum.Hex()
	kube := kubeFake(t, &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: "up"},
		Spec:       v1beta1.UpgradePlanSpec{Version: "v1.5.2"},
		Status: v1beta1.UpgradePlanStatus{Phase: v1beta1.PhaseImagePreloading,
			Agents: &v1beta1.AgentInstructions{ISOURL: "http://origin.invalid/release.iso", ISOChecksum: planSum, Hold: true}},
	})
	c := testAgentConfig(t, "n1", kube)
	// As root beside the daemon, the agent reaches its content directory: blobs go there directly.
	c.ISOFile, c.ISOChecksum, c.sock, c.direct = isoPath, sum.String(), d.Socket, true
	// It sees the snapshotter's directory too: layers are extracted while they are written.
	c.unpack, c.snapshotter, c.onePass = true, "overlayfs", true
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}
	done := make(chan error, 1)
	go func() { done <- runNodeAgent(ctx, a, c) }()

	st := waitRepoNode(t, kube, "n1", done, func(s v1beta1.RepoNodeStatus) bool { return s.Repo.Ready })
	require.Equal(t, planSum, st.ISO.Checksum)
	require.Equal(t, v1beta1.ISOReady, st.ISO.State)
	changed := time.Now()
	st = waitRepoNode(t, kube, "n1", done, func(s v1beta1.RepoNodeStatus) bool { return s.HeartbeatTime.After(changed.Add(time.Second)) })
	require.Empty(t, st.Preload.State, "no preload before the plan lets the node")
	cs, err := containerd.New(t.Context(), d.Socket)
	require.NoError(t, err)
	defer cs.Close()
	refs := releaseRefs(t, c.listen)
	missing, err := cs.Missing(t.Context(), refs)
	require.NoError(t, err)
	require.ElementsMatch(t, refs, missing, "no image imported before the plan lets the node")

	// The sequencer lets the node preload.
	plan := setAgents(t, kube, "up", v1beta1.PhaseImagePreloading,
		&v1beta1.AgentInstructions{ISOURL: "http://origin.invalid/release.iso", ISOChecksum: planSum, Hold: true, PreloadNodes: []string{"n1"}})
	require.Equal(t, v1beta1.PhaseImagePreloading, decide(plan, "n1", st))
	st = waitRepoNode(t, kube, "n1", done, func(s v1beta1.RepoNodeStatus) bool {
		return s.Preload.State != "" && s.Preload.State != v1beta1.PreloadRunning
	})
	require.Equal(t, v1beta1.PreloadDone, st.Preload.State, st.Preload.Message)
	require.Positive(t, st.Preload.ImagesTotal)
	require.Equal(t, st.Preload.ImagesTotal, st.Preload.ImagesDone)
	require.Positive(t, st.Preload.BytesDone)
	require.Equal(t, v1beta1.IngestDirect, st.Preload.Ingest, "the path the blobs took")
	require.Equal(t, v1beta1.UnpackOnePass, st.Preload.Unpack, "how the layers were unpacked")
	require.Equal(t, v1beta1.PhaseImagePreloaded, decide(plan, "n1", st))
	status, metrics, _ := get(t, "http://"+c.listen+"/metrics")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(metrics), "\nupgrade_repo_agent_preload_direct_ingest 1\n")
	require.Contains(t, string(metrics), "\nupgrade_repo_agent_preload_one_pass_unpack 1\n")

	missing, err = cs.Missing(t.Context(), refs)
	require.NoError(t, err)
	require.Empty(t, missing)

	cancel()
	require.NoError(t, <-done)
}

// A plan whose ISO checksum is unusable gets a Failed ISO that says why, and the agent fetches
// nothing; a corrected plan is followed.
func TestAgentReportsAnUnusablePlan(t *testing.T) {
	t.Parallel()
	var asked atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		http.Error(w, "gone", http.StatusNotFound)
	}))
	defer origin.Close()
	kube := kubeFake(t, &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: "up"},
		Spec:       v1beta1.UpgradePlanSpec{Version: "v1.5.2"},
		Status: v1beta1.UpgradePlanStatus{Phase: v1beta1.PhaseISODownloading,
			Agents: &v1beta1.AgentInstructions{ISOURL: origin.URL + "/r.iso", ISOChecksum: "md5:1234", Hold: true}},
	})
	c := testAgentConfig(t, "n1", kube)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}
	done := make(chan error, 1)
	go func() { done <- runNodeAgent(ctx, a, c) }()

	st := waitRepoNode(t, kube, "n1", done, func(s v1beta1.RepoNodeStatus) bool { return s.ISO.State == v1beta1.ISOFailed })
	require.Equal(t, "md5:1234", st.ISO.Checksum)
	require.Contains(t, st.ISO.Message, "plan up")
	require.Contains(t, st.ISO.Message, "md5:1234")
	require.Zero(t, asked.Load())

	good := "sha512:" + strings.Repeat("ab", 64)
	setAgents(t, kube, "up", v1beta1.PhaseISODownloading, &v1beta1.AgentInstructions{ISOURL: origin.URL + "/r.iso", ISOChecksum: good, Hold: true})
	st = waitRepoNode(t, kube, "n1", done, func(s v1beta1.RepoNodeStatus) bool { return s.ISO.Checksum == good })
	require.NotEqual(t, v1beta1.ISOReady, st.ISO.State)

	cancel()
	require.NoError(t, <-done)
}

// countingOrigin serves the ISO at isoPath as an origin would, counting the body bytes it sends.
func countingOrigin(t *testing.T, isoPath string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	sent := new(atomic.Int64)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(isoPath)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if r.Header.Get("Range") == "bytes=0-0" {
			// A fetcher's first request learns the size: not counted.
			http.ServeContent(w, r, "release.iso", st.ModTime(), f)
			return
		}
		http.ServeContent(&countingResponse{ResponseWriter: w, n: sent}, r, "release.iso", st.ModTime(), f)
	}))
	t.Cleanup(origin.Close)
	return origin, sent
}

// releaseRefs returns the image references of the release served at addr.
func releaseRefs(t *testing.T, addr string) []string {
	t.Helper()
	status, body, _ := get(t, "http://"+addr+"/v1/images")
	require.Equal(t, http.StatusOK, status)
	var imgs []repo.ImageDoc
	require.NoError(t, json.Unmarshal(body, &imgs))
	var refs []string
	for _, im := range imgs {
		refs = append(refs, im.Ref)
	}
	require.NotEmpty(t, refs)
	return refs
}

// An agent whose origin fails says so in its status while it retries, and clears it once the
// origin answers and the ISO is verified.
func TestAgentSaysTheOriginFails(t *testing.T) {
	t.Parallel()
	isoPath, sum := packTestISO(t)
	var down atomic.Bool
	down.Store(true)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		http.ServeFile(w, r, isoPath)
	}))
	t.Cleanup(origin.Close)
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	a := &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}
	go func() {
		done <- runAgent(ctx, a, []string{"--node-name", "n1", "--listen", addr, "--gossip-listen", freeAddr(t),
			"--cache-dir", t.TempDir(), "--iso-url", origin.URL + "/release.iso", "--iso-checksum", sum.String()})
	}()
	defer func() { cancel(); require.NoError(t, <-done) }()
	deadline := time.After(30 * time.Second)
	for {
		s, _ := agentStatusOf(t, addr)
		if strings.Contains(s.Error, "503") {
			require.Contains(t, s.Error, "the origin fails, retrying")
			require.Equal(t, agent.ISOFetching, s.ISO.State)
			break
		}
		select {
		case <-deadline:
			t.Fatalf("the agent never said its origin fails; status %+v", s)
		case <-time.After(50 * time.Millisecond):
		}
	}
	down.Store(false)
	s := waitReady(t, addr, done)
	require.Equal(t, agent.ISOVerified, s.ISO.State)
	require.Empty(t, s.Error)
}
