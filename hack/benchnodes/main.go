// Command benchnodes is the measuring side of `make bench-nodes`: the node phase of one
// UpgradePlan driven by the real sequencer (the upgrade-repo binary) over many simulated nodes,
// against a local etcd and kube-apiserver. For each size it reports the sequencer's CPU seconds
// and peak RSS (from /proc), the API requests the sequencer made (from the API server's audit
// log, by the sequencer's user), the plan's wall time against the ideal (the sum of the step
// times over the concurrency), and the distribution of the sequencer's own time per node (from
// the plan's node times, sequencer.NodeTimings).
//
// What is simulated is said in fakes.go: the agents, the node step and, without kwok, the nodes.
// The plan is created at NodeUpgrading, as the phases before it (download, preload) left it: it
// is the node phase that is measured.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

const (
	namespace = "upgrade-repo-system"
	planName  = "bench"
	checksum  = "sha512:c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00"
)

// config is what one run is given.
type config struct {
	binDir, sequencerBin, kwokBin, kubectl, crds, workDir string
	kwokStages                                            []string
	sizes                                                 []int
	concurrency, zones                                    int
	step, heartbeat, timeout                              time.Duration
	// pprof saves the sequencer's CPU profile over the plan's ideal time and its heap profile
	// at the end, in each size's directory.
	pprof bool
}

// result is what one size measured.
type result struct {
	nodes                     int
	wall, ideal, toDone       time.Duration
	cpu                       time.Duration
	peakRSS                   int64
	requests, writes, watches int
	byVerb                    map[string]int
	own                       sequencer.Distribution
	kwok                      bool
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchnodes:", err)
		os.Exit(1)
	}
}

func run() error {
	var c config
	sizes := flag.String("sizes", "100,1000", "comma-separated numbers of simulated nodes, one run each")
	flag.StringVar(&c.binDir, "bin-dir", "/root/.cache/kind-offline/bin", "`dir`ectory of etcd and kube-apiserver")
	flag.StringVar(&c.sequencerBin, "sequencer", "bin/upgrade-repo", "the upgrade-repo `binary` whose sequencer is measured")
	flag.StringVar(&c.kwokBin, "kwok", "", "kwok `binary` that simulates the nodes; none: Nodes created Ready and left be")
	stages := flag.String("kwok-stages", "", "comma-separated kwok Stage `files` (kwok's node-initialize and node-heartbeat-with-lease)")
	flag.StringVar(&c.kubectl, "kubectl", "/root/.cache/kind-offline/bin/kubectl", "kubectl `binary`, to install the CRDs")
	flag.StringVar(&c.crds, "crds", "manifests/crd", "`dir`ectory of the CRDs")
	flag.StringVar(&c.workDir, "work-dir", "", "`dir`ectory for etcd, logs and the audit log (a temporary one when empty)")
	flag.IntVar(&c.concurrency, "concurrency", 25, "the plan's node concurrency")
	flag.IntVar(&c.zones, "zones", 50, "zones the nodes are spread over (topology.kubernetes.io/zone); 0: none")
	flag.DurationVar(&c.step, "step", 10*time.Second, "how long each node's step runs")
	flag.DurationVar(&c.heartbeat, "heartbeat", 10*time.Second, "the fake agents' report interval (the real agent's default)")
	flag.DurationVar(&c.timeout, "timeout", 30*time.Minute, "how long one size may run")
	flag.BoolVar(&c.pprof, "pprof", false, "save the sequencer's CPU profile (over the ideal time) and heap profile in each size's directory (see -work-dir)")
	flag.Parse()
	if *stages != "" {
		c.kwokStages = strings.Split(*stages, ",")
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-sizes: %q is not a number of nodes", s)
		}
		c.sizes = append(c.sizes, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.workDir == "" {
		d, err := os.MkdirTemp("", "bench-nodes-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		c.workDir = d
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var results []result
	for _, n := range c.sizes {
		dir := filepath.Join(c.workDir, strconv.Itoa(n))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		log.Info("size", "nodes", n, "dir", dir)
		r, err := runSize(ctx, log, c, n, dir)
		if err != nil {
			return fmt.Errorf("%d nodes: %w", n, err)
		}
		results = append(results, r)
		printResults(os.Stdout, c, results[len(results)-1:], false)
	}
	fmt.Println()
	printResults(os.Stdout, c, results, true)
	return nil
}

// runSize measures the node phase over n simulated nodes, in dir.
func runSize(ctx context.Context, log *slog.Logger, c config, n int, dir string) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res := result{nodes: n, kwok: c.kwokBin != ""}
	logs, err := os.Create(filepath.Join(dir, "cluster.log"))
	if err != nil {
		return res, err
	}
	defer logs.Close()
	api, err := startAPIServer(ctx, c.binDir, dir, []string{"bench", "sequencer", "kwok"}, []string{"sequencer"}, logs)
	if err != nil {
		return res, err
	}
	defer api.stop()
	kcs := map[string]string{}
	for _, u := range []string{"bench", "sequencer", "kwok"} {
		if kcs[u], err = api.kubeconfig(u); err != nil {
			return res, err
		}
	}
	if out, err := exec.CommandContext(ctx, c.kubectl, "--kubeconfig", kcs["bench"], "apply", "--server-side", "-f", c.crds).CombinedOutput(); err != nil {
		return res, fmt.Errorf("install the CRDs: %w: %s", err, out)
	}
	if out, err := exec.CommandContext(ctx, c.kubectl, "--kubeconfig", kcs["bench"], "wait", "--for", "condition=established", "--timeout", "60s", "crd", "--all").CombinedOutput(); err != nil {
		return res, fmt.Errorf("wait for the CRDs: %w: %s", err, out)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kcs["bench"])
	if err != nil {
		return res, err
	}
	rc.QPS, rc.Burst = 1000, 2000
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return res, err
	}
	if err := v1beta1.AddToScheme(s); err != nil {
		return res, err
	}
	cl, err := client.NewWithWatch(rc, client.Options{Scheme: s})
	if err != nil {
		return res, err
	}

	// The cluster: the namespace, the nodes (kwok's, or left be), their agents' reports.
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return res, fmt.Errorf("create namespace: %w", err)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%04d", i+1)
	}
	if c.kwokBin != "" {
		kwok := exec.CommandContext(ctx, c.kwokBin, "--kubeconfig", kcs["kwok"], "--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake", "--node-lease-duration-seconds", "40",
			"--node-ip", "127.0.0.1")
		for _, st := range c.kwokStages {
			kwok.Args = append(kwok.Args, "--config", st)
		}
		kwok.Stdout, kwok.Stderr = logs, logs
		if err := kwok.Start(); err != nil {
			return res, fmt.Errorf("start kwok: %w", err)
		}
		defer func() { _ = kwok.Process.Signal(os.Interrupt); _ = kwok.Wait() }()
	}
	if err := createNodes(ctx, cl, names, c); err != nil {
		return res, err
	}
	if err := waitReady(ctx, cl, n); err != nil {
		return res, err
	}
	agents := &fakeAgents{c: cl, nodes: names, checksum: checksum, interval: c.heartbeat, log: log}
	if err := agents.create(ctx, 32); err != nil {
		return res, err
	}
	if err := createPlan(ctx, cl, c); err != nil {
		return res, err
	}
	fakeCtx, stopFakes := context.WithCancel(ctx)
	defer stopFakes()
	go agents.run(fakeCtx)
	steps := &fakeSteps{c: cl, agents: agents, namespace: namespace, plan: planName, stepTime: c.step, log: log}
	go func() {
		if err := steps.run(fakeCtx, func(ctx context.Context, each func(*batchv1.Job)) error { return watchJobs(ctx, cl, each) }); err != nil && ctx.Err() == nil {
			log.Error("fake node steps", "err", err)
		}
	}()

	// The sequencer, as the chart runs it but for leader election.
	seqLog, err := os.Create(filepath.Join(dir, "sequencer.log"))
	if err != nil {
		return res, err
	}
	defer seqLog.Close()
	probe, err := freePort()
	if err != nil {
		return res, err
	}
	seq := exec.CommandContext(ctx, c.sequencerBin, "sequencer", "--kubeconfig", kcs["sequencer"], "--namespace", namespace,
		"--leader-elect=false", "--metrics-bind-address", "0", "--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", probe),
		"--upgrade-image", "registry.local/upgrade:v2", "--installed-version", "v1")
	pprofURL := ""
	if c.pprof {
		port, err := freePort()
		if err != nil {
			return res, err
		}
		seq.Args = append(seq.Args, "--pprof-bind-address", fmt.Sprintf("127.0.0.1:%d", port))
		pprofURL = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", port)
	}
	seq.Stdout, seq.Stderr = seqLog, seqLog
	started := time.Now()
	if err := seq.Start(); err != nil {
		return res, fmt.Errorf("start the sequencer: %w", err)
	}
	stopSeq := func() {
		if seq.ProcessState == nil {
			_ = seq.Process.Signal(syscall.SIGTERM)
			_ = seq.Wait()
		}
	}
	defer stopSeq()
	cpuDone := make(chan struct{})
	if pprofURL != "" {
		secs := int((time.Duration(n) * c.step / time.Duration(c.concurrency)).Seconds())
		go func() {
			defer close(cpuDone)
			saveProfile(ctx, log, fmt.Sprintf("%sprofile?seconds=%d", pprofURL, secs), filepath.Join(dir, "cpu.pprof"))
		}()
	} else {
		close(cpuDone)
	}
	plan, err := waitPlan(ctx, cl, n)
	if err != nil {
		return res, err
	}
	res.toDone = time.Since(started)
	if pprofURL != "" {
		<-cpuDone
		saveProfile(ctx, log, pprofURL+"heap", filepath.Join(dir, "heap.pprof"))
	}
	if b, err := json.MarshalIndent(plan, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "plan.json"), b, 0o644)
	}
	res.cpu, res.peakRSS, err = procUsage(seq.Process.Pid)
	if err != nil {
		return res, err
	}
	stopSeq()
	stopFakes()

	ts := sequencer.NodeTimings(&plan.Status)
	if len(ts) != n {
		return res, fmt.Errorf("%d of %d nodes have their times recorded", len(ts), n)
	}
	var own []time.Duration
	first, last := time.Time{}, time.Time{}
	for name, st := range plan.Status.NodeUpgradeStatuses {
		_ = name
		if t := st.Times; t != nil && t.Cordoned != nil && t.Upgraded != nil {
			if first.IsZero() || t.Cordoned.Before(&metav1.MicroTime{Time: first}) {
				first = t.Cordoned.Time
			}
			if t.Upgraded.After(last) {
				last = t.Upgraded.Time
			}
		}
	}
	for _, t := range ts {
		own = append(own, t.Sequencer)
	}
	res.own = sequencer.Distribute(own)
	res.wall = last.Sub(first)
	res.ideal = time.Duration(n) * c.step / time.Duration(c.concurrency)
	res.requests, res.writes, res.watches, res.byVerb, err = countRequests(api.auditAt, "sequencer")
	return res, err
}

// saveProfile saves the profile at url in path, retrying while the sequencer starts; a failure
// is logged, not fatal: the profiles are for looking into, the figures do not rest on them.
func saveProfile(ctx context.Context, log *slog.Logger, url, path string) {
	for range 50 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			log.Warn("profile", "url", url, "err", err)
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err == nil && resp.StatusCode == http.StatusOK {
			err = os.WriteFile(path, b, 0o644)
		}
		if err != nil || resp.StatusCode != http.StatusOK {
			log.Warn("profile", "url", url, "status", resp.StatusCode, "err", err)
		}
		return
	}
	log.Warn("profile: the sequencer's pprof never answered", "url", url)
}

// createNodes creates the simulated nodes: for kwok, annotated as its fake nodes, which it makes
// Ready; without kwok, made Ready here.
func createNodes(ctx context.Context, cl client.Client, names []string, c config) error {
	return forEach(ctx, names, 32, func(ctx context.Context, name string) error {
		i, _ := strconv.Atoi(strings.TrimPrefix(name, "node-"))
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name, "type": "kwok"},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}}}
		if c.zones > 0 {
			n.Labels[corev1.LabelTopologyZone] = fmt.Sprintf("zone-%02d", i%c.zones)
		}
		if err := cl.Create(ctx, n); err != nil {
			return fmt.Errorf("create node %s: %w", name, err)
		}
		if c.kwokBin != "" {
			return nil
		}
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: now, LastTransitionTime: now}}
		n.Status.NodeInfo.KubeletVersion = "v1.33.0"
		n.Status.NodeInfo.BootID = "boot-" + name
		if err := cl.Status().Update(ctx, n); err != nil {
			return fmt.Errorf("make node %s Ready: %w", name, err)
		}
		return nil
	})
}

// waitReady waits for n nodes to be Ready.
func waitReady(ctx context.Context, cl client.Client, n int) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var nodes corev1.NodeList
		if err := cl.List(ctx, &nodes); err != nil {
			return err
		}
		ready := 0
		for i := range nodes.Items {
			if sequencer.IsReady(&nodes.Items[i]) {
				ready++
			}
		}
		if ready == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d nodes Ready after 3 minutes", ready, n)
		}
		time.Sleep(time.Second)
	}
}

// createPlan creates the plan's Version and the plan, at NodeUpgrading as the phases before it
// left it: the agents hold the ISO, which they serve and whose images they preloaded.
func createPlan(ctx context.Context, cl client.Client, c config) error {
	v := &v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: "v2"}, Spec: v1beta1.VersionSpec{ISOURL: "http://origin.invalid/v2.iso", ISOChecksum: checksum}}
	if err := cl.Create(ctx, v); err != nil {
		return fmt.Errorf("create version: %w", err)
	}
	p := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: planName}, Spec: v1beta1.UpgradePlanSpec{Version: "v2",
		NodeUpgradeOption: &v1beta1.NodeUpgradeOption{Concurrency: c.concurrency}}}
	if err := cl.Create(ctx, p); err != nil {
		return fmt.Errorf("create plan: %w", err)
	}
	now := metav1.Now()
	p.Status = v1beta1.UpgradePlanStatus{
		Phase:           v1beta1.PhaseNodeUpgrading,
		PreviousVersion: "v1",
		Agents:          &v1beta1.AgentInstructions{ISOURL: v.Spec.ISOURL, ISOChecksum: checksum, Hold: true},
		PhaseTransitionTimestamps: []v1beta1.PhaseTransitionTimestamp{
			{Phase: v1beta1.PhaseInitializing, PhaseTransitionTimestamp: now},
			{Phase: v1beta1.PhaseNodeUpgrading, PhaseTransitionTimestamp: now},
		},
	}
	if err := cl.Status().Update(ctx, p); err != nil {
		return fmt.Errorf("set the plan at NodeUpgrading: %w", err)
	}
	return nil
}

// watchJobs calls each with every node Job of the namespace as it changes, until ctx ends.
func watchJobs(ctx context.Context, cl client.WithWatch, each func(*batchv1.Job)) error {
	for ctx.Err() == nil {
		w, err := cl.Watch(ctx, &batchv1.JobList{}, client.InNamespace(namespace))
		if err != nil {
			return err
		}
		for ev := range w.ResultChan() {
			if j, ok := ev.Object.(*batchv1.Job); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				each(j)
			}
		}
		w.Stop()
	}
	return nil
}

// waitPlan waits for the plan to leave NodeUpgrading, every node upgraded.
func waitPlan(ctx context.Context, cl client.Client, n int) (*v1beta1.UpgradePlan, error) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the plan did not finish NodeUpgrading: %w", ctx.Err())
		case <-tick.C:
		}
		var p v1beta1.UpgradePlan
		if err := cl.Get(ctx, client.ObjectKey{Name: planName}, &p); err != nil {
			continue
		}
		switch p.Status.Phase {
		case v1beta1.PhaseNodeUpgrading:
			continue
		case v1beta1.PhaseFailed:
			return nil, fmt.Errorf("the plan failed in %s: %v", p.Status.FailedPhase, p.Status.Conditions)
		}
		upgraded := 0
		for _, s := range p.Status.NodeUpgradeStatuses {
			if s.State == v1beta1.NodeUpgraded {
				upgraded++
			}
		}
		if upgraded != n {
			return nil, fmt.Errorf("the plan left NodeUpgrading for %s with %d of %d nodes upgraded", p.Status.Phase, upgraded, n)
		}
		return &p, nil
	}
}

// procUsage reads the CPU time (user and system) and the peak resident set of process pid.
func procUsage(pid int) (time.Duration, int64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The fields after the command, which is in parentheses and may hold spaces.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	cpu := time.Duration(utime+stime) * time.Second / ticks
	status, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer status.Close()
	var hwm int64
	sc := bufio.NewScanner(status)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			hwm = kb << 10
		}
	}
	return cpu, hwm, sc.Err()
}

// countRequests counts the requests of user in the audit log: all, the writes, the watches, and
// by verb and resource.
func countRequests(path, user string) (total, writes, watches int, byVerb map[string]int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	defer f.Close()
	byVerb = map[string]int{}
	dec := json.NewDecoder(f)
	for {
		var ev struct {
			Stage string `json:"stage"`
			Verb  string `json:"verb"`
			User  struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return 0, 0, 0, nil, fmt.Errorf("read the audit log: %w", err)
		}
		if ev.User.Username != user || ev.Stage != "ResponseComplete" {
			continue
		}
		total++
		switch ev.Verb {
		case "get", "list", "watch":
			if ev.Verb == "watch" {
				watches++
			}
		default:
			writes++
		}
		r := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			r += "/" + ev.ObjectRef.Subresource
		}
		byVerb[ev.Verb+" "+r]++
	}
	return total, writes, watches, byVerb, nil
}

// printResults prints one line per result; with details, the requests by verb as well.
func printResults(out io.Writer, c config, rs []result, details bool) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "nodes\tnodes by\tconcurrency\tstep\twall\tideal\twall/ideal\tseq CPU s\tseq peak RSS MiB\tAPI requests\tper node\twrites/node\tseq time per node (from the plan's node times)\n")
	for _, r := range rs {
		by := "own fake"
		if r.kwok {
			by = "kwok"
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%.1fs\t%.1fs\t%.3f\t%.1f\t%.1f\t%d\t%.2f\t%.2f\t%s\n", r.nodes, by, c.concurrency, c.step,
			r.wall.Seconds(), r.ideal.Seconds(), r.wall.Seconds()/r.ideal.Seconds(), r.cpu.Seconds(), float64(r.peakRSS)/(1<<20),
			r.requests, float64(r.requests)/float64(r.nodes), float64(r.writes)/float64(r.nodes), r.own)
	}
	_ = w.Flush()
	if !details {
		return
	}
	for _, r := range rs {
		fmt.Fprintf(out, "\n%d nodes: sequencer start to NodeUpgraded seen %.1fs; requests by verb and resource (watches %d):\n", r.nodes, r.toDone.Seconds(), r.watches)
		keys := make([]string, 0, len(r.byVerb))
		for k := range r.byVerb {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(out, "  %-40s %7d  %.2f/node\n", k, r.byVerb[k], float64(r.byVerb[k])/float64(r.nodes))
		}
	}
}
