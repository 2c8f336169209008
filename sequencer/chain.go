package sequencer

import (
	"context"
	"maps"
	"slices"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// Chaining decisions in NodeUpgrading.
//
// Left to watch events alone, each node's transitions cost a round trip each: the cordon, then the
// Node's watch event before the decision that creates its Job; the uncordon, then the Node's event
// before the decision that finds it whole and starts the next node. At 1,000 nodes a round trip
// is most of a second (a reconcile lists and decides over every node). A cordon or uncordon the
// API server accepted, and a Job it created, have an effect known at once, so the Reconciler
// decides again with that effect in the observation and applies what the new decision adds,
// within one reconcile. Everything else in the observation is what the first decision saw.

// maxChained bounds the decisions one reconcile makes after its first.
const maxChained = 4

// chainable reports whether the effect of an action of kind k is known once it is applied, so
// that a decision may follow it in the same reconcile.
func chainable(k ActionKind) bool {
	return k == ActionCordon || k == ActionUncordon || k == ActionCreateNodeJob
}

// actionKey identifies an action among those one reconcile applied.
type actionKey struct {
	kind ActionKind
	node string
	pod  string
}

func keyOf(a Action) actionKey { return actionKey{a.Kind, a.Node, a.Pod} }

// chain decides again after d's actions were applied, with their effect in the observation, and
// applies the node actions the new decision adds, while each decision stays in NodeUpgrading and
// asks only for chainable actions; it returns the last decision whose actions were all applied.
// A failure to apply ends the chain at the decision before it: its actions are applied, and the
// next reconcile asks again for what failed.
func (r *Reconciler) chain(ctx context.Context, plan *v1beta1.UpgradePlan, o Observation, d Decision) Decision {
	if plan.Status.Phase != v1beta1.PhaseNodeUpgrading || d.Status.Phase != v1beta1.PhaseNodeUpgrading {
		return d
	}
	applied := map[actionKey]bool{}
	for _, a := range d.Actions {
		applied[keyOf(a)] = true
	}
	for range maxChained {
		next, changed := withEffects(o, d)
		if !changed {
			return d
		}
		if err := r.observeEntered(ctx, &o.Plan.Status, &d.Status, &next); err != nil {
			r.log.Warn("observe the nodes a decision moved: left to the next reconcile", "plan", plan.Name, "err", err)
			return d
		}
		p := *o.Plan
		p.Status = d.Status
		next.Plan = &p
		d2 := Decide(r.cfg, next)
		if d2.Status.Phase != v1beta1.PhaseNodeUpgrading {
			return d
		}
		var fresh []Action
		for _, a := range d2.Actions {
			if applied[keyOf(a)] {
				continue
			}
			if a.Node == "" || !chainable(a.Kind) {
				return d
			}
			fresh = append(fresh, a)
		}
		if len(fresh) > 0 {
			if _, failed, err := r.applyAll(ctx, plan, next, fresh); err != nil {
				r.log.Warn("apply a chained action: left to the next reconcile", "plan", plan.Name, "action", failed.Kind, "node", failed.Node, "err", err)
				return d
			}
		}
		for _, a := range fresh {
			applied[keyOf(a)] = true
		}
		d2.Actions = append(slices.Clone(d.Actions), fresh...)
		d2.Events = mergeEvents(d.Events, d2.Events)
		d, o = d2, next
		if len(fresh) == 0 {
			return d
		}
	}
	return d
}

// observeEntered reads, for the nodes that entered a state between the statuses before and
// after, what an observation reads only for nodes in that state: the pods a drain must evict
// from a node Cordoned, and the control-plane pods not Ready on a node Rejoining (for a
// control-plane node the observation holds them already). o's maps are replaced, not changed.
func (r *Reconciler) observeEntered(ctx context.Context, before, after *v1beta1.UpgradePlanStatus, o *Observation) error {
	evict, notReady := o.PodsToEvict, o.ControlPlaneNotReady
	for name, ns := range after.NodeUpgradeStatuses {
		if before.NodeUpgradeStatuses[name].State == ns.State {
			continue
		}
		switch ns.State {
		case v1beta1.NodeCordoned:
			pods, err := r.evictable(ctx, name)
			if err != nil {
				return err
			}
			evict = maps.Clone(evict)
			if evict == nil {
				evict = map[string]int{}
			}
			evict[name] = len(pods)
		case v1beta1.NodeRejoining:
			if _, ok := notReady[name]; ok {
				continue
			}
			pods, err := r.controlPlanePods(ctx, name)
			if err != nil {
				return err
			}
			var names []string
			for _, cp := range pods {
				if !cp.ready {
					names = append(names, cp.name)
				}
			}
			if len(names) > 0 {
				notReady = maps.Clone(notReady)
				if notReady == nil {
					notReady = map[string][]string{}
				}
				notReady[name] = names
			}
		}
	}
	o.PodsToEvict, o.ControlPlaneNotReady = evict, notReady
	return nil
}

// withEffects is o with the known effects of d's node actions: the nodes cordoned are
// unschedulable, those uncordoned schedulable, and the Jobs created exist. changed is false when
// o already showed them all.
func withEffects(o Observation, d Decision) (Observation, bool) {
	changed := false
	var nodes []NodeInfo
	var jobs map[string]JobState
	for _, a := range d.Actions {
		switch a.Kind {
		case ActionCordon, ActionUncordon:
			want := a.Kind == ActionCordon
			i := slices.IndexFunc(o.Nodes, func(n NodeInfo) bool { return n.Name == a.Node })
			if i < 0 || o.Nodes[i].Unschedulable == want {
				continue
			}
			if nodes == nil {
				nodes = slices.Clone(o.Nodes)
			}
			nodes[i].Unschedulable, changed = want, true
			o.Nodes = nodes
		case ActionCreateNodeJob:
			if o.NodeJobs[a.Node].Exists {
				continue
			}
			if jobs == nil {
				jobs = make(map[string]JobState, len(o.NodeJobs)+1)
				for k, v := range o.NodeJobs {
					jobs[k] = v
				}
			}
			jobs[a.Node], changed = JobState{Exists: true}, true
			o.NodeJobs = jobs
		}
	}
	return o, changed
}

// mergeEvents is a followed by the events of b that a does not hold already.
func mergeEvents(a, b []Event) []Event {
	out := slices.Clone(a)
	for _, e := range b {
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out
}
