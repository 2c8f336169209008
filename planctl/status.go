package planctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/internal/printable"
	"github.com/upgrade-repo/upgrade-repo/planview"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// StatusOptions say which plan Status shows, how, and whether it follows it.
type StatusOptions struct {
	// Plan is the plan's name; empty: the one planview.Pick picks.
	Plan string
	// Output is text, json or yaml.
	Output string
	// Namespace is the sequencer's, where the installed version is recorded.
	Namespace string
	// Watch follows the plan to its end, and fails when it failed.
	Watch bool
	// Terminal redraws the status in place with progress bars; else a watch writes one line
	// per change.
	Terminal bool
}

// Status writes to w the status of the plan o names (or the one planview.Pick picks) and, with
// o.Watch, follows it to its end: with -o json or yaml one document per change; as text the
// whole table once, then one line per change, or the table redrawn in place on a terminal. What
// it cannot read (the nodes, the installed version) is said once on log. now is the clock of the
// ages shown.
func Status(ctx context.Context, w io.Writer, log *slog.Logger, c client.WithWatch, o StatusOptions, now func() time.Time) error {
	if o.Plan == "" {
		name, err := PickPlan(ctx, c)
		if err != nil {
			return err
		}
		o.Plan = name
	}
	sp := &statusPrinter{w: w, log: log, c: c, o: o, now: now}
	show := func(plan *v1beta1.UpgradePlan) error { return sp.show(ctx, plan) }
	var plan v1beta1.UpgradePlan
	for {
		if err := c.Get(ctx, client.ObjectKey{Name: o.Plan}, &plan); err != nil {
			return fmt.Errorf("get upgradeplan %s: %w", o.Plan, err)
		}
		if err := show(&plan); err != nil {
			return err
		}
		if !o.Watch || plan.Status.Phase.Finished() {
			break
		}
		start := time.Now()
		if err := followPlan(ctx, c, &plan, show); err != nil {
			return err
		}
		// A watch the server ends at once is not opened again at once.
		if time.Since(start) < time.Second {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
	if o.Watch && plan.Status.Phase == v1beta1.PhaseFailed {
		why := "no reason given"
		if d := meta.FindStatusCondition(plan.Status.Conditions, v1beta1.ConditionDegraded); d != nil {
			why = d.Reason + ": " + d.Message
		}
		return fmt.Errorf("upgradeplan %s failed in %s: %s", plan.Name, plan.Status.FailedPhase, why)
	}
	return nil
}

// PickPlan returns the name of the plan `upgrade status` shows when none is named
// (planview.Pick).
func PickPlan(ctx context.Context, c client.Reader) (string, error) {
	var list v1beta1.UpgradePlanList
	if err := c.List(ctx, &list); err != nil {
		return "", fmt.Errorf("list upgradeplans: %w", err)
	}
	p := planview.Pick(list.Items)
	if p == nil {
		return "", errors.New("no UpgradePlan in the cluster")
	}
	return p.Name, nil
}

// statusPrinter prints one plan's status each time it changes: with -o json or yaml one document
// per change; as text the whole table once, then, while it is watched, one line per change, or
// the table redrawn in place on a terminal.
type statusPrinter struct {
	w   io.Writer
	log *slog.Logger
	c   client.Reader
	o   StatusOptions
	now func() time.Time

	shown   *planview.Plan // the view printed last; nil before the first
	shownRV string         // the plan's resource version shown was printed for
	live    planview.Live  // the lines of a watch, and the table redrawn on a terminal
	// nodesWarned and installedWarned: the nodes or the installed version could not be read,
	// and that was said (once).
	nodesWarned, installedWarned bool
}

// show prints plan's status unless it shows nothing new.
func (sp *statusPrinter) show(ctx context.Context, plan *v1beta1.UpgradePlan) error {
	if plan.ResourceVersion == sp.shownRV && sp.shown != nil {
		return nil
	}
	v := sp.view(ctx, plan)
	first := sp.shown == nil
	switch sp.o.Output {
	case "json":
		sp.shown, sp.shownRV = v, plan.ResourceVersion
		return planview.WriteJSON(sp.w, v)
	case "yaml":
		// The JSON object as YAML, one document per change, as kubectl get -o yaml -w.
		sp.shown, sp.shownRV = v, plan.ResourceVersion
		return planview.EncodeYAML(sp.w, v)
	}
	if !first && planview.SameText(sp.shown, v) {
		return nil
	}
	sp.shown, sp.shownRV = v, plan.ResourceVersion
	switch {
	case sp.o.Watch && sp.o.Terminal:
		return sp.live.Redraw(sp.w, v)
	case first:
		return sp.writeTable(plan, v)
	}
	return sp.writeLines(plan.Name, v)
}

// view is plan's view: its nodes, the command that releases a held plan, the time estimate,
// the installed version.
func (sp *statusPrinter) view(ctx context.Context, plan *v1beta1.UpgradePlan) *planview.Plan {
	v := planview.New(plan, upgradeNodes(ctx, sp.log, sp.c, plan, &sp.nodesWarned), sp.now())
	if v.Held != nil && len(PausedByHand(plan)) > 0 {
		v.Held.Command += " --all"
	}
	v.Estimate = planEstimate(ctx, sp.c, plan, sp.now())
	if in, err := sequencer.ReadInstalled(ctx, sp.c, sp.o.Namespace); err == nil {
		v.Installed = in.Version
	} else if !sp.installedWarned {
		sp.log.Warn("cannot read the installed version", "err", err)
		sp.installedWarned = true
	}
	return v
}

// writeTable writes the whole table once, with the soak's line; a watch goes on with one line
// per change.
func (sp *statusPrinter) writeTable(plan *v1beta1.UpgradePlan, v *planview.Plan) error {
	sp.live.Lines(v)
	if err := planview.WriteText(sp.w, v); err != nil {
		return err
	}
	if l := SoakLine(plan, sp.now()); l != "" {
		if _, err := fmt.Fprintln(sp.w, printable.String(l)); err != nil {
			return fmt.Errorf("write plan %s: %w", plan.Name, err)
		}
	}
	return nil
}

// writeLines writes a line for each change since the view printed before.
func (sp *statusPrinter) writeLines(plan string, v *planview.Plan) error {
	for _, l := range sp.live.Lines(v) {
		if _, err := fmt.Fprintln(sp.w, l); err != nil {
			return fmt.Errorf("write plan %s: %w", plan, err)
		}
	}
	return nil
}

// followPlan watches plan from its resource version, updating it and calling show at each
// change, until it is finished or the watch ends (the API server closes watches after a while,
// and answers 410 Gone when the version is too old): the caller gets the plan again and calls
// followPlan anew.
func followPlan(ctx context.Context, c client.WithWatch, plan *v1beta1.UpgradePlan, show func(*v1beta1.UpgradePlan) error) error {
	w, err := c.Watch(ctx, &v1beta1.UpgradePlanList{}, client.MatchingFields{"metadata.name": plan.Name},
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: plan.ResourceVersion}})
	if err != nil {
		return fmt.Errorf("watch upgradeplan %s: %w", plan.Name, err)
	}
	defer w.Stop()
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return nil
		}
		switch ev.Type {
		case watch.Error:
			err := apierrors.FromObject(ev.Object)
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return nil
			}
			// The API server going away under the watch: the caller reads the plan again,
			// waiting for it.
			if _, ok := Transient(err); ok {
				return nil
			}
			return fmt.Errorf("watch upgradeplan %s: %w", plan.Name, err)
		case watch.Deleted:
			return fmt.Errorf("upgradeplan %s was deleted", plan.Name)
		case watch.Added, watch.Modified:
			p, isPlan := ev.Object.(*v1beta1.UpgradePlan)
			if !isPlan || p.Name != plan.Name {
				continue
			}
			*plan = *p
			if err := show(plan); err != nil {
				return err
			}
			if plan.Status.Phase.Finished() {
				return nil
			}
		}
	}
}

// upgradeNodes lists the nodes plan works on in the order the sequencer upgrades them
// (sequencer.PlanNodes, sequencer.NodeOrder), each with its kubelet's version; the nodes it
// skips follow from its status, by name. Without the nodes (no right to list them) the rows
// follow the plan's status by name; that is said once.
func upgradeNodes(ctx context.Context, log *slog.Logger, c client.Reader, plan *v1beta1.UpgradePlan, warned *bool) []planview.Node {
	var list corev1.NodeList
	if err := c.List(ctx, &list); err != nil {
		if !*warned {
			log.Warn("cannot list the nodes: rows by name, nodes the plan has not reached not shown", "err", err)
			*warned = true
		}
		return nil
	}
	kubelet := make(map[string]string, len(list.Items))
	for _, n := range list.Items {
		kubelet[n.Name] = n.Status.NodeInfo.KubeletVersion
	}
	// The agents' reports give each node's download; without them there is none to show.
	iso := map[string]v1beta1.RepoNodeISO{}
	var rns v1beta1.RepoNodeList
	if err := c.List(ctx, &rns); err == nil {
		for _, rn := range rns.Items {
			iso[rn.Name] = rn.Status.ISO
		}
	}
	cp, others := sequencer.NodeOrder(sequencer.PlanNodes(plan, sequencer.NodeInfos(list.Items)))
	out := make([]planview.Node, 0, len(list.Items))
	for _, name := range append(cp, others...) {
		out = append(out, planview.Node{Name: name, KubeletVersion: kubelet[name],
			ISOBytesDone: iso[name].BytesDone, ISOBytesTotal: iso[name].BytesTotal})
	}
	return out
}

// planEstimate is when plan is expected to end (sequencer.EstimateTime), from the cluster's
// earlier plans, its nodes and the agents' reports; nil for a plan that finished or when they
// cannot be read.
func planEstimate(ctx context.Context, c client.Reader, plan *v1beta1.UpgradePlan, now time.Time) *planview.Estimate {
	if plan.Status.Phase.Finished() {
		return nil
	}
	var plans v1beta1.UpgradePlanList
	var nodes corev1.NodeList
	var rns v1beta1.RepoNodeList
	if c.List(ctx, &plans) != nil || c.List(ctx, &nodes) != nil {
		return nil
	}
	reports := map[string]*v1beta1.RepoNodeStatus{}
	if c.List(ctx, &rns) == nil {
		for i := range rns.Items {
			reports[rns.Items[i].Name] = &rns.Items[i].Status
		}
	}
	est := sequencer.EstimateTime(plan, plans.Items, sequencer.NodeInfos(nodes.Items), reports, now)
	if est == nil {
		return nil
	}
	secs := func(d time.Duration) int64 { return int64(d.Round(time.Second) / time.Second) }
	e := &planview.Estimate{RemainingSeconds: secs(est.Remaining), EndTime: now.Add(est.Remaining).Round(time.Second),
		First: est.First, Partial: est.Partial, Assumed: est.Assumed, Phases: []planview.PhaseEstimate{}, Nodes: []planview.NodeEstimate{}}
	for _, ph := range est.Phases {
		e.Phases = append(e.Phases, planview.PhaseEstimate{Phase: ph.Phase, RemainingSeconds: secs(ph.Remaining), Basis: string(ph.Basis),
			Samples: ph.Samples, BytesLeft: ph.BytesLeft, BytesPerSecond: int64(ph.BytesPerSecond), NodeSeconds: secs(ph.NodeStep),
			Assumption: ph.Assumption})
	}
	for _, n := range est.Nodes {
		e.Nodes = append(e.Nodes, planview.NodeEstimate{Node: n.Node, RemainingSeconds: secs(n.Remaining)})
	}
	return e
}

// SoakLine says, for a Succeeded plan, until when a rollback is possible, or how its soak ended;
// "" when it has none.
func SoakLine(p *v1beta1.UpgradePlan, now time.Time) string {
	s := p.Status.Soak
	switch {
	case p.Status.Phase != v1beta1.PhaseSucceeded || s == nil:
		return ""
	case s.Ended != nil:
		return fmt.Sprintf("Rollback: no longer possible: %s", s.Message)
	}
	if until, ok := sequencer.RollbackUntil(p, now); ok {
		return fmt.Sprintf("Rollback: possible to %s until %s (in %s): upgrade-repo upgrade rollback %s; upgrade-repo upgrade finalize %s ends it now",
			s.PreviousVersion, until.UTC().Format(time.RFC3339), until.Sub(now).Round(time.Minute), p.Name, p.Name)
	}
	return fmt.Sprintf("Rollback: the soak ended at %s; the sequencer cleans release %s up", s.Until.UTC().Format(time.RFC3339), s.PreviousVersion)
}
