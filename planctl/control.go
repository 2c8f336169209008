package planctl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
	"github.com/upgrade-repo/upgrade-repo/sequencer/suc"
)

// PausedAnnotation lists, separated by commas, the nodes that Pause added to the plan's
// spec.nodeUpgradeOption.pauseNodes, so that Resume removes those and leaves the nodes an
// operator paused by hand.
const PausedAnnotation = "upgrade-repo.io/paused-nodes"

// ErrState marks a request the plan's state does not allow: pausing a finished plan, retrying
// one that has not failed.
var ErrState = errors.New("not allowed in the plan's state")

// inFlightStates are the node states of a node whose upgrade has begun: the sequencer carries it
// to its end whatever pauseNodes says, and it is cordoned (but in Rejoining, once uncordoned).
var inFlightStates = []v1beta1.NodeState{
	v1beta1.NodeCordoned, v1beta1.NodeUpgrading, v1beta1.NodeKubernetesUpgrading, v1beta1.NodeKubernetesUpgraded,
	v1beta1.NodeOSUpgrading, v1beta1.NodeOSUpgraded, v1beta1.NodeRejoining,
}

// stepStates are the states of a node whose Job may be running its step.
var stepStates = []v1beta1.NodeState{
	v1beta1.NodeUpgrading, v1beta1.NodeKubernetesUpgrading, v1beta1.NodeKubernetesUpgraded,
	v1beta1.NodeOSUpgrading, v1beta1.NodeOSUpgraded,
}

// PauseResult is what Pause did.
type PauseResult struct {
	// Added names the nodes added to pauseNodes.
	Added []string
	// InFlight names the nodes whose upgrade has begun: pausing them does not stop them, the
	// sequencer carries them to Upgraded (or failure).
	InFlight []string
}

// Pause adds every node of the cluster and of the plan's status that is not Upgraded to the
// plan's spec.nodeUpgradeOption.pauseNodes, and records the ones it added in
// PausedAnnotation. The sequencer starts no new node while they are listed; the phases before
// NodeUpgrading still run, and a node already being upgraded finishes. Only the Job executor
// reads pauseNodes: a plan run by system-upgrade-controller is refused (ErrState), as is a
// finished plan.
func Pause(ctx context.Context, c client.Client, name string) (PauseResult, error) {
	var res PauseResult
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return res, fmt.Errorf("list nodes: %w", err)
	}
	// tried names the nodes the attempts added: a write that failed may have landed.
	var tried []string
	err := update(ctx, c, name, func(p *v1beta1.UpgradePlan) error {
		res = PauseResult{}
		if p.Status.Phase.Finished() {
			return fmt.Errorf("%w: upgradeplan %s is %s: there is nothing to pause", ErrState, name, p.Status.Phase)
		}
		if p.NodeExecutor() != v1beta1.ExecutorJob {
			return fmt.Errorf("%w: upgradeplan %s upgrades its nodes with %s, which does not read pauseNodes", ErrState, name, p.NodeExecutor())
		}
		names := make([]string, 0, len(nodes.Items))
		for _, n := range nodes.Items {
			names = append(names, n.Name)
		}
		for n := range p.Status.NodeUpgradeStatuses {
			names = append(names, n)
		}
		slices.Sort(names)
		if p.Spec.NodeUpgradeOption == nil {
			p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{}
		}
		o := p.Spec.NodeUpgradeOption
		ours := annotated(p)
		for _, n := range slices.Compact(names) {
			state := p.Status.NodeUpgradeStatuses[n].State
			if state == v1beta1.NodeUpgraded {
				continue
			}
			if slices.Contains(o.PauseNodes, n) {
				// An earlier attempt of this call added it, and its answer was lost.
				if slices.Contains(tried, n) && slices.Contains(ours, n) {
					res.Added = append(res.Added, n)
					if slices.Contains(inFlightStates, state) {
						res.InFlight = append(res.InFlight, n)
					}
				}
				continue
			}
			if slices.Contains(inFlightStates, state) {
				res.InFlight = append(res.InFlight, n)
			}
			o.PauseNodes = append(o.PauseNodes, n)
			ours = append(ours, n)
			res.Added = append(res.Added, n)
			tried = append(tried, n)
		}
		setAnnotated(p, ours)
		return nil
	})
	return res, err
}

// Resume removes from the plan's pauseNodes the nodes Pause added (PausedAnnotation), or every
// node with all, and returns the nodes removed and the nodes still paused.
func Resume(ctx context.Context, c client.Client, name string, all bool) (removed, still []string, err error) {
	// tried names the nodes the attempts removed: a write that failed may have landed.
	var tried []string
	err = update(ctx, c, name, func(p *v1beta1.UpgradePlan) error {
		removed, still = nil, nil
		o := p.Spec.NodeUpgradeOption
		ours := annotated(p)
		var paused []string
		if o != nil {
			paused = o.PauseNodes
		}
		for _, n := range paused {
			if all || slices.Contains(ours, n) {
				removed = append(removed, n)
			} else {
				still = append(still, n)
			}
		}
		for _, n := range tried {
			if !slices.Contains(paused, n) {
				removed = append(removed, n)
			}
		}
		for _, n := range removed {
			if !slices.Contains(tried, n) {
				tried = append(tried, n)
			}
		}
		if o != nil {
			o.PauseNodes = still
		}
		setAnnotated(p, nil)
		return nil
	})
	return removed, still, err
}

// Retry asks the sequencer to resume a Failed plan from the phase that failed: it sets
// v1beta1.RetryAnnotation to now (RFC 3339, nanoseconds, so that each call is a new value) and
// returns that value. A plan that has not failed is refused (ErrState): the sequencer acts on
// the annotation only then.
func Retry(ctx context.Context, c client.Client, name string, now time.Time) (string, error) {
	v := now.UTC().Format(time.RFC3339Nano)
	err := update(ctx, c, name, func(p *v1beta1.UpgradePlan) error {
		if p.Annotations[v1beta1.RetryAnnotation] == v || p.Status.ObservedRetry == v {
			// An earlier attempt of this call landed, and its answer was lost.
			return nil
		}
		if p.Status.Phase != v1beta1.PhaseFailed {
			return fmt.Errorf("%w: upgradeplan %s is %s, not Failed: retry resumes a plan that failed", ErrState, name, p.Status.Phase.Name())
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[v1beta1.RetryAnnotation] = v
		return nil
	})
	return v, err
}

// conflictBackoff paces the attempts of an update that meets a Conflict: the sequencer writes
// the plan's status all along, and a write of the previous attempt may have landed before its
// answer was lost (RetryingClient).
var conflictBackoff = backoff.Policy{Initial: 10 * time.Millisecond, Max: time.Second, Jitter: 0.5, Attempts: 10}

// update reads the plan name, applies change to it and writes it; on a Conflict it reads it
// again and applies change again, so change must be idempotent: applied to a plan it already
// changed, it changes nothing. An error of change is returned as it is.
func update(ctx context.Context, c client.Client, name string, change func(*v1beta1.UpgradePlan) error) error {
	var conflict error
	err := backoff.Retry(ctx, conflictBackoff, func(ctx context.Context) error {
		var p v1beta1.UpgradePlan
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
			return backoff.Permanent(fmt.Errorf("get upgradeplan %s: %w", name, err))
		}
		if err := change(&p); err != nil {
			return backoff.Permanent(err)
		}
		err := c.Update(ctx, &p)
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err):
			conflict = err
			return err
		}
		return backoff.Permanent(fmt.Errorf("update upgradeplan %s: %w", name, err))
	})
	if conflict != nil && errors.Is(err, backoff.ErrGaveUp) {
		return fmt.Errorf("update upgradeplan %s: changed by others at each of %d attempts: %w", name, conflictBackoff.Attempts, conflict)
	}
	return err
}

// PausedByHand names the nodes of the plan's pauseNodes that Pause did not add: Resume leaves
// them, Resume with all removes them too.
func PausedByHand(p *v1beta1.UpgradePlan) []string {
	o := p.Spec.NodeUpgradeOption
	if o == nil {
		return nil
	}
	ours := annotated(p)
	var out []string
	for _, n := range o.PauseNodes {
		if !slices.Contains(ours, n) {
			out = append(out, n)
		}
	}
	return out
}

// annotated names the nodes PausedAnnotation lists.
func annotated(p *v1beta1.UpgradePlan) []string {
	v := p.Annotations[PausedAnnotation]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// setAnnotated makes PausedAnnotation list nodes, or removes it when there is none.
func setAnnotated(p *v1beta1.UpgradePlan, nodes []string) {
	if len(nodes) == 0 {
		delete(p.Annotations, PausedAnnotation)
		return
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	slices.Sort(nodes)
	p.Annotations[PausedAnnotation] = strings.Join(slices.Compact(nodes), ",")
}

// Leftovers is what deleting a plan leaves behind. The sequencer has no finalizer on a plan: a
// deleted plan is forgotten at once, and only what the plan owns goes with it (its Jobs and
// their pods, compatibility mode's Service and Deployment, by garbage collection).
type Leftovers struct {
	// Plan is the plan's name.
	Plan string
	// Phase is the phase the plan was in.
	Phase v1beta1.Phase
	// Upgraded names the nodes the plan upgraded: they stay upgraded, and the installed version
	// is not recorded (only a plan that succeeds records it).
	Upgraded []string
	// Cordoned names the nodes the plan cordoned that are still unschedulable: nothing
	// uncordons them once the plan is gone.
	Cordoned []string
	// Restored names the node the release failed on first, with no other node touched
	// (v1beta1.ReasonFirstNodeFailed): kubeadm restored its manifests, so it runs the version it
	// ran before, and Abort uncordons it.
	Restored []string
	// Interrupted names the nodes whose step's Job may be running: the Job and its pod are
	// deleted with the plan, so the step stops wherever it is and the node may be half
	// upgraded.
	Interrupted []string
	// ClusterJob is true when the plan was in ClusterUpgrading: its cluster Job is deleted
	// with it, wherever it is.
	ClusterJob bool
	// SUCPlans names (namespace/name) the system-upgrade-controller Plans of a plan run by that
	// executor: they are not the plan's to delete, and system-upgrade-controller goes on
	// upgrading nodes until they are deleted.
	SUCPlans []string
}

// Inspect says what deleting plan would leave, from its status and the nodes (their
// spec.unschedulable). sucNamespace is where the sequencer creates system-upgrade-controller's
// Plans.
func Inspect(plan *v1beta1.UpgradePlan, nodes []corev1.Node, sucNamespace string) Leftovers {
	l := Leftovers{Plan: plan.Name, Phase: plan.Status.Phase}
	unschedulable := map[string]bool{}
	for _, n := range nodes {
		unschedulable[n.Name] = n.Spec.Unschedulable
	}
	st := plan.Status.NodeUpgradeStatuses
	for _, n := range sortedKeys(st) {
		s := st[n].State
		switch {
		case s == v1beta1.NodeUpgraded:
			l.Upgraded = append(l.Upgraded, n)
		case slices.Contains(stepStates, s):
			l.Interrupted = append(l.Interrupted, n)
		}
		// A failed node stays cordoned (it may be half upgraded); a node in flight is cordoned
		// until it rejoins.
		switch {
		case unschedulable[n] && s == v1beta1.NodeUpgradeFailed && st[n].Reason == v1beta1.ReasonFirstNodeFailed:
			l.Restored = append(l.Restored, n)
		case unschedulable[n] && (s == v1beta1.NodeUpgradeFailed || slices.Contains(inFlightStates, s)):
			l.Cordoned = append(l.Cordoned, n)
		}
	}
	l.ClusterJob = plan.Status.Phase == v1beta1.PhaseClusterUpgrading
	if plan.NodeExecutor() == v1beta1.ExecutorSystemUpgradeController && reachedNodes(plan.Status) {
		for _, p := range []string{suc.ServerPlanName(plan.Name), suc.AgentPlanName(plan.Name)} {
			l.SUCPlans = append(l.SUCPlans, sucNamespace+"/"+p)
		}
	}
	return l
}

// reachedNodes reports whether the plan entered NodeUpgrading (or a failure in it) and has not
// cleaned up since.
func reachedNodes(st v1beta1.UpgradePlanStatus) bool {
	switch st.Phase {
	case v1beta1.PhaseNodeUpgrading, v1beta1.PhaseNodeUpgraded:
		return true
	case v1beta1.PhaseFailed:
		return st.FailedPhase == v1beta1.PhaseNodeUpgrading || st.FailedPhase == v1beta1.PhaseNodeUpgraded
	}
	return false
}

// Abort deletes plan (the one Inspect was given: the deletion is refused if the plan was
// replaced by another of the same name since), uncordons the node a release that failed on its
// first control plane left as it was (Leftovers.Restored), and returns what it leaves. See
// Leftovers.
func Abort(ctx context.Context, c client.Client, plan *v1beta1.UpgradePlan, nodes []corev1.Node, sucNamespace string) (Leftovers, error) {
	l := Inspect(plan, nodes, sucNamespace)
	uid := plan.UID
	if err := c.Delete(ctx, plan, client.Preconditions{UID: &uid}); err != nil {
		return l, fmt.Errorf("delete upgradeplan %s: %w", plan.Name, err)
	}
	for _, n := range l.Restored {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"unschedulable":null}}`))
		if err := c.Patch(ctx, node, patch); err != nil {
			return l, fmt.Errorf("uncordon node %s: %w", n, err)
		}
	}
	return l, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
