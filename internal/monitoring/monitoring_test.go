package monitoring_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	"github.com/upgrade-repo/upgrade-repo/agent"
	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
	"github.com/upgrade-repo/upgrade-repo/peer"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
	"github.com/upgrade-repo/upgrade-repo/peer/memberlist"
	"github.com/upgrade-repo/upgrade-repo/release/pack"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// prometheusOwn are the series Prometheus writes itself, for every target it scrapes.
var prometheusOwn = map[string]bool{"up": true}

// root is the module's root, two levels up from this package.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	return dir
}

// render renders the chart with the dashboard and the rules enabled, with the helm that `make
// verify` uses (hack/verify-chart.sh installs it into bin/ at its pinned version on first use),
// and returns its documents.
func render(t *testing.T) []map[string]any {
	t.Helper()
	dir := root(t)
	out, err := exec.Command("bash", filepath.Join(dir, "hack", "verify-chart.sh"), "tools").Output()
	require.NoError(t, err, "find helm through hack/verify-chart.sh tools")
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	helm := lines[len(lines)-1]
	var stderr bytes.Buffer
	cmd := exec.Command(helm, "template", "t", filepath.Join(dir, "charts", "upgrade-repo"), "--namespace", "ns",
		"--set", "release.isoURL=https://releases.example.invalid/release.iso",
		"--set", "release.isoChecksum=sha512:"+strings.Repeat("0", 128),
		"--set", "gossip.key=0123456789abcdef0123456789abcdef",
		"--set", "serviceMonitor.enabled=true",
		"--set", "monitoring.dashboard.enabled=true", "--set", "monitoring.rules.enabled=true",
		"--api-versions", "monitoring.coreos.com/v1")
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	require.NoError(t, err, "helm template: %s", stderr.String())
	var docs []map[string]any
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(out), -1) {
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(d), &obj))
		if obj != nil {
			docs = append(docs, obj)
		}
	}
	return docs
}

// find returns the one document of kind.
func find(t *testing.T, docs []map[string]any, kind string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	var found []map[string]any
	for _, d := range docs {
		if d["kind"] == kind && (match == nil || match(d)) {
			found = append(found, d)
		}
	}
	require.Len(t, found, 1, "rendered %s", kind)
	return found[0]
}

// metricNames returns the metric names expr selects, or the error of parsing it.
func metricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel {
				name = m.Value
			}
		}
		if name == "" {
			err = fmt.Errorf("a selector without a metric name: %s", vs)
		}
		names = append(names, name)
		return nil
	})
	return names, err
}

// grafanaVariables are the dashboard's variables as a query meets them, and what stands for them
// when the query is parsed.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "6h",
	"${namespace}", "ns", "$namespace", "ns", "${plan}", ".*", "$plan", ".*")

// labelValues matches a variable's query label_values(SELECTOR, LABEL).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// exposed returns the names of the metric families an agent and a sequencer expose: an agent
// serving a release, scraped at /metrics after it answered a request, and the plans' metrics of a
// sequencer over a cluster with a plan under way. Histograms count under their base name too.
func exposed(t *testing.T) map[string]bool {
	t.Helper()
	isotest.RequireXorriso(t)
	names := map[string]bool{}
	for _, n := range scrapeAgent(t) {
		names[n] = true
	}
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, v1beta1.AddToScheme(s))
	plan := &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1beta1.UpgradePlanSpec{Version: "v1.6.0"},
		Status: v1beta1.UpgradePlanStatus{
			Phase:                     v1beta1.PhaseImagePreloading,
			PhaseTransitionTimestamps: []v1beta1.PhaseTransitionTimestamp{{Phase: v1beta1.PhaseImagePreloading, PhaseTransitionTimestamp: metav1.Now()}},
			Conditions:                []metav1.Condition{{Type: v1beta1.ConditionDegraded, Status: metav1.ConditionFalse}},
			NodeUpgradeStatuses:       map[string]v1beta1.NodeUpgradeStatus{"n1": {State: v1beta1.NodeImagePreloading}},
		},
	}
	reg := prometheus.NewPedanticRegistry()
	_, err := sequencer.NewMetrics(fake.NewClientBuilder().WithScheme(s).WithObjects(plan).Build(), slog.New(slog.DiscardHandler), reg)
	require.NoError(t, err)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	return names
}

// scrapeAgent runs an agent over a small release ISO, asks its repo for the release, and returns
// the metric families its /metrics serves.
func scrapeAgent(t *testing.T) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "release.iso")
	_, err := pack.Build(t.Context(), pack.Demo("v1.5.2", 1, 4096, 1<<20), path)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	dir := inventory.NewDirectory("n1")
	g, err := memberlist.New(log, "n1", ln.Addr().String(), dir, memberlist.WithBind("127.0.0.1", 0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Shutdown() })
	// The registry as the agent command builds it: the peers' metrics, then the agent's own.
	reg := prometheus.NewRegistry()
	pm, err := peer.NewMetrics(reg)
	require.NoError(t, err)
	a, err := agent.New(agent.Config{Node: "n1", ISOFile: path, Grace: time.Second},
		agent.Deps{Log: log, Listener: ln, Directory: dir, Gossip: g, Registry: reg, PeerMetrics: pm})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- a.Run(t.Context()) }()
	t.Cleanup(func() { require.NoError(t, <-done) })
	deadline := time.After(30 * time.Second)
	for !a.Board().Snapshot().Ready {
		select {
		case err := <-done:
			t.Fatalf("the agent stopped: %v", err)
		case <-deadline:
			t.Fatal("the agent never turned ready")
		case <-time.After(20 * time.Millisecond):
		}
	}
	base := "http://" + ln.Addr().String()
	resp, err := http.Get(base + "/v1/release")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp, err = http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	tp := expfmt.NewTextParser(model.UTF8Validation)
	families, err := tp.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	var names []string
	for name := range families {
		names = append(names, name)
	}
	return names
}

// known reports whether name is exposed, as itself or as a series of a histogram.
func known(exposed map[string]bool, name string) bool {
	if exposed[name] || prometheusOwn[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && exposed[base] {
			return true
		}
	}
	return false
}

// The chart's dashboard and rules render, parse, and name only metrics the code exposes.
func TestDashboardAndRulesNameExposedMetrics(t *testing.T) {
	docs := render(t)
	exposed := exposed(t)

	// The rules: Prometheus' own rule parser, then each expression with its PromQL parser.
	rule := find(t, docs, "PrometheusRule", nil)
	spec, err := yaml.Marshal(rule["spec"])
	require.NoError(t, err)
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	require.Empty(t, errs, "the rules do not parse:\n%s", spec)
	var alerts []string
	var unknown []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			names, err := metricNames(r.Expr)
			require.NoError(t, err, "alert %s: %s", r.Alert, r.Expr)
			for _, n := range names {
				if !known(exposed, n) {
					unknown = append(unknown, fmt.Sprintf("alert %s: %s", r.Alert, n))
				}
			}
		}
	}
	sort.Strings(alerts)
	require.Equal(t, []string{"UpgradePlanDegraded", "UpgradePlanFailed", "UpgradeRepoAgentNotReporting", "UpgradeRepoChunkCorrupt",
		"UpgradeRepoISOFailed", "UpgradeRepoNodeStalled", "UpgradeRepoOriginFailing", "UpgradeRepoSequencerNotReporting"}, alerts)

	// The dashboard: shipped with the sidecar's label, its panels' and variables' queries parsed.
	cm := find(t, docs, "ConfigMap", func(d map[string]any) bool {
		labels, _ := d["metadata"].(map[string]any)["labels"].(map[string]any)
		return labels["grafana_dashboard"] == "1"
	})
	data, _ := cm["data"].(map[string]any)["upgrade-repo.json"].(string)
	var dash dashboard
	require.NoError(t, json.Unmarshal([]byte(data), &dash), "the dashboard is not JSON")
	require.NotEmpty(t, dash.Panels)
	check := func(where, query string) {
		names, err := metricNames(grafanaVariables.Replace(query))
		require.NoError(t, err, "%s: %s", where, query)
		require.NotEmpty(t, names, "%s names no metric: %s", where, query)
		for _, n := range names {
			if !known(exposed, n) {
				unknown = append(unknown, where+": "+n)
			}
		}
	}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, q := range p.Targets {
			check(fmt.Sprintf("panel %q", p.Title), q.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		require.NotNil(t, m, "variable %s: want label_values(SELECTOR, LABEL), got %q", v.Name, v.Definition)
		check("variable "+v.Name, m[1])
	}
	require.Empty(t, unknown, "metrics that neither the agent nor the sequencer exposes")
}

// dashboard is the part of a Grafana dashboard's JSON model the checks read.
type dashboard struct {
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// The check itself fails on a name the code does not expose: a panel naming a metric that does
// not exist is caught.
func TestUnknownMetricsAreCaught(t *testing.T) {
	t.Parallel()
	exposed := map[string]bool{"upgrade_repo_http_request_duration_seconds": true, "upgrade_repo_agent_ready": true}
	tests := []struct {
		name  string
		expr  string
		known bool
	}{
		{name: "exposed", expr: `sum(upgrade_repo_agent_ready{namespace="$namespace"})`, known: true},
		{name: "a histogram's buckets", expr: `histogram_quantile(0.9, rate(upgrade_repo_http_request_duration_seconds_bucket[$__rate_interval]))`, known: true},
		{name: "Prometheus' own", expr: `up == 0`, known: true},
		{name: "misspelt", expr: `sum(upgrade_repo_agent_redy{namespace="$namespace"})`},
		{name: "inside a function", expr: `rate(upgrade_repo_peer_fetched_total[$__rate_interval])`},
		{name: "by __name__", expr: `{__name__="upgrade_repo_nothing"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			names, err := metricNames(grafanaVariables.Replace(tc.expr))
			require.NoError(t, err)
			require.NotEmpty(t, names)
			all := true
			for _, n := range names {
				all = all && known(exposed, n)
			}
			require.Equal(t, tc.known, all)
		})
	}
}

// A query that PromQL cannot parse is an error, not an empty list of names.
func TestBadQueriesFail(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{`sum(upgrade_repo_agent_ready`, `rate(upgrade_repo_agent_ready[5x])`, `{namespace="ns"}`} {
		_, err := metricNames(expr)
		require.Error(t, err, expr)
	}
}
