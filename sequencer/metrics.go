package sequencer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// Metrics exposes the UpgradePlans as the upgrade_repo_plan_ metrics, read from the cluster at
// each scrape, so that a deleted plan leaves no series behind and every replica of the sequencer
// (leader or not) tells the same. Plans are few and their nodes are counted by state, never
// listed one by one: the agents' own metrics carry each node's progress. It is safe for
// concurrent use.
type Metrics struct {
	c       client.Reader
	log     *slog.Logger
	timeout time.Duration

	info, phase, phaseStarted, condition, nodes *prometheus.Desc
	remaining, estimatePartial, estimateAssumed *prometheus.Desc
	phaseRemaining                              *prometheus.Desc
	readErrors                                  prometheus.Counter
}

var _ prometheus.Collector = (*Metrics)(nil)

// NewMetrics returns the plans' metrics read through c, and registers them on reg. A read that
// fails is logged on log and counted in upgrade_repo_plan_read_errors_total; the scrape then has
// no plan series but still succeeds.
func NewMetrics(c client.Reader, log *slog.Logger, reg prometheus.Registerer) (*Metrics, error) {
	if c == nil || log == nil || reg == nil {
		return nil, errors.New("new plan metrics: the client, the logger and the registerer are required")
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("upgrade_repo_plan_"+name, help, labels, nil)
	}
	m := &Metrics{
		c: c, log: log, timeout: 10 * time.Second,
		info:         d("info", "1 for each UpgradePlan, with the Version it upgrades to.", "plan", "version"),
		phase:        d("phase", "1 for the current phase of each UpgradePlan.", "plan", "phase"),
		phaseStarted: d("phase_started_timestamp_seconds", "When each UpgradePlan entered its current phase, in seconds since the epoch.", "plan"),
		condition:    d("condition", "1 for the status (True, False, Unknown) of each condition (Available, Progressing, Degraded) of each UpgradePlan.", "plan", "condition", "status"),
		nodes:        d("nodes", "Nodes of each UpgradePlan by their state in it.", "plan", "state"),
		remaining: d("remaining_seconds", "The time an UpgradePlan that runs is estimated to take still: its phases at the rates measured, "+
			"or as long as the cluster's earlier plans took them (sequencer.EstimateTime).", "plan"),
		estimatePartial: d("estimate_partial", "1 when some phase left of a running UpgradePlan has nothing to go on "+
			"(a cluster's first plan): remaining_seconds is then a lower bound.", "plan"),
		estimateAssumed: d("estimate_assumed", "1 when some phase left of a running UpgradePlan is estimated from an assumed rate "+
			"or node time (forecast.DefaultAssumptions), having neither a measured rate nor an earlier plan to go on.", "plan"),
		phaseRemaining: d("phase_remaining_seconds", "The time each phase left of a running UpgradePlan is estimated to take still, "+
			"labelled by what the estimate rests on: rate (measured), this plan (its finished nodes), history, assumed, "+
			"nothing to do (a phase that moves nothing, a few seconds assumed) or unknown (0).",
			"plan", "phase", "basis"),
		readErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "upgrade_repo_plan_read_errors_total",
			Help: "Scrapes whose read of the UpgradePlans failed.",
		}),
	}
	if err := reg.Register(m); err != nil {
		return nil, fmt.Errorf("register plan metrics: %w", err)
	}
	return m, nil
}

// Describe sends the descriptors of every metric Collect sends.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.info, m.phase, m.phaseStarted, m.condition, m.nodes, m.remaining, m.estimatePartial,
		m.estimateAssumed, m.phaseRemaining} {
		ch <- d
	}
	m.readErrors.Describe(ch)
}

// Collect reads the plans and sends their metrics. A scrape carries no context: the read is
// bounded by the collector's timeout instead.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	var plans v1beta1.UpgradePlanList
	if err := m.c.List(ctx, &plans); err != nil {
		m.log.Warn("read upgrade plans for metrics", "err", err)
		m.readErrors.Inc()
	}
	m.readErrors.Collect(ch)
	for i := range plans.Items {
		collectPlan(ch, m, &plans.Items[i])
	}
	m.collectEstimates(ctx, ch, plans.Items)
}

// collectEstimates sends the time estimate of each plan that runs (EstimateTime). The nodes and
// the agents' reports are read only when one does.
func (m *Metrics) collectEstimates(ctx context.Context, ch chan<- prometheus.Metric, plans []v1beta1.UpgradePlan) {
	running := false
	for i := range plans {
		running = running || !plans[i].Status.Phase.Finished()
	}
	if !running {
		return
	}
	var nodes corev1.NodeList
	var rns v1beta1.RepoNodeList
	if err := m.c.List(ctx, &nodes); err != nil {
		m.log.Warn("read nodes for the plans' time estimates", "err", err)
		m.readErrors.Inc()
		return
	}
	if err := m.c.List(ctx, &rns); err != nil {
		m.log.Warn("read repo nodes for the plans' time estimates", "err", err)
		m.readErrors.Inc()
		return
	}
	reports := map[string]*v1beta1.RepoNodeStatus{}
	for i := range rns.Items {
		reports[rns.Items[i].Name] = &rns.Items[i].Status
	}
	infos := NodeInfos(nodes.Items)
	now := time.Now()
	for i := range plans {
		est := EstimateTime(&plans[i], plans, infos, reports, now)
		if est == nil {
			continue
		}
		name := plans[i].Name
		ch <- prometheus.MustNewConstMetric(m.remaining, prometheus.GaugeValue, est.Remaining.Seconds(), name)
		ch <- prometheus.MustNewConstMetric(m.estimatePartial, prometheus.GaugeValue, one(est.Partial), name)
		ch <- prometheus.MustNewConstMetric(m.estimateAssumed, prometheus.GaugeValue, one(est.Assumed), name)
		for _, ph := range est.Phases {
			ch <- prometheus.MustNewConstMetric(m.phaseRemaining, prometheus.GaugeValue, ph.Remaining.Seconds(), name, ph.Phase, string(ph.Basis))
		}
	}
}

// collectPlan sends the metrics of one plan.
func collectPlan(ch chan<- prometheus.Metric, m *Metrics, p *v1beta1.UpgradePlan) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(m.info, 1, p.Name, p.Spec.Version)
	if p.Status.Phase != "" {
		gauge(m.phase, 1, p.Name, string(p.Status.Phase))
	}
	// The last transition into the current phase: a retried plan enters a phase again.
	for i := len(p.Status.PhaseTransitionTimestamps) - 1; i >= 0; i-- {
		if ts := p.Status.PhaseTransitionTimestamps[i]; ts.Phase == p.Status.Phase {
			gauge(m.phaseStarted, float64(ts.PhaseTransitionTimestamp.Unix()), p.Name)
			break
		}
	}
	for _, c := range p.Status.Conditions {
		gauge(m.condition, 1, p.Name, c.Type, string(c.Status))
	}
	byState := map[v1beta1.NodeState]int{}
	for _, n := range p.Status.NodeUpgradeStatuses {
		state := n.State
		if state == "" {
			state = "Unknown"
		}
		byState[state]++
	}
	for state, n := range byState {
		gauge(m.nodes, float64(n), p.Name, string(state))
	}
}

// one is 1 for true, 0 for false.
func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
