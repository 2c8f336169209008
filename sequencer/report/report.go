// Package report is how a node agent talks with the sequencer through the API server: Writer
// publishes the agent's state in the RepoNode named after its node (the agent is that object's
// only writer), and Instructions reads what the sequencer asks of the node from the UpgradePlans
// in flight.
//
// Imports: api and controller-runtime's client; it is shared by the agent and the sequencer and
// imports neither.
package report

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// The agent's RBAC, generated into manifests/rbac/agent.
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=reponodes,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=reponodes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=upgradeplans,verbs=get;list;watch
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=versions,verbs=get;list;watch

// Writer publishes one node's RepoNode status. It is safe for concurrent use; each Write replaces
// the whole status.
type Writer struct {
	c    client.Client
	node string
	now  func() time.Time
}

// Option configures a Writer.
type Option func(*Writer)

// WithClock sets the clock that stamps the heartbeat; time.Now by default.
func WithClock(now func() time.Time) Option {
	return func(w *Writer) { w.now = now }
}

// NewWriter returns a Writer for the RepoNode named nodeName. c must know the v1beta1 kinds.
func NewWriter(c client.Client, nodeName string, opts ...Option) (*Writer, error) {
	if c == nil {
		return nil, errors.New("new report writer: the client is nil")
	}
	if nodeName == "" {
		return nil, errors.New("new report writer: the node name is empty")
	}
	w := &Writer{c: c, node: nodeName, now: time.Now}
	for _, o := range opts {
		o(w)
	}
	return w, nil
}

// Write sets the RepoNode's status to st, stamping HeartbeatTime, creating the object when it does
// not exist yet and retrying on update conflicts. It returns the last API error.
func (w *Writer) Write(ctx context.Context, st v1beta1.RepoNodeStatus) error {
	st.HeartbeatTime = metav1.NewTime(w.now().Truncate(time.Second))
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var rn v1beta1.RepoNode
		err := w.c.Get(ctx, client.ObjectKey{Name: w.node}, &rn)
		if apierrors.IsNotFound(err) {
			rn = v1beta1.RepoNode{ObjectMeta: metav1.ObjectMeta{Name: w.node}}
			if err := w.c.Create(ctx, &rn); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			// Re-read so the status update carries the current resourceVersion.
			err = w.c.Get(ctx, client.ObjectKey{Name: w.node}, &rn)
		}
		if err != nil {
			return err
		}
		rn.Status = st
		return w.c.Status().Update(ctx, &rn)
	})
	if err != nil {
		return fmt.Errorf("write report of node %s: %w", w.node, err)
	}
	return nil
}

// Step returns the node step's report that the RepoNode carries, nil when it carries none or does
// not exist yet: a restarted agent reads it back before its first Write, so as not to write it
// away (a node step may reboot its node, and the agent with it).
func (w *Writer) Step(ctx context.Context) (*v1beta1.RepoNodeStep, error) {
	var rn v1beta1.RepoNode
	err := w.c.Get(ctx, client.ObjectKey{Name: w.node}, &rn)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the step report of node %s: %w", w.node, err)
	}
	return rn.Status.Step, nil
}

// Instruction is what the sequencer asks of one node.
type Instruction struct {
	// Plan is the UpgradePlan that asks; empty when no plan needs the node.
	Plan string
	// ISOURL is where to get the ISO to hold and serve; empty when there is none.
	ISOURL string
	// ISOChecksum is the ISO's SHA-512.
	ISOChecksum string
	// Preload is true when the node may preload the ISO's images now.
	Preload bool
	// Held lists, sorted and without repeats, the checksums of every ISO that a plan still asks
	// agents to hold. An agent drops an ISO only when its checksum is not listed, so that an ISO is
	// never dropped while a plan in flight is served from it.
	Held []string
	// Installed lists, sorted and without repeats, the checksums of the ISOs of plans that
	// installed their release (CleaningUp, CleanedUp, Succeeded): releases the cluster now runs,
	// whose images stay protected once the ISO is dropped.
	Installed []string
	// Failed lists, sorted and without repeats, the checksums of the ISOs of plans that Failed:
	// with Installed, what lets an agent tell, once a plan is gone, whether its release was
	// installed, abandoned, or neither as far as it saw.
	Failed []string
	// Keep lists, by checksum, the previous releases that soaking plans keep for a rollback
	// (status.soak): the agent keeps their ISOs in its cache (getting one it lacks from peers
	// first) and their images pinned, and cleans no earlier release up while any is listed.
	Keep []Kept
	// Judged names the Version of the oldest plan whose pre-flight waits for the agents'
	// measures (Initializing, its Progressing reason v1beta1.ReasonAwaitingNodeMeasures): its
	// agent measures what the Version's release would add to the node (RepoNode
	// status.forecast); empty when no plan asks. A plan its other policies refuse never asks.
	Judged string
	// CleanFor names the release whose earlier releases the agent cleans up now: the release of
	// the newest Succeeded plan, once its soak ended (Expired or Finalized) and no plan is in
	// flight or soaking; empty otherwise. A soak ended by a rollback names none: the release
	// rolled back to is the one that runs.
	CleanFor string
}

// Kept is a previous release a soaking plan keeps.
type Kept struct {
	// Release is the release's version, the name its images are pinned for.
	Release string
	// ISOURL and ISOChecksum name its ISO.
	ISOURL, ISOChecksum string
}

// installedBy reports whether a plan in phase p has installed its release: every node runs it
// from CleaningUp on, and CleaningUp is where the plan lets the agents drop the ISO, before it
// reaches Succeeded.
func installedBy(p v1beta1.Phase) bool {
	return p == v1beta1.PhaseCleaningUp || p == v1beta1.PhaseCleanedUp || p == v1beta1.PhaseSucceeded
}

// Instructions reads the UpgradePlans and returns what the node nodeName should do: hold the ISO
// of the plan that holds one (the oldest when there are several) and preload when that plan
// lists the node; a plan in flight goes before a Failed one, which still holds its ISO for a
// retry. An Instruction with an empty ISOURL asks for no ISO; Held names the ISOs the
// agent must keep all the same.
func Instructions(ctx context.Context, r client.Reader, nodeName string) (Instruction, error) {
	var plans v1beta1.UpgradePlanList
	if err := r.List(ctx, &plans); err != nil {
		return Instruction{}, fmt.Errorf("list upgrade plans: %w", err)
	}
	return Decide(plans.Items, nodeName), nil
}

// Decide returns what the node nodeName should do given the UpgradePlans plans, as Instructions
// does after reading them: for an agent that watches the plans and holds them in memory. plans
// is sorted in place.
func Decide(plans []v1beta1.UpgradePlan, nodeName string) Instruction {
	slices.SortFunc(plans, func(a, b v1beta1.UpgradePlan) int {
		// A Failed plan keeps its ISO held for a retry, but a plan in flight comes first.
		if fa, fb := a.Status.Phase == v1beta1.PhaseFailed, b.Status.Phase == v1beta1.PhaseFailed; fa != fb {
			if fa {
				return 1
			}
			return -1
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	var in Instruction
	in.Keep, in.CleanFor = soaks(plans)
	for _, p := range plans {
		if in.Judged == "" && p.Status.Agents == nil && p.Status.Phase == v1beta1.PhaseInitializing && awaitingMeasures(&p) {
			in.Judged = p.Spec.Version
		}
		a := p.Status.Agents
		if a != nil && a.ISOChecksum != "" && installedBy(p.Status.Phase) {
			in.Installed = append(in.Installed, a.ISOChecksum)
		}
		if a != nil && a.ISOChecksum != "" && p.Status.Phase == v1beta1.PhaseFailed {
			in.Failed = append(in.Failed, a.ISOChecksum)
		}
		if a == nil || !a.Hold || a.ISOURL == "" {
			continue
		}
		if a.ISOChecksum != "" {
			in.Held = append(in.Held, a.ISOChecksum)
		}
		if in.Plan != "" {
			continue
		}
		in.Plan, in.ISOURL, in.ISOChecksum = p.Name, a.ISOURL, a.ISOChecksum
		in.Preload = slices.Contains(a.PreloadNodes, nodeName)
	}
	slices.Sort(in.Held)
	in.Held = slices.Compact(in.Held)
	slices.Sort(in.Installed)
	in.Installed = slices.Compact(in.Installed)
	slices.Sort(in.Failed)
	in.Failed = slices.Compact(in.Failed)
	return in
}

// soaks returns the previous releases the soaking plans keep and, when nothing is kept or in
// flight, the release to clean up for: that of the newest Succeeded plan whose soak ended by
// expiry or by the operator.
func soaks(plans []v1beta1.UpgradePlan) ([]Kept, string) {
	var keep []Kept
	var newest *v1beta1.UpgradePlan
	busy := false
	for i := range plans {
		p := &plans[i]
		s := p.Status.Soak
		switch {
		case s != nil && s.Ended == nil && s.ISOChecksum != "":
			keep = append(keep, Kept{Release: s.PreviousVersion, ISOURL: s.ISOURL, ISOChecksum: s.ISOChecksum})
		case p.Status.Phase != v1beta1.PhaseSucceeded && p.Status.Phase != v1beta1.PhaseFailed:
			busy = true
		}
		if p.Status.Phase == v1beta1.PhaseSucceeded && (newest == nil || newest.CreationTimestamp.Before(&p.CreationTimestamp)) {
			newest = p
		}
	}
	slices.SortFunc(keep, func(a, b Kept) int { return strings.Compare(a.ISOChecksum, b.ISOChecksum) })
	keep = slices.CompactFunc(keep, func(a, b Kept) bool { return a.ISOChecksum == b.ISOChecksum })
	if busy || len(keep) > 0 || newest == nil || newest.Status.Soak == nil {
		return keep, ""
	}
	switch newest.Status.Soak.EndReason {
	case v1beta1.SoakExpired, v1beta1.SoakFinalized:
		return keep, newest.Spec.Version
	}
	return keep, ""
}

// awaitingMeasures reports whether the sequencer's pre-flight waits for the agents' measures of
// plan p's release (its Progressing condition's reason ReasonAwaitingNodeMeasures).
func awaitingMeasures(p *v1beta1.UpgradePlan) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1beta1.ConditionProgressing && c.Status == "True" && c.Reason == v1beta1.ReasonAwaitingNodeMeasures {
			return true
		}
	}
	return false
}
