package sequencer

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/policy"
	"github.com/upgrade-repo/upgrade-repo/release"
)

// Config tunes Decide.
type Config struct {
	// StallAfter is how long a short phase (ISODownloading, RepoCreating, MetadataPopulating,
	// Initializing) may wait before the plan is marked Degraded.
	StallAfter time.Duration
	// HeartbeatTimeout is how old an agent's report may be before the plan is marked Degraded.
	HeartbeatTimeout time.Duration
	// Poll is how soon a waiting plan is looked at again.
	Poll time.Duration
}

// DefaultConfig is the Config the sequencer runs with unless told otherwise.
var DefaultConfig = Config{StallAfter: 10 * time.Minute, HeartbeatTimeout: 2 * time.Minute, Poll: 10 * time.Second}

// NodeInfo is what Decide needs to know of a node.
type NodeInfo struct {
	Name          string
	ControlPlane  bool
	Ready         bool
	Unschedulable bool
}

// JobState is what a Job the plan created has come to.
type JobState struct {
	// Exists is false when there is no such Job.
	Exists bool
	// Succeeded and Failed are set once the Job finished.
	Succeeded, Failed bool
	// Message says why the Job failed.
	Message string
	// Stuck says why a running Job's pod cannot make progress (an image that cannot be pulled, a
	// container that keeps crashing); empty otherwise.
	Stuck string
}

// SUCProgress is how far system-upgrade-controller's Plans have come.
type SUCProgress struct {
	// Exists is false until the Plans are created.
	Exists bool
	// Upgraded names the nodes the Plans have upgraded.
	Upgraded []string
}

// Observation is what the Reconciler saw for one plan. Decide reads it and never changes it.
type Observation struct {
	// Now is the time of the observation.
	Now time.Time
	// Plan is the plan as read.
	Plan *v1beta1.UpgradePlan
	// Version is the plan's Version; nil when it does not exist.
	Version *v1beta1.Version
	// Installed is the recorded installed version.
	Installed Installed
	// PlansInFlight names the other plans that hold the cluster.
	PlansInFlight []string
	// Nodes are the cluster's nodes.
	Nodes []NodeInfo
	// RepoNodes are the agents' reports by node name.
	RepoNodes map[string]*v1beta1.RepoNodeStatus
	// ReadyEndpoints counts the Ready endpoints of the repo Service.
	ReadyEndpoints int
	// Release and ReleaseErr are the release metadata read through the repo Service; only in
	// MetadataPopulating.
	Release    *release.Release
	ReleaseErr error
	// ClusterJob is the state of the cluster Job.
	ClusterJob JobState
	// NodeJobs are the states of the node Jobs by node name.
	NodeJobs map[string]JobState
	// PodsToEvict counts, for the nodes being drained, the pods a drain must still evict.
	PodsToEvict map[string]int
	// SUC is the progress of system-upgrade-controller's Plans, with that executor.
	SUC SUCProgress
}

// ActionKind names something the Reconciler does to the cluster. Every action is idempotent.
type ActionKind string

// The actions.
const (
	// ActionCreateClusterJob creates the cluster Job unless it exists.
	ActionCreateClusterJob ActionKind = "CreateClusterJob"
	// ActionCordon marks Node unschedulable.
	ActionCordon ActionKind = "Cordon"
	// ActionDrain evicts Node's pods through the Eviction API, leaving DaemonSet and mirror pods.
	ActionDrain ActionKind = "Drain"
	// ActionCreateNodeJob creates Node's Job unless it exists.
	ActionCreateNodeJob ActionKind = "CreateNodeJob"
	// ActionUncordon marks Node schedulable.
	ActionUncordon ActionKind = "Uncordon"
	// ActionApplySUCPlans creates or updates system-upgrade-controller's Plans.
	ActionApplySUCPlans ActionKind = "ApplySUCPlans"
	// ActionCleanUp deletes the Jobs and system-upgrade-controller Plans the plan created.
	ActionCleanUp ActionKind = "CleanUp"
	// ActionRecordInstalled writes InstalledConfigMap with the plan's version.
	ActionRecordInstalled ActionKind = "RecordInstalled"
)

// Action is one thing to do.
type Action struct {
	Kind ActionKind
	// Node is the node the action is about, for node actions.
	Node string
}

// Event is a Kubernetes event to record on the plan.
type Event struct {
	// Warning is true for a Warning event, false for Normal.
	Warning bool
	Reason  string
	Message string
}

// Decision is what Decide asks for: the plan's next status, the actions to apply first, the
// events to record once the status is written, and when to look again (0: on the next change).
type Decision struct {
	Status       v1beta1.UpgradePlanStatus
	Actions      []Action
	Events       []Event
	RequeueAfter time.Duration
}

// Decide computes the next step of o.Plan. It is a pure function: the same observation gives the
// same decision, and a decision applied twice has the effect of applying it once.
func Decide(cfg Config, o Observation) Decision {
	d := &decider{cfg: cfg, o: o, now: metav1.NewTime(o.Now.UTC().Truncate(time.Second))}
	d.out.Status = *o.Plan.Status.DeepCopy()
	d.st = &d.out.Status
	d.st.ObservedGeneration = o.Plan.Generation
	switch p := d.st.Phase; p {
	case "":
		d.enter(v1beta1.PhaseInitializing)
	case v1beta1.PhaseInitializing:
		d.initialize()
	case v1beta1.PhaseISODownloading:
		d.isoDownloading()
	case v1beta1.PhaseRepoCreating:
		d.repoCreating()
	case v1beta1.PhaseMetadataPopulating:
		d.metadataPopulating()
	case v1beta1.PhaseImagePreloading:
		d.imagePreloading()
	case v1beta1.PhaseImagePreloaded:
		if o.Plan.Spec.Mode == v1beta1.ModeInteractive && !approved(o.Plan, v1beta1.ApproveCluster) {
			d.hold("AwaitingApproval", fmt.Sprintf("waiting for %s to list %q before ClusterUpgrading", v1beta1.ApproveAnnotation, v1beta1.ApproveCluster))
			return d.out
		}
		d.enter(v1beta1.PhaseClusterUpgrading)
	case v1beta1.PhaseClusterUpgrading:
		d.clusterUpgrading()
	case v1beta1.PhaseNodeUpgrading:
		if executor(o.Plan) == v1beta1.ExecutorSystemUpgradeController {
			d.sucUpgrading()
		} else {
			d.nodeUpgrading()
		}
	case v1beta1.PhaseCleaningUp:
		d.out.Actions = append(d.out.Actions, Action{Kind: ActionCleanUp}, Action{Kind: ActionRecordInstalled})
		d.releaseAgents()
		d.enter(v1beta1.PhaseCleanedUp)
	case v1beta1.PhaseCleanedUp:
		d.enter(v1beta1.PhaseSucceeded)
	case v1beta1.PhaseSucceeded, v1beta1.PhaseFailed:
	default:
		if next, ok := nextAfter(p); ok {
			d.enter(next)
		} else {
			d.fail("UnknownPhase", fmt.Sprintf("the status holds phase %q, which this sequencer does not know", p))
		}
	}
	return d.out
}

// nextAfter returns the phase that follows a done phase.
func nextAfter(p v1beta1.Phase) (v1beta1.Phase, bool) {
	for i, s := range Steps {
		if s.Done == p && i+1 < len(Steps) {
			return Steps[i+1].Running, true
		}
	}
	return "", false
}

type decider struct {
	cfg Config
	o   Observation
	now metav1.Time
	out Decision
	st  *v1beta1.UpgradePlanStatus
}

func (d *decider) setCondition(typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&d.st.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: d.o.Plan.Generation, LastTransitionTime: d.now,
	})
}

// enter moves the plan to phase p.
func (d *decider) enter(p v1beta1.Phase) {
	d.st.Phase = p
	d.st.PhaseTransitionTimestamps = append(d.st.PhaseTransitionTimestamps,
		v1beta1.PhaseTransitionTimestamp{Phase: p, PhaseTransitionTimestamp: d.now})
	d.out.Events = append(d.out.Events, Event{Reason: string(p), Message: "the plan entered phase " + string(p)})
	d.setCondition(v1beta1.ConditionDegraded, metav1.ConditionFalse, string(p), "")
	if p == v1beta1.PhaseSucceeded {
		d.setCondition(v1beta1.ConditionAvailable, metav1.ConditionTrue, string(p), "version "+d.o.Plan.Spec.Version+" is installed")
		d.setCondition(v1beta1.ConditionProgressing, metav1.ConditionFalse, string(p), "")
		return
	}
	d.setCondition(v1beta1.ConditionAvailable, metav1.ConditionFalse, string(p), "")
	d.setCondition(v1beta1.ConditionProgressing, metav1.ConditionTrue, string(p), "")
}

// enteredAt returns when the plan entered its current phase.
func (d *decider) enteredAt() time.Time {
	for i := len(d.st.PhaseTransitionTimestamps) - 1; i >= 0; i-- {
		if t := d.st.PhaseTransitionTimestamps[i]; t.Phase == d.st.Phase {
			return t.PhaseTransitionTimestamp.Time
		}
	}
	return d.now.Time
}

// wait keeps the plan in its phase. When stallAfter is positive and the phase has lasted longer,
// or when stalled is true, the plan is Degraded with reason; otherwise it is progressing.
func (d *decider) wait(reason, msg string, stallAfter time.Duration, stalled bool) {
	d.out.RequeueAfter = d.cfg.Poll
	if !stalled && stallAfter > 0 && d.now.Sub(d.enteredAt()) >= stallAfter {
		stalled = true
		msg = fmt.Sprintf("%s (for more than %s)", msg, stallAfter)
	}
	if stalled {
		if !meta.IsStatusConditionTrue(d.st.Conditions, v1beta1.ConditionDegraded) {
			d.out.Events = append(d.out.Events, Event{Warning: true, Reason: reason, Message: msg})
		}
		d.setCondition(v1beta1.ConditionDegraded, metav1.ConditionTrue, reason, msg)
		return
	}
	d.setCondition(v1beta1.ConditionDegraded, metav1.ConditionFalse, string(d.st.Phase), "")
	d.setCondition(v1beta1.ConditionProgressing, metav1.ConditionTrue, reason, msg)
}

// hold keeps the plan in its phase on purpose (approval, paused nodes): progressing, not degraded.
func (d *decider) hold(reason, msg string) {
	d.out.RequeueAfter = d.cfg.Poll
	d.setCondition(v1beta1.ConditionDegraded, metav1.ConditionFalse, string(d.st.Phase), "")
	d.setCondition(v1beta1.ConditionProgressing, metav1.ConditionTrue, reason, msg)
}

// fail ends the plan.
func (d *decider) fail(reason, msg string) {
	d.st.FailedPhase = d.st.Phase
	msg = fmt.Sprintf("%s failed: %s", d.st.Phase, msg)
	d.st.Phase = v1beta1.PhaseFailed
	d.st.PhaseTransitionTimestamps = append(d.st.PhaseTransitionTimestamps,
		v1beta1.PhaseTransitionTimestamp{Phase: v1beta1.PhaseFailed, PhaseTransitionTimestamp: d.now})
	d.releaseAgents()
	d.setCondition(v1beta1.ConditionDegraded, metav1.ConditionTrue, reason, msg)
	d.setCondition(v1beta1.ConditionAvailable, metav1.ConditionFalse, reason, msg)
	d.setCondition(v1beta1.ConditionProgressing, metav1.ConditionFalse, reason, msg)
	d.out.Events = append(d.out.Events, Event{Warning: true, Reason: reason, Message: msg})
	d.out.RequeueAfter = 0
}

func (d *decider) releaseAgents() {
	if d.st.Agents != nil {
		d.st.Agents.Hold = false
		d.st.Agents.PreloadNodes = nil
	}
}

func (d *decider) policyInput(releaseKnown bool) policy.Input {
	p := d.o.Plan
	in := policy.Input{
		Current:         d.o.Installed.Version,
		Target:          p.Spec.Version,
		VersionExists:   d.o.Version != nil,
		PlansInFlight:   d.o.PlansInFlight,
		Force:           p.Spec.Force,
		AllowPrerelease: p.Spec.AllowPrerelease,
		ReleaseUnknown:  !releaseKnown,
	}
	if d.st.PreviousVersion != "" {
		// Once started, the plan judges against the version it started from.
		in.Current = d.st.PreviousVersion
	}
	for _, n := range d.o.Nodes {
		if !n.Ready {
			in.NotReadyNodes = append(in.NotReadyNodes, n.Name)
		}
	}
	if releaseKnown && d.o.Release != nil {
		in.MinUpgradableVersion = d.o.Release.MinUpgradableVersion
	}
	return in
}

// judge evaluates the policies and reports whether the plan may go on; it fails or stalls the
// plan when not.
func (d *decider) judge(in policy.Input) bool {
	res := policy.Evaluate(in)
	if !res.Allowed {
		if res.Transient() {
			d.wait("PolicyCheckPending", res.Summary(), 0, true)
		} else {
			d.fail("PolicyCheckFailed", res.Summary())
		}
		return false
	}
	for _, c := range res.Checks {
		if c.Forced {
			d.out.Events = append(d.out.Events, Event{Warning: true, Reason: "PolicyForced", Message: c.Name + ": " + c.Message})
		}
	}
	return true
}

func (d *decider) initialize() {
	if !d.judge(d.policyInput(false)) {
		return
	}
	v := d.o.Version
	d.st.Version = v.Spec.DeepCopy()
	d.st.PreviousVersion = d.o.Installed.Version
	d.st.ISOImageID = v.Spec.ISOChecksum
	if d.st.ISOImageID == "" {
		d.st.ISOImageID = v.Spec.ISOURL
	}
	d.st.Agents = &v1beta1.AgentInstructions{ISOURL: v.Spec.ISOURL, ISOChecksum: v.Spec.ISOChecksum, Hold: true}
	d.st.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
	for _, n := range d.o.Nodes {
		d.st.NodeUpgradeStatuses[n.Name] = v1beta1.NodeUpgradeStatus{}
	}
	d.enter(v1beta1.PhaseInitialized)
}

// report returns node's agent report when it is about the plan's ISO, and why not otherwise.
func (d *decider) report(node string) (*v1beta1.RepoNodeStatus, string, bool) {
	rn := d.o.RepoNodes[node]
	if rn == nil {
		return nil, "no report from the agent", false
	}
	if want := d.st.Agents.ISOChecksum; want != "" && rn.ISO.Checksum != want {
		return rn, "the agent works on another ISO", false
	}
	if d.cfg.HeartbeatTimeout > 0 && d.now.Sub(rn.HeartbeatTime.Time) > d.cfg.HeartbeatTimeout {
		return rn, fmt.Sprintf("the agent has not reported since %s", rn.HeartbeatTime.UTC().Format(time.RFC3339)), false
	}
	return rn, "", true
}

func (d *decider) setNode(name string, f func(*v1beta1.NodeUpgradeStatus)) {
	if d.st.NodeUpgradeStatuses == nil {
		d.st.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
	}
	ns := d.st.NodeUpgradeStatuses[name]
	f(&ns)
	d.st.NodeUpgradeStatuses[name] = ns
}

func (d *decider) isoDownloading() {
	// A download in progress with a live agent is not a stall however long it takes; nodes whose
	// agent has not picked the ISO up are, after StallAfter.
	var waiting, failed []string
	idle := false
	for _, n := range d.o.Nodes {
		rn, why, ok := d.report(n.Name)
		switch {
		case !ok:
			waiting = append(waiting, n.Name+": "+why)
			idle = true
			if rn != nil && rn.HeartbeatTime.Time.Before(d.now.Add(-d.cfg.HeartbeatTimeout)) && d.cfg.HeartbeatTimeout > 0 {
				failed = append(failed, n.Name+": "+why)
			}
		case rn.ISO.State == v1beta1.ISOFailed:
			failed = append(failed, n.Name+": "+rn.ISO.Message)
		case rn.ISO.State != v1beta1.ISOReady:
			waiting = append(waiting, fmt.Sprintf("%s: %s %s", n.Name, rn.ISO.State, percent(rn.ISO.BytesDone, rn.ISO.BytesTotal)))
		}
		if rn != nil && ok {
			d.setNode(n.Name, func(s *v1beta1.NodeUpgradeStatus) {
				s.Message = fmt.Sprintf("ISO %s %s (%d bytes from peers, %d from origin)", rn.ISO.State,
					percent(rn.ISO.BytesDone, rn.ISO.BytesTotal), rn.ISO.BytesFromPeers, rn.ISO.BytesFromOrigin)
			})
		}
	}
	switch {
	case len(failed) > 0:
		d.wait("ISODownloadStalled", strings.Join(failed, "; "), 0, true)
	case len(waiting) > 0:
		stallAfter := time.Duration(0)
		if idle {
			stallAfter = d.cfg.StallAfter
		}
		d.wait("ISODownloading", "waiting for "+strings.Join(waiting, "; "), stallAfter, false)
	default:
		d.enter(v1beta1.PhaseISODownloaded)
	}
}

func (d *decider) repoCreating() {
	var waiting []string
	for _, n := range d.o.Nodes {
		rn, why, ok := d.report(n.Name)
		switch {
		case !ok:
			waiting = append(waiting, n.Name+": "+why)
		case !rn.Repo.Ready:
			waiting = append(waiting, n.Name+": repo not Ready")
		}
	}
	if d.o.ReadyEndpoints == 0 {
		waiting = append(waiting, "the repo Service has no Ready endpoint")
	}
	if len(waiting) > 0 {
		d.wait("RepoNotReady", strings.Join(waiting, "; "), d.cfg.StallAfter, false)
		return
	}
	d.enter(v1beta1.PhaseRepoCreated)
}

func (d *decider) metadataPopulating() {
	if d.o.ReleaseErr != nil || d.o.Release == nil {
		msg := "the release metadata was not read"
		if d.o.ReleaseErr != nil {
			msg = d.o.ReleaseErr.Error()
		}
		d.wait("MetadataUnavailable", msg, d.cfg.StallAfter, false)
		return
	}
	r := d.o.Release
	if r.Harvester != d.o.Plan.Spec.Version {
		d.fail("ReleaseMismatch", fmt.Sprintf("the ISO holds release %s, the plan wants %s", r.Harvester, d.o.Plan.Spec.Version))
		return
	}
	if !d.judge(d.policyInput(true)) {
		return
	}
	d.st.ReleaseMetadata = &v1beta1.ReleaseMetadata{
		Harvester: r.Harvester, HarvesterChart: r.HarvesterChart, OS: r.OS, Kubernetes: r.Kubernetes,
		Rancher: r.Rancher, MonitoringChart: r.MonitoringChart, LoggingChart: r.LoggingChart,
		Kubevirt: r.Kubevirt, MinUpgradableVersion: r.MinUpgradableVersion,
	}
	d.enter(v1beta1.PhaseMetadataPopulated)
}

func (d *decider) imagePreloading() {
	p := d.o.Plan
	conc := 0
	if p.Spec.ImagePreloadOption != nil {
		conc = p.Spec.ImagePreloadOption.Concurrency
	}
	if conc <= 0 {
		conc = len(d.o.Nodes)
	}
	allowed := map[string]bool{}
	for _, n := range d.st.Agents.PreloadNodes {
		allowed[n] = true
	}
	var pending []string
	active, done := 0, 0
	var stalled, silent []string
	for _, n := range orderedNames(d.o.Nodes) {
		rn, why, ok := d.report(n)
		state := v1beta1.NodeImagePreloadPending
		switch {
		case ok && rn.Preload.State == v1beta1.PreloadDone:
			state = v1beta1.NodeImagePreloaded
			done++
		case ok && rn.Preload.State == v1beta1.PreloadFailed:
			d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
				s.State, s.Reason, s.Message = v1beta1.NodeImagePreloadFailed, rn.Preload.Reason, rn.Preload.Message
			})
			d.fail("ImagePreloadFailed", fmt.Sprintf("node %s: %s %s", n, rn.Preload.Reason, rn.Preload.Message))
			return
		case allowed[n]:
			state = v1beta1.NodeImagePreloading
			active++
			switch {
			case !ok && rn != nil:
				stalled = append(stalled, n+": "+why)
			case !ok:
				silent = append(silent, n+": "+why)
			}
		default:
			pending = append(pending, n)
		}
		d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
			s.State, s.Reason, s.Message = state, "", ""
			if ok {
				s.ImagesDone, s.ImagesTotal = rn.Preload.ImagesDone, rn.Preload.ImagesTotal
				s.BytesDone, s.BytesTotal = rn.Preload.BytesDone, rn.Preload.BytesTotal
			}
		})
	}
	for _, n := range pending {
		if active >= conc {
			break
		}
		d.st.Agents.PreloadNodes = append(d.st.Agents.PreloadNodes, n)
		d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) { s.State = v1beta1.NodeImagePreloading })
		active++
	}
	slices.Sort(d.st.Agents.PreloadNodes)
	if done == len(d.o.Nodes) {
		d.enter(v1beta1.PhaseImagePreloaded)
		return
	}
	if len(stalled) > 0 {
		d.wait("AgentNotReporting", strings.Join(stalled, "; "), 0, true)
		return
	}
	if len(silent) > 0 {
		// Agents that have not reported at all are given StallAfter to appear.
		d.wait("AgentNotReporting", strings.Join(silent, "; "), d.cfg.StallAfter, false)
		return
	}
	d.wait("ImagePreloading", fmt.Sprintf("%d of %d nodes preloaded", done, len(d.o.Nodes)), 0, false)
}

func (d *decider) clusterUpgrading() {
	j := d.o.ClusterJob
	switch {
	case !j.Exists:
		d.out.Actions = append(d.out.Actions, Action{Kind: ActionCreateClusterJob})
		d.wait("ClusterJobRunning", "the cluster Job was created", 0, false)
	case j.Failed:
		d.fail("ClusterJobFailed", j.Message)
	case j.Succeeded:
		d.enter(v1beta1.PhaseClusterUpgraded)
	case j.Stuck != "":
		d.wait("ClusterJobStuck", j.Stuck, 0, true)
	default:
		d.wait("ClusterJobRunning", "waiting for the cluster Job", 0, false)
	}
}

// nodeUpgrading upgrades the nodes itself: control-plane nodes one at a time first, then the
// others with the plan's concurrency.
func (d *decider) nodeUpgrading() {
	p := d.o.Plan
	info := map[string]NodeInfo{}
	for _, n := range d.o.Nodes {
		info[n.Name] = n
	}
	cp, others := orderedGroups(d.o.Nodes)
	paused := map[string]bool{}
	conc := 1
	if o := p.Spec.NodeUpgradeOption; o != nil {
		for _, n := range o.PauseNodes {
			paused[n] = true
		}
		if o.Concurrency > 0 {
			conc = o.Concurrency
		}
	}
	state := func(n string) v1beta1.NodeState { return d.st.NodeUpgradeStatuses[n].State }
	active := func(n string) bool { s := state(n); return s == v1beta1.NodeCordoned || s == v1beta1.NodeUpgrading }
	act := func(k ActionKind, n string) { d.out.Actions = append(d.out.Actions, Action{Kind: k, Node: n}) }
	var working, stuck []string

	// Move the nodes in flight along.
	for _, n := range append(slices.Clone(cp), others...) {
		ni := info[n]
		job := d.o.NodeJobs[n]
		switch state(n) {
		case v1beta1.NodeCordoned:
			working = append(working, n)
			switch {
			case !ni.Unschedulable:
				act(ActionCordon, n)
			case d.o.PodsToEvict[n] > 0:
				act(ActionDrain, n)
				d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
					s.Reason, s.Message = "Draining", fmt.Sprintf("%d pods to evict", d.o.PodsToEvict[n])
				})
			default:
				if !job.Exists {
					act(ActionCreateNodeJob, n)
				}
				d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
					s.State, s.Reason, s.Message = v1beta1.NodeUpgrading, "", "the node Job runs"
				})
			}
		case v1beta1.NodeUpgrading:
			switch {
			case !job.Exists:
				act(ActionCreateNodeJob, n)
				working = append(working, n)
			case job.Failed:
				d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
					s.State, s.Reason, s.Message = v1beta1.NodeUpgradeFailed, "NodeJobFailed", job.Message
				})
				d.fail("NodeUpgradeFailed", fmt.Sprintf("node %s: %s", n, job.Message))
				return
			case job.Succeeded:
				act(ActionUncordon, n)
				d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
					s.State, s.Reason, s.Message = v1beta1.NodeUpgraded, "", ""
				})
			case job.Stuck != "":
				stuck = append(stuck, n+": "+job.Stuck)
				working = append(working, n)
			default:
				working = append(working, n)
			}
		case v1beta1.NodeUpgraded:
			if ni.Unschedulable {
				act(ActionUncordon, n)
			}
		}
	}

	// Start new nodes: the control plane one at a time, then the others.
	interactive := p.Spec.Mode == v1beta1.ModeInteractive
	start := func(group []string, limit int) (held []string) {
		busy := 0
		for _, n := range group {
			if active(n) {
				busy++
			}
		}
		for _, n := range group {
			s := state(n)
			if s == v1beta1.NodeUpgraded || active(n) {
				continue
			}
			switch {
			case paused[n]:
				d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
					s.State, s.Reason, s.Message = v1beta1.NodeUpgradePaused, "NodePaused", "listed in nodeUpgradeOption.pauseNodes"
				})
				held = append(held, n)
			case interactive && !approved(p, n):
				d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
					s.State, s.Reason, s.Message = v1beta1.NodeUpgradePaused, "AwaitingApproval", "waiting for "+v1beta1.ApproveAnnotation+" to list the node"
				})
				held = append(held, n)
			case busy < limit:
				act(ActionCordon, n)
				d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
					s.State, s.Reason, s.Message = v1beta1.NodeCordoned, "", "cordoned"
				})
				working = append(working, n)
				busy++
			default:
				d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
					s.State, s.Reason, s.Message = v1beta1.NodeUpgradePending, "", ""
				})
			}
		}
		return held
	}
	held := start(cp, 1)
	cpDone := true
	for _, n := range cp {
		cpDone = cpDone && state(n) == v1beta1.NodeUpgraded
	}
	if cpDone {
		held = append(held, start(others, conc)...)
	} else {
		for _, n := range others {
			if state(n) != v1beta1.NodeUpgraded && !active(n) {
				d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
					s.State, s.Reason, s.Message = v1beta1.NodeUpgradePending, "WaitingForControlPlane", ""
				})
			}
		}
	}

	upgraded := 0
	for _, n := range d.o.Nodes {
		if state(n.Name) == v1beta1.NodeUpgraded {
			upgraded++
		}
	}
	switch {
	case upgraded == len(d.o.Nodes):
		d.enter(v1beta1.PhaseNodeUpgraded)
	case len(stuck) > 0:
		d.wait("NodeJobStuck", strings.Join(stuck, "; "), 0, true)
	case len(working) == 0 && len(held) > 0:
		d.hold("NodesHeld", "waiting for held nodes: "+strings.Join(held, ", "))
	default:
		d.wait("NodeUpgrading", fmt.Sprintf("%d of %d nodes upgraded; in progress: %s", upgraded, len(d.o.Nodes), strings.Join(working, ", ")), 0, false)
	}
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

func approved(p *v1beta1.UpgradePlan, item string) bool {
	for _, s := range strings.Split(p.Annotations[v1beta1.ApproveAnnotation], ",") {
		if strings.TrimSpace(s) == item {
			return true
		}
	}
	return false
}

func executor(p *v1beta1.UpgradePlan) v1beta1.Executor {
	if o := p.Spec.NodeUpgradeOption; o != nil && o.Executor != "" {
		return o.Executor
	}
	return v1beta1.ExecutorJob
}

func orderedGroups(nodes []NodeInfo) (cp, others []string) {
	for _, n := range nodes {
		if n.ControlPlane {
			cp = append(cp, n.Name)
		} else {
			others = append(others, n.Name)
		}
	}
	slices.Sort(cp)
	slices.Sort(others)
	return cp, others
}

func orderedNames(nodes []NodeInfo) []string {
	cp, others := orderedGroups(nodes)
	return append(cp, others...)
}

func percent(done, total int64) string {
	if total <= 0 {
		return fmt.Sprintf("%d bytes", done)
	}
	return fmt.Sprintf("%d%%", done*100/total)
}
