package sequencer

import (
	"fmt"
	"maps"
	"net/url"
	"regexp"
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
	// StepStallAfter is how long a node may go without progress while it preloads, is drained,
	// runs its node step or rejoins, and how long the cluster step may run, before the plan is
	// marked Degraded with the node and what it waits for. 0 disables it.
	StepStallAfter time.Duration
}

// DefaultConfig is the Config the sequencer runs with unless told otherwise.
var DefaultConfig = Config{StallAfter: 10 * time.Minute, HeartbeatTimeout: 2 * time.Minute, Poll: 10 * time.Second, StepStallAfter: 30 * time.Minute}

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
	// Started and Completed are when the Job started and, once it succeeded, completed; zero
	// when unknown.
	Started, Completed time.Time
	// Orphaned names the Job's pods that a reboot of their node left Pending for good: created
	// but never started, while the node is back. The kubelet never fails them, so the Job
	// would never run the step again.
	Orphaned []string
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
	// UpgradeImage is the image the plan's Jobs run: the plan's own or the sequencer's default.
	UpgradeImage string
	// ISOSize is the size of the Version's ISO as its origin announces it; 0 when unknown. Only
	// in Initializing.
	ISOSize int64
	// DrainWarnings name, before anything is downloaded, what will make a drain wait or cost
	// availability (a PodDisruptionBudget allowing no disruption, a workload with one replica).
	// Only in Initializing.
	DrainWarnings []string
	// ControlPlaneNotReady names, for the nodes rejoining after their node step, the
	// control-plane pods on them that are not Ready.
	ControlPlaneNotReady map[string][]string
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
	// ActionDeletePod deletes Pod, a pod of Node's Job that a reboot left Pending for good, so
	// that the Job runs a new one.
	ActionDeletePod ActionKind = "DeletePod"
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
	// Pod names the pod of ActionDeletePod, in the sequencer's namespace.
	Pod string
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
	case v1beta1.PhaseFailed:
		d.retry()
	case v1beta1.PhaseSucceeded:
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
	if d.o.UpgradeImage == "" {
		d.fail("InvalidPlan", "the plan names no upgrade image (spec.upgrade) and the sequencer has no default (--upgrade-image)")
		return
	}
	if v := d.o.Version; v != nil {
		if msg := validateVersion(v); msg != "" {
			d.fail("InvalidVersion", msg)
			return
		}
	}
	if !d.judge(d.policyInput(false)) {
		return
	}
	warnings, blocking := d.preflight()
	if len(blocking) > 0 {
		if !d.o.Plan.Spec.Force {
			d.wait("PreflightCheckFailed", strings.Join(blocking, "; ")+" (spec.force goes on anyway)", 0, true)
			return
		}
		for _, b := range blocking {
			warnings = append(warnings, "forced: "+b)
		}
	}
	d.st.Warnings = warnings
	for _, w := range warnings {
		d.out.Events = append(d.out.Events, Event{Warning: true, Reason: "PreflightWarning", Message: w})
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

// checksumPattern is what a Version's isoChecksum must look like.
var checksumPattern = regexp.MustCompile(`^(sha512:)?[0-9a-fA-F]{128}$`)

// validateVersion says what is wrong with v, or returns "". The CRD checks the same, but a
// Version may predate the CRD's rules.
func validateVersion(v *v1beta1.Version) string {
	var bad []string
	if u, err := url.Parse(v.Spec.ISOURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad = append(bad, fmt.Sprintf("isoURL %q is not an http or https URL", redactURL(v.Spec.ISOURL)))
	}
	if !checksumPattern.MatchString(v.Spec.ISOChecksum) {
		bad = append(bad, "isoChecksum must be the ISO's SHA-512 as 128 hex digits, optionally prefixed with sha512:")
	}
	if len(bad) == 0 {
		return ""
	}
	return "Version " + v.Name + ": " + strings.Join(bad, "; ")
}

// redactURL drops the user information and the query of a URL, which may hold credentials.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// preflight runs the checks that need the agents' reports, before anything is downloaded:
// free space in every node's cache for the ISO (blocking) and for the images besides
// (warning), and what will make a drain wait (warnings).
func (d *decider) preflight() (warnings, blocking []string) {
	want := d.o.Version.Spec.ISOChecksum
	size := d.o.ISOSize
	if size <= 0 {
		warnings = append(warnings, "the ISO's size is unknown (its origin did not announce it): free space was not checked")
	}
	for _, n := range orderedNames(d.o.Nodes) {
		rn := d.o.RepoNodes[n]
		switch {
		case rn == nil:
			warnings = append(warnings, fmt.Sprintf("node %s: no report from its agent yet, its free space was not checked", n))
			continue
		case rn.Cache.TotalBytes <= 0 || size <= 0:
			continue
		}
		var need int64
		if rn.ISO.Checksum != want || rn.ISO.State != v1beta1.ISOReady {
			need = size
		}
		where := rn.Cache.Path
		if where == "" {
			where = "the node cache"
		}
		switch {
		case rn.Cache.FreeBytes < need:
			blocking = append(blocking, fmt.Sprintf("node %s: %s free in %s, the ISO needs %s", n, byteSize(rn.Cache.FreeBytes), where, byteSize(need)))
		case rn.Cache.FreeBytes < need+size:
			warnings = append(warnings, fmt.Sprintf("node %s: %s free in %s: room for the ISO (%s) but perhaps not for the release's images besides", n,
				byteSize(rn.Cache.FreeBytes), where, byteSize(size)))
		}
	}
	return append(warnings, d.o.DrainWarnings...), blocking
}

// byteSize prints n bytes for humans.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
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

// setNode changes node's status with f and stamps LastProgressTime when the node moved: a new
// state, reason or message, or more bytes or images done.
func (d *decider) setNode(name string, f func(*v1beta1.NodeUpgradeStatus)) {
	if d.st.NodeUpgradeStatuses == nil {
		d.st.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
	}
	old := d.st.NodeUpgradeStatuses[name]
	ns := *old.DeepCopy()
	f(&ns)
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
	var pending, preloading []string
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
			preloading = append(preloading, n)
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
	if st := d.stalledNodes(preloading); len(st) > 0 {
		d.wait("NodeStalled", strings.Join(st, "; "), 0, true)
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
		d.wait("ClusterJobRunning", "waiting for the cluster Job", d.cfg.StepStallAfter, false)
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
	active := func(n string) bool {
		s := state(n)
		return s == v1beta1.NodeCordoned || s == v1beta1.NodeUpgrading || s == v1beta1.NodeRejoining
	}
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
				// The step is done (across a reboot, if it rebooted the node): let the node
				// take pods again, and wait for it to be whole before the next one starts.
				act(ActionUncordon, n)
				d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
					s.State, s.Reason, s.Message = v1beta1.NodeRejoining, "", "the node step succeeded"
				})
				working = append(working, n)
			case job.Stuck != "":
				stuck = append(stuck, n+": "+job.Stuck)
				working = append(working, n)
			case len(job.Orphaned) > 0:
				for _, p := range job.Orphaned {
					d.out.Actions = append(d.out.Actions, Action{Kind: ActionDeletePod, Node: n, Pod: p})
				}
				d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
					s.Reason, s.Message = "ReplacingPod", "the reboot left pod "+strings.Join(job.Orphaned, ", ")+" Pending for good: deleted, the Job runs a new one"
				})
				d.out.Events = append(d.out.Events, Event{Warning: true, Reason: "ReplacingPod",
					Message: fmt.Sprintf("node %s: the reboot left pod %s of the node Job Pending for good; deleted so that the Job runs a new one", n, strings.Join(job.Orphaned, ", "))})
				working = append(working, n)
			default:
				// A node step may reboot its node: say so while the node is away, so that a
				// stall names it.
				reason, msg := "", "the node Job runs"
				if !ni.Ready {
					reason, msg = "WaitingForNode", "the node Job runs; the node is not Ready (rebooting?)"
				}
				d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) { s.Reason, s.Message = reason, msg })
				working = append(working, n)
			}
		case v1beta1.NodeRejoining:
			if ni.Unschedulable {
				act(ActionUncordon, n)
			}
			if waits := d.rejoinWaits(ni, job); len(waits) > 0 {
				d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
					s.Reason, s.Message = "WaitingForNode", "waiting for "+strings.Join(waits, ", ")
				})
				working = append(working, n)
				continue
			}
			d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
				s.State, s.Reason, s.Message = v1beta1.NodeUpgraded, "", ""
			})
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
	stalled := d.stalledNodes(working)
	switch {
	case upgraded == len(d.o.Nodes):
		d.enter(v1beta1.PhaseNodeUpgraded)
	case len(stuck) > 0:
		d.wait("NodeJobStuck", strings.Join(stuck, "; "), 0, true)
	case len(stalled) > 0:
		d.wait("NodeStalled", strings.Join(stalled, "; "), 0, true)
	case len(working) == 0 && len(held) > 0:
		d.hold("NodesHeld", "waiting for held nodes: "+strings.Join(held, ", "))
	default:
		d.wait("NodeUpgrading", fmt.Sprintf("%d of %d nodes upgraded; in progress: %s", upgraded, len(d.o.Nodes), strings.Join(working, ", ")), 0, false)
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
	case !job.Completed.IsZero() && rn.HeartbeatTime.Time.Before(job.Completed.Truncate(time.Second)):
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
