package sequencer

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/checksum"
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
	// StepStallAfter is how long a node may go without progress while it preloads, is drained,
	// runs its node step or rejoins, and how long the cluster step may run, before the plan is
	// marked Degraded with the node and what it waits for. 0 disables it.
	StepStallAfter time.Duration
}

// DefaultConfig is the Config the sequencer runs with unless told otherwise.
var DefaultConfig = Config{StallAfter: 10 * time.Minute, HeartbeatTimeout: 2 * time.Minute, Poll: 10 * time.Second, StepStallAfter: 30 * time.Minute}

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
	// ActionDeletePod deletes Pod, a pod of Node's Job that a reboot left Pending for good, so
	// that the Job runs a new one.
	ActionDeletePod ActionKind = "DeletePod"
	// ActionDeleteNodeJob deletes Node's Job and its pods: the node was skipped during its
	// step, which must not run when the node comes back.
	ActionDeleteNodeJob ActionKind = "DeleteNodeJob"
	// ActionUncordon marks Node schedulable.
	ActionUncordon ActionKind = "Uncordon"
	// ActionApplySUCPlans creates or updates system-upgrade-controller's Plans.
	ActionApplySUCPlans ActionKind = "ApplySUCPlans"
	// ActionCleanUp deletes the Jobs and system-upgrade-controller Plans the plan created.
	ActionCleanUp ActionKind = "CleanUp"
	// ActionRecordInstalled writes InstalledConfigMap with the plan's version and marks its
	// Version Installed (the one installed before Superseded).
	ActionRecordInstalled ActionKind = "RecordInstalled"
	// ActionRecordDownloaded marks the plan's Version Downloaded and Verified.
	ActionRecordDownloaded ActionKind = "RecordDownloaded"
	// ActionRecordImages records the release's images, read through the repo, on the plan's
	// Version.
	ActionRecordImages ActionKind = "RecordImages"
)

// Action is one thing to do.
type Action struct {
	Kind ActionKind
	// Node is the node the action is about, for node actions.
	Node string
	// Pod names the pod of ActionDeletePod, in the sequencer's namespace.
	Pod string
	// Window is the rollback ActionRecordRollbackWindow records on the plan's Version; nil
	// clears what the plan recorded.
	Window *v1beta1.VersionRollback
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
	// Judgement is how the plan was judged (Judge), when this decision judged it: in
	// Initializing and MetadataPopulating, once the release is known to be the plan's; nil
	// otherwise.
	Judgement *Judgement
}

// Decide computes the next step of o.Plan. It is a pure function: the same observation gives the
// same decision, and a decision applied twice has the effect of applying it once.
func Decide(cfg Config, o Observation) Decision {
	s := scope(o)
	o.Nodes = s.nodes
	d := &decider{cfg: cfg, o: o, now: metav1.NewTime(o.Now.UTC().Truncate(time.Second))}
	d.out.Status = *o.Plan.Status.DeepCopy()
	d.st = &d.out.Status
	d.st.ObservedGeneration = o.Plan.Generation
	if o.Compat && d.st.Phase != v1beta1.PhaseSucceeded {
		// Checked in every phase, so that such a plan stops before it downloads anything.
		if msg := compatNameProblem(o.Plan.Name); msg != "" {
			d.wait("CompatibilityFailed", msg, 0, true)
			return d.out
		}
	}
	switch p := d.st.Phase; p {
	case "":
		d.enter(v1beta1.PhaseInitializing)
	case v1beta1.PhaseInitializing:
		if !d.refuseRollback() {
			d.initialize()
			d.rollbackNotes()
		}
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
		if o.Plan.NodeExecutor() == v1beta1.ExecutorSystemUpgradeController {
			d.sucUpgrading()
		} else {
			d.nodeUpgrading()
		}
	case v1beta1.PhaseNodeUpgraded:
		d.nodeUpgraded()
	case v1beta1.PhaseCleaningUp:
		d.out.Actions = append(d.out.Actions, Action{Kind: ActionCleanUp}, Action{Kind: ActionRecordInstalled})
		d.releaseAgents()
		d.startSoak()
		d.enter(v1beta1.PhaseCleanedUp)
	case v1beta1.PhaseCleanedUp:
		d.enter(v1beta1.PhaseSucceeded)
	case v1beta1.PhaseFailed:
		d.retry()
	case v1beta1.PhaseSucceeded:
		d.soaking()
	default:
		if next, ok := nextAfter(p); ok {
			d.enter(next)
		} else {
			d.fail("UnknownPhase", fmt.Sprintf("the status holds phase %q, which this sequencer does not know", p))
		}
	}
	if o.Plan.Status.Phase != v1beta1.PhaseSucceeded {
		d.recordVersions()
		d.markSkipped(s)
	}
	d.firstNodeFailure()
	return d.out
}

// recordVersions records, for every node the plan has a status for, the kubelet version it
// reported when the plan first saw it (never overwritten), the one it reports now, the
// release's Kubernetes version once the metadata is known, and its boot ID (a new one is a
// reboot, told by an event). None of it is progress.
func (d *decider) recordVersions() {
	target := ""
	if m := d.st.ReleaseMetadata; m != nil {
		target = m.Kubernetes
	}
	for _, n := range d.o.Nodes {
		s, ok := d.st.NodeUpgradeStatuses[n.Name]
		if !ok {
			continue
		}
		if n.KubeletVersion != "" {
			if s.KubeletVersionBefore == "" {
				s.KubeletVersionBefore = n.KubeletVersion
			}
			s.KubeletVersion = n.KubeletVersion
		}
		if target != "" {
			s.TargetKubeletVersion = target
		}
		if images := d.o.ControlPlaneImages[n.Name]; n.ControlPlane && len(images) > 0 {
			s.ControlPlane = &v1beta1.ControlPlaneVersions{
				APIServer: imageTag(images["kube-apiserver"]), ControllerManager: imageTag(images["kube-controller-manager"]),
				Scheduler: imageTag(images["kube-scheduler"]), Etcd: imageTag(images["etcd"]),
			}
		}
		if n.BootID != "" && n.BootID != s.BootID {
			if s.BootID != "" {
				d.event("NodeRebooted", "node %s rebooted: its boot ID changed", n.Name)
			}
			s.BootID = n.BootID
		}
		d.st.NodeUpgradeStatuses[n.Name] = s
	}
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

// event records a Normal event on the plan, once the status that comes with it is written.
func (d *decider) event(reason, format string, args ...any) {
	d.out.Events = append(d.out.Events, Event{Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// enter moves the plan to phase p, with an event that says the step began, or ended and how
// long it took.
func (d *decider) enter(p v1beta1.Phase) {
	msg := "phase " + string(p) + " began"
	switch {
	case p == v1beta1.PhaseSucceeded:
		msg = "the plan succeeded: version " + d.o.Plan.Spec.Version + " is installed"
	case !isRunningPhase(p):
		for _, s := range Steps {
			if s.Done == p && d.st.Phase == s.Running {
				msg = fmt.Sprintf("phase %s ended after %s", s.Running, d.now.Sub(d.enteredAt()).Round(time.Second))
			}
		}
	}
	d.st.Phase = p
	d.st.PhaseTransitionTimestamps = append(d.st.PhaseTransitionTimestamps,
		v1beta1.PhaseTransitionTimestamp{Phase: p, PhaseTransitionTimestamp: d.now})
	d.event(string(p), "%s", msg)
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

// fail ends the plan. The agents keep the ISO, so that a retry (RetryAnnotation) does not fetch
// it again; deleting the plan lets them drop it. A node whose step failed stays cordoned: it may
// be half upgraded, and a retry resumes from it.
func (d *decider) fail(reason, msg string) {
	d.st.FailedPhase = d.st.Phase
	msg = fmt.Sprintf("%s failed: %s", d.st.Phase, msg)
	d.st.Phase = v1beta1.PhaseFailed
	d.st.PhaseTransitionTimestamps = append(d.st.PhaseTransitionTimestamps,
		v1beta1.PhaseTransitionTimestamp{Phase: v1beta1.PhaseFailed, PhaseTransitionTimestamp: d.now})
	if d.st.Agents != nil {
		d.st.Agents.PreloadNodes = nil
		if d.st.FailedPhase == v1beta1.PhaseInitializing {
			d.st.Agents.Hold = false
		}
	}
	d.setCondition(v1beta1.ConditionDegraded, metav1.ConditionTrue, reason, msg)
	d.setCondition(v1beta1.ConditionAvailable, metav1.ConditionFalse, reason, msg)
	d.setCondition(v1beta1.ConditionProgressing, metav1.ConditionFalse, reason, msg)
	d.out.Events = append(d.out.Events, Event{Warning: true, Reason: reason, Message: msg})
	d.out.RequeueAfter = 0
}

// retry resumes a Failed plan when RetryAnnotation holds a value the plan has not acted on yet:
// from the phase that failed, with the agents holding the ISO again. Jobs are named by attempt
// (status.retries), so the step that failed runs in a new Job and the failed one stays for its
// logs until CleaningUp. A node whose step failed is still cordoned and goes back to Cordoned.
func (d *decider) retry() {
	v := d.o.Plan.Annotations[v1beta1.RetryAnnotation]
	if v == "" || v == d.st.ObservedRetry {
		return
	}
	if len(d.o.PlansInFlight) > 0 {
		// Two plans must never drive the cluster at once: wait, still Failed, until the other ends.
		d.setCondition(v1beta1.ConditionDegraded, metav1.ConditionTrue, "RetryBlocked",
			"the retry waits for plans in flight to finish: "+strings.Join(d.o.PlansInFlight, ", "))
		d.out.RequeueAfter = d.cfg.Poll
		return
	}
	d.st.ObservedRetry = v
	d.st.Retries++
	from := d.st.FailedPhase
	if !isRunningPhase(from) {
		from = v1beta1.PhaseInitializing
	}
	d.st.FailedPhase = ""
	if d.st.Agents != nil && from != v1beta1.PhaseInitializing {
		d.st.Agents.Hold = true
	}
	for _, name := range slices.Sorted(maps.Keys(d.st.NodeUpgradeStatuses)) {
		switch d.st.NodeUpgradeStatuses[name].State {
		case v1beta1.NodeUpgradeFailed:
			d.setNode(name, func(s *v1beta1.NodeUpgradeStatus) {
				s.State, s.Reason, s.Message = v1beta1.NodeCordoned, "Retry", "the node step runs again"
				// The attempt starts over: its timings are its own.
				s.Times = &v1beta1.NodeTimes{Cordoned: d.microNow()}
			})
		case v1beta1.NodeImagePreloadFailed:
			d.setNode(name, func(s *v1beta1.NodeUpgradeStatus) {
				s.State, s.Reason, s.Message = v1beta1.NodeImagePreloadPending, "Retry", ""
			})
		}
	}
	d.enter(from)
	d.out.Events = append(d.out.Events, Event{Reason: "Retry", Message: fmt.Sprintf("retry %d (%s=%s): resuming from phase %s", d.st.Retries, v1beta1.RetryAnnotation, v, from)})
}

// isRunningPhase reports whether p is the running phase of a step.
func isRunningPhase(p v1beta1.Phase) bool {
	for _, s := range Steps {
		if s.Running == p {
			return true
		}
	}
	return false
}

func (d *decider) releaseAgents() {
	if d.st.Agents != nil {
		d.st.Agents.Hold = false
		d.st.Agents.PreloadNodes = nil
	}
}

// report returns node's agent report when it is about the plan's ISO, and why not otherwise.
func (d *decider) report(node string) (*v1beta1.RepoNodeStatus, string, bool) {
	rn := d.o.RepoNodes[node]
	if rn == nil {
		return nil, "no report from the agent", false
	}
	if want := d.st.Agents.ISOChecksum; want != "" && !checksum.Same(rn.ISO.Checksum, want) {
		return rn, "the agent works on another ISO", false
	}
	if d.cfg.HeartbeatTimeout > 0 && d.now.Sub(rn.HeartbeatTime.Time) > d.cfg.HeartbeatTimeout {
		return rn, fmt.Sprintf("the agent has not reported since %s", rn.HeartbeatTime.UTC().Format(time.RFC3339)), false
	}
	return rn, "", true
}

// setNode changes node's status with f, stamps StateTime when its state changed and
// LastProgressTime when the node moved: a new state, reason or message, or more bytes or images
// done.
func (d *decider) setNode(name string, f func(*v1beta1.NodeUpgradeStatus)) {
	if d.st.NodeUpgradeStatuses == nil {
		d.st.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
	}
	old := d.st.NodeUpgradeStatuses[name]
	// f may stamp a time in the row's Times in place (stamp), so the row gets its own Times;
	// the rest of the row f only assigns. d.st is Decide's copy of the plan's status, so no
	// pointer of the row is the observation's. A whole DeepCopy of every row set, every
	// reconcile, was most of what Decide allocated at a thousand nodes.
	ns := old
	if old.Times != nil {
		t := *old.Times
		ns.Times = &t
	}
	f(&ns)
	if ns.State != old.State {
		now := d.now
		ns.StateTime = &now
		if ns.State == v1beta1.NodeCordoned && ns.UpgradeStartTime == nil {
			// The node's upgrade starts with its cordon; a retry keeps the first start.
			ns.UpgradeStartTime = &now
		}
	}
	if ns.LastProgressTime == nil || ns.State != old.State || ns.Reason != old.Reason || ns.Message != old.Message ||
		ns.BytesDone != old.BytesDone || ns.ImagesDone != old.ImagesDone {
		now := d.now
		ns.LastProgressTime = &now
	}
	d.st.NodeUpgradeStatuses[name] = ns
}

// stalledNodes names the nodes among names that have not moved for StepStallAfter, with what
// they wait for.
func (d *decider) stalledNodes(names []string) []string {
	if d.cfg.StepStallAfter <= 0 {
		return nil
	}
	var out []string
	for _, n := range names {
		s := d.st.NodeUpgradeStatuses[n]
		if s.LastProgressTime == nil || d.now.Sub(s.LastProgressTime.Time) < d.cfg.StepStallAfter {
			continue
		}
		what := string(s.State)
		if s.Reason != "" {
			what += " (" + s.Reason + ")"
		}
		if s.Message != "" {
			what += ": " + s.Message
		}
		out = append(out, fmt.Sprintf("node %s: %s, no progress since %s (more than %s)", n, what,
			s.LastProgressTime.UTC().Format(time.RFC3339), d.cfg.StepStallAfter))
	}
	return out
}
func approved(p *v1beta1.UpgradePlan, item string) bool {
	for _, s := range strings.Split(p.Annotations[v1beta1.ApproveAnnotation], ",") {
		if strings.TrimSpace(s) == item {
			return true
		}
	}
	return false
}

func percent(done, total int64) string {
	if total <= 0 {
		return fmt.Sprintf("%d bytes", done)
	}
	return fmt.Sprintf("%d%%", done*100/total)
}
