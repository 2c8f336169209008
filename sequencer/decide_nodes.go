package sequencer

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// nodeRule is what a node in one state allows during NodeUpgrading.
type nodeRule struct {
	// inFlight marks the states of a node being upgraded: it holds a slot of its group's
	// concurrency and is never started again.
	inFlight bool
	// done marks an upgraded node: it holds no slot and is never started again.
	done bool
	// advance moves a node in the state along; nil when the state has nothing to do.
	advance func(d *decider, r *nodeRound, n NodeInfo)
}

// nodeRules is the table of NodeUpgrading: what each state allows. A node in a state the table
// does not name (pending, paused, none yet, a retried failure) may be started when its group has
// a free slot.
var nodeRules = map[v1beta1.NodeState]nodeRule{
	v1beta1.NodeCordoned:  {inFlight: true, advance: (*decider).cordoned},
	v1beta1.NodeUpgrading: {inFlight: true, advance: (*decider).upgrading},
	// The stages the node's step reports while its Job runs (stepReport) are Upgrading.
	v1beta1.NodeKubernetesUpgrading: {inFlight: true, advance: (*decider).upgrading},
	v1beta1.NodeKubernetesUpgraded:  {inFlight: true, advance: (*decider).upgrading},
	v1beta1.NodeOSUpgrading:         {inFlight: true, advance: (*decider).upgrading},
	v1beta1.NodeOSUpgraded:          {inFlight: true, advance: (*decider).upgrading},
	v1beta1.NodeRejoining:           {inFlight: true, advance: (*decider).rejoining},
	v1beta1.NodeUpgraded:            {done: true, advance: (*decider).upgraded},
}

// nodeRound is what one pass of nodeUpgrading gathers over the nodes.
type nodeRound struct {
	// working names the nodes in flight, in upgrade order.
	working []string
	// stuck says, for the nodes whose Job's pod cannot make progress, why.
	stuck []string
	// drainBlocked says, for the nodes being drained, which evictions a PodDisruptionBudget
	// refused.
	drainBlocked []string
	// failed is set once a node's step failed, and the plan with it.
	failed bool
	// info is the observed nodes by name.
	info map[string]NodeInfo
	// gated names the node waiting for the cluster (gate) before it may start.
	gated []string
	// gateWaits is what the cluster lacks before the next node may start, once gateKnown.
	gateWaits []string
	gateKnown bool
}

// rule returns what node n's current state allows.
func (d *decider) rule(n string) nodeRule { return nodeRules[d.st.NodeUpgradeStatuses[n].State] }

// act asks for action k on node n.
func (d *decider) act(k ActionKind, n string) {
	d.out.Actions = append(d.out.Actions, Action{Kind: k, Node: n})
}

// cordoned cordons a node, drains it, then creates its Job.
func (d *decider) cordoned(r *nodeRound, n NodeInfo) {
	r.working = append(r.working, n.Name)
	switch {
	case !n.Unschedulable:
		d.act(ActionCordon, n.Name)
	case d.o.PodsToEvict[n.Name] > 0:
		d.act(ActionDrain, n.Name)
		d.setNode(n.Name, func(s *v1beta1.NodeUpgradeStatus) {
			s.Reason, s.Message = "Draining", fmt.Sprintf("%d pods to evict", d.o.PodsToEvict[n.Name])
			d.stamp(s, func(t *v1beta1.NodeTimes) **metav1.MicroTime { return &t.DrainStarted })
		})
		if pods := d.o.DrainBlocked[n.Name]; len(pods) > 0 {
			r.drainBlocked = append(r.drainBlocked, fmt.Sprintf("draining node %s: a PodDisruptionBudget blocks the eviction of %s", n.Name, strings.Join(pods, ", ")))
		}
	default:
		if !d.o.NodeJobs[n.Name].Exists {
			d.act(ActionCreateNodeJob, n.Name)
		}
		d.event("NodeDrained", "node %s cordoned and drained; its node Job starts", n.Name)
		d.setNode(n.Name, func(s *v1beta1.NodeUpgradeStatus) {
			s.State, s.Reason, s.Message = v1beta1.NodeUpgrading, "", "the node Job runs"
			d.stamp(s, func(t *v1beta1.NodeTimes) **metav1.MicroTime { return &t.JobCreated })
		})
	}
}

// upgrading follows a node's Job: a failed Job fails the plan, a finished one uncordons the node
// and lets it rejoin.
func (d *decider) upgrading(r *nodeRound, n NodeInfo) {
	job := d.o.NodeJobs[n.Name]
	switch {
	case !job.Exists:
		d.act(ActionCreateNodeJob, n.Name)
		r.working = append(r.working, n.Name)
	case job.Failed:
		d.setNode(n.Name, func(s *v1beta1.NodeUpgradeStatus) {
			s.State, s.Reason, s.Message = v1beta1.NodeUpgradeFailed, "NodeJobFailed", job.Message
		})
		d.fail("NodeUpgradeFailed", fmt.Sprintf("node %s: %s", n.Name, job.Message))
		r.failed = true
	case job.Succeeded:
		// The step is done (across a reboot, if it rebooted the node): let the node take pods
		// again, and wait for it to be whole before the next one starts.
		d.act(ActionUncordon, n.Name)
		d.event("NodeStepped", "node %s: the node step succeeded; uncordoned, waiting for it to rejoin", n.Name)
		d.setNode(n.Name, func(s *v1beta1.NodeUpgradeStatus) {
			s.State, s.Reason, s.Message = v1beta1.NodeRejoining, "", "the node step succeeded"
			d.stamp(s, func(t *v1beta1.NodeTimes) **metav1.MicroTime { return &t.StepSeen })
			if s.Times.StepStarted == nil && !job.Started.IsZero() {
				s.Times.StepStarted = ptrMicro(job.Started)
			}
			if s.Times.StepCompleted == nil && !job.Completed.IsZero() {
				s.Times.StepCompleted = ptrMicro(job.Completed)
			}
		})
		r.working = append(r.working, n.Name)
	case job.Stuck != "":
		r.stuck = append(r.stuck, n.Name+": "+job.Stuck)
		r.working = append(r.working, n.Name)
	case len(job.Orphaned) > 0:
		for _, p := range job.Orphaned {
			d.out.Actions = append(d.out.Actions, Action{Kind: ActionDeletePod, Node: n.Name, Pod: p})
		}
		d.setNode(n.Name, func(s *v1beta1.NodeUpgradeStatus) {
			s.Reason, s.Message = "ReplacingPod", "the reboot left pod "+strings.Join(job.Orphaned, ", ")+" Pending for good: deleted, the Job runs a new one"
		})
		d.out.Events = append(d.out.Events, Event{Warning: true, Reason: "ReplacingPod",
			Message: fmt.Sprintf("node %s: the reboot left pod %s of the node Job Pending for good; deleted so that the Job runs a new one", n.Name, strings.Join(job.Orphaned, ", "))})
		r.working = append(r.working, n.Name)
	default:
		// The node shows the stage its step last reported, if any, and keeps it until the
		// next report or the end of the Job.
		state, msg := d.st.NodeUpgradeStatuses[n.Name].State, "the node Job runs"
		if st := d.stepReport(n.Name, job); st != nil {
			state, msg = v1beta1.NodeState(st.Stage), st.Message
			if msg == "" {
				msg = "the node step reports " + string(st.Stage)
			}
		}
		// A node step may reboot its node: say so while the node is away, so that a stall
		// names it.
		reason := ""
		if !n.Ready {
			reason, msg = "WaitingForNode", msg+"; the node is not Ready (rebooting?)"
		}
		d.setNode(n.Name, func(s *v1beta1.NodeUpgradeStatus) { s.State, s.Reason, s.Message = state, reason, msg })
		r.working = append(r.working, n.Name)
	}
}

// stepStages are the stages a node step may report, as node states.
var stepStages = []v1beta1.StepStage{
	v1beta1.StageKubernetesUpgrading, v1beta1.StageKubernetesUpgraded, v1beta1.StageOSUpgrading, v1beta1.StageOSUpgraded,
}

// stepReport returns what node's upgrade step reported through its agent when the report applies
// to the node's running Job: it names this plan, a known stage, and was made once the Job had
// started (a report of an earlier attempt or plan does not apply). nil otherwise.
func (d *decider) stepReport(node string, job JobState) *v1beta1.RepoNodeStep {
	rn := d.o.RepoNodes[node]
	if rn == nil || rn.Step == nil || job.Started.IsZero() {
		return nil
	}
	st := rn.Step
	if st.Plan != d.o.Plan.Name || !slices.Contains(stepStages, st.Stage) || st.Time.Time.Before(job.Started.Truncate(time.Second)) {
		return nil
	}
	return st
}

// rejoining waits for a node whose step succeeded to be whole again.
func (d *decider) rejoining(r *nodeRound, n NodeInfo) {
	if n.Unschedulable {
		d.act(ActionUncordon, n.Name)
	}
	if waits := d.rejoinWaits(n, d.o.NodeJobs[n.Name]); len(waits) > 0 {
		d.setNode(n.Name, func(s *v1beta1.NodeUpgradeStatus) {
			s.Reason, s.Message = "WaitingForNode", "waiting for "+strings.Join(waits, ", ")
		})
		r.working = append(r.working, n.Name)
		return
	}
	d.event("NodeRejoined", "node %s rejoined: Ready, schedulable, its agent serving; upgraded", n.Name)
	d.setNode(n.Name, func(s *v1beta1.NodeUpgradeStatus) {
		s.State, s.Reason, s.Message = v1beta1.NodeUpgraded, "", ""
		d.stamp(s, func(t *v1beta1.NodeTimes) **metav1.MicroTime { return &t.Upgraded })
	})
}

// upgraded keeps an upgraded node schedulable.
func (d *decider) upgraded(_ *nodeRound, n NodeInfo) {
	if n.Unschedulable {
		d.act(ActionUncordon, n.Name)
	}
}

// startNodes starts the nodes of group that may start, as long as the group has fewer than
// limit nodes in flight and the cluster is whole (gate), and returns the nodes held on purpose
// (paused, awaiting approval).
func (d *decider) startNodes(r *nodeRound, group []string, limit int) (held []string) {
	p := d.o.Plan
	// The nodes of the group in flight, gathered once: a node to start is judged against them
	// (Joinable), and each node started joins them. Gathering them again for every node waiting
	// made a reconcile of a thousand nodes quadratic.
	var batch []NodeInfo
	for _, n := range group {
		if d.rule(n).inFlight {
			batch = append(batch, r.info[n])
		}
	}
	busy := len(batch)
	for _, n := range group {
		if rule := d.rule(n); rule.inFlight || rule.done {
			continue
		}
		switch {
		case d.passedOver(r.info[n]):
			// A worker that is away for good does not hold the others: it waits for its turn
			// until it is back, or until the operator skips it.
			d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
				s.State, s.Reason = v1beta1.NodeUpgradePending, "NodeNotReady"
				s.Message = "the node is not Ready: passed over until it is back; upgrade-repo upgrade skip " + n + " finishes the plan without it"
			})
		case slices.Contains(pausedNodes(p), n):
			d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
				s.State, s.Reason, s.Message = v1beta1.NodeUpgradePaused, "NodePaused", "listed in nodeUpgradeOption.pauseNodes"
			})
			held = append(held, n)
		case p.Spec.Mode == v1beta1.ModeInteractive && !approved(p, n):
			d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
				s.State, s.Reason, s.Message = v1beta1.NodeUpgradePaused, "AwaitingApproval", "waiting for "+v1beta1.ApproveAnnotation+" to list the node"
			})
			held = append(held, n)
		case busy < limit && len(d.gate(r)) > 0:
			d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
				s.State, s.Reason, s.Message = v1beta1.NodeUpgradePending, "WaitingForCluster", "waiting for "+strings.Join(d.gate(r), ", ")
			})
			r.gated = append(r.gated, n)
			// The next nodes of the group wait for this one.
			busy = limit
		case busy < limit && Joinable(r.info[n], batch, d.o.Disruptions) != "":
			// Another node of the group may join the batch instead: look on.
			why := Joinable(r.info[n], batch, d.o.Disruptions)
			d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
				s.State, s.Reason, s.Message = v1beta1.NodeUpgradePending, "WaitingForBatch", "not with the nodes in flight: "+why
			})
		case busy < limit:
			d.act(ActionCordon, n)
			d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
				s.State, s.Reason, s.Message = v1beta1.NodeCordoned, "", "cordoned"
				s.Times = &v1beta1.NodeTimes{Cordoned: d.microNow()}
			})
			r.working = append(r.working, n)
			batch = append(batch, r.info[n])
			busy++
		default:
			d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
				s.State, s.Reason, s.Message = v1beta1.NodeUpgradePending, "", ""
			})
		}
	}
	return held
}

// pausedNodes names the nodes the plan's nodeUpgradeOption.pauseNodes holds.
func pausedNodes(p *v1beta1.UpgradePlan) []string {
	if o := p.Spec.NodeUpgradeOption; o != nil {
		return o.PauseNodes
	}
	return nil
}

// nodeConcurrency is how many nodes that are not control-plane nodes are upgraded at once.
func nodeConcurrency(p *v1beta1.UpgradePlan) int {
	if o := p.Spec.NodeUpgradeOption; o != nil && o.Concurrency > 0 {
		return o.Concurrency
	}
	return 1
}

// nodeUpgrading upgrades the nodes itself: control-plane nodes one at a time first, then the
// others with the plan's concurrency. Each node moves along as nodeRules says for its state.
func (d *decider) nodeUpgrading() {
	info := map[string]NodeInfo{}
	for _, n := range d.o.Nodes {
		info[n.Name] = n
	}
	cp, others := NodeOrder(d.o.Nodes)
	r := &nodeRound{info: info}

	// Move the nodes in flight along.
	for _, n := range append(slices.Clone(cp), others...) {
		if advance := d.rule(n).advance; advance != nil {
			advance(d, r, info[n])
		}
		if r.failed {
			return
		}
	}

	// Start new nodes: the control plane one at a time, then the others (a rollback: the
	// others first).
	held := d.startInOrder(r, cp, others)

	upgraded := 0
	for _, n := range d.o.Nodes {
		if d.rule(n.Name).done {
			upgraded++
		}
	}
	stalled := d.stalledNodes(r.working)
	gateStalled := d.stalledNodes(r.gated)
	lost := d.lostNodes()
	switch {
	case upgraded == len(d.o.Nodes):
		d.enter(v1beta1.PhaseNodeUpgraded)
	case len(lost) > 0:
		msg := strings.Join(lost, "; ")
		if len(r.working) > 0 {
			msg += fmt.Sprintf("; %d of %d nodes upgraded, in progress: %s", upgraded, len(d.o.Nodes), strings.Join(r.working, ", "))
		}
		d.wait("NodeNotReady", msg, 0, true)
	case len(r.stuck) > 0:
		d.wait("NodeJobStuck", strings.Join(r.stuck, "; "), 0, true)
	case len(stalled) > 0:
		d.wait("NodeStalled", strings.Join(stalled, "; "), 0, true)
	case len(gateStalled) > 0:
		d.wait("WaitingForCluster", strings.Join(gateStalled, "; "), 0, true)
	case len(r.gated) > 0:
		d.wait("WaitingForCluster", fmt.Sprintf("node %s waits for %s", strings.Join(r.gated, ", "), strings.Join(r.gateWaits, ", ")), 0, false)
	case len(r.working) == 0 && len(held) > 0:
		d.hold("NodesHeld", "waiting for held nodes: "+strings.Join(held, ", "))
	default:
		d.wait("NodeUpgrading", fmt.Sprintf("%d of %d nodes upgraded; in progress: %s", upgraded, len(d.o.Nodes), strings.Join(r.working, ", ")), 0, false)
	}
	if len(r.drainBlocked) > 0 {
		d.drainBlocked(strings.Join(r.drainBlocked, "; "))
	}
}

// drainBlocked makes the plan Degraded DrainBlocked, whatever else it waits for: a
// PodDisruptionBudget refuses an eviction, and only a change to it (or to its pods) lets the
// drain finish. The condition keeps the time the plan was first Degraded.
func (d *decider) drainBlocked(msg string) {
	since := d.now
	if c := meta.FindStatusCondition(d.o.Plan.Status.Conditions, v1beta1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
		since = c.LastTransitionTime
	}
	meta.RemoveStatusCondition(&d.st.Conditions, v1beta1.ConditionDegraded)
	meta.SetStatusCondition(&d.st.Conditions, metav1.Condition{
		Type: v1beta1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: "DrainBlocked", Message: msg,
		ObservedGeneration: d.o.Plan.Generation, LastTransitionTime: since,
	})
	if d.out.RequeueAfter == 0 || d.out.RequeueAfter > d.cfg.Poll {
		d.out.RequeueAfter = d.cfg.Poll
	}
}

// rejoinWaits lists what a node whose step succeeded still waits for before the next node may
// start: Ready, schedulable, its agent reporting since the step ended with its repo Ready, and
// its control-plane pods Ready.
func (d *decider) rejoinWaits(n NodeInfo, job JobState) []string {
	var waits []string
	if !n.Ready {
		waits = append(waits, "the node to be Ready")
	}
	if n.Unschedulable {
		waits = append(waits, "the node to be uncordoned")
	}
	rn, why, ok := d.report(n.Name)
	switch {
	case !ok:
		waits = append(waits, "its agent ("+why+")")
	case !job.Completed.IsZero() && rn.HeartbeatTime.Time.Before(job.Completed.Truncate(time.Second)) && !d.reportedAfterStep(n.Name, job):
		waits = append(waits, "its agent to report after the node step")
	case !rn.Repo.Ready:
		waits = append(waits, "its agent to serve the ISO again")
	}
	if pods := d.o.ControlPlaneNotReady[n.Name]; len(pods) > 0 {
		waits = append(waits, "control-plane pods "+strings.Join(pods, ", ")+" to be Ready")
	}
	return waits
}

// sucUpgrading leaves the nodes to system-upgrade-controller and follows its Plans.
func (d *decider) sucUpgrading() {
	d.out.Actions = append(d.out.Actions, Action{Kind: ActionApplySUCPlans})
	if !d.o.SUC.Exists {
		d.wait("SUCPlansCreated", "system-upgrade-controller Plans created", 0, false)
		return
	}
	done := 0
	for _, n := range orderedNames(d.o.Nodes) {
		state := v1beta1.NodeUpgrading
		if slices.Contains(d.o.SUC.Upgraded, n) {
			state = v1beta1.NodeUpgraded
			done++
		}
		d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) { s.State, s.Reason, s.Message = state, "", "" })
	}
	if done == len(d.o.Nodes) {
		d.enter(v1beta1.PhaseNodeUpgraded)
		return
	}
	d.wait("NodeUpgrading", fmt.Sprintf("%d of %d nodes upgraded by system-upgrade-controller", done, len(d.o.Nodes)), 0, false)
}

// reportedAfterStep reports whether node's agent wrote its report after the last act of the
// node's step: the step's report of KubernetesUpgraded, which a kubeadm step makes once the
// kubelet runs the new version and the node is Ready again, is delivered through the agent, so
// an agent report written with or after it shows the agent came through the step. The next
// heartbeat, up to the agent's report interval later, need not be waited for. An OS step may
// reboot after it reports, so only its heartbeat after the Job's end counts.
func (d *decider) reportedAfterStep(node string, job JobState) bool {
	st := d.stepReport(node, job)
	rn := d.o.RepoNodes[node]
	return st != nil && st.Stage == v1beta1.StageKubernetesUpgraded && !rn.HeartbeatTime.Time.Before(st.Time.Time)
}

// stamp sets the time field returns, unless it is set: each transition is stamped once.
func (d *decider) stamp(s *v1beta1.NodeUpgradeStatus, field func(*v1beta1.NodeTimes) **metav1.MicroTime) {
	if s.Times == nil {
		s.Times = &v1beta1.NodeTimes{}
	}
	if f := field(s.Times); *f == nil {
		*f = d.microNow()
	}
}

// microNow is the observation's time to the microsecond, for NodeTimes.
func (d *decider) microNow() *metav1.MicroTime { return ptrMicro(d.o.Now) }

func ptrMicro(t time.Time) *metav1.MicroTime {
	m := metav1.NewMicroTime(t.UTC().Truncate(time.Microsecond))
	return &m
}
