package planctl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// The functions named after a verb of `upgrade-repo upgrade` (PauseVerb, ResumeVerb, ...) do what
// the verb does with the functions above them and write to w, for the operator, what it did and
// what follows; the command only parses its flags and builds the client.

// ErrUsage marks an error of what the command was told rather than of the cluster: a request
// whose objects cannot be made, a question with no terminal to ask it on. Its words are the
// error's own; the commands make it a usage error (exit status 2).
var ErrUsage = errors.New("usage")

// usageError marks err as ErrUsage without changing its words.
type usageError struct{ err error }

func (e usageError) Error() string   { return e.err.Error() }
func (e usageError) Unwrap() []error { return []error{e.err, ErrUsage} }

// Confirm asks question on w and returns nil when the answer read from in is yes. Without a
// terminal to ask on (interactive false) it refuses with ErrUsage, asking for --yes; any answer
// but y or yes is a no. undone says what a refusal leaves, for its error.
func Confirm(w io.Writer, in io.Reader, interactive bool, question, undone string) error {
	if !interactive {
		return usageError{fmt.Errorf("stdin is not a terminal, so there is no one to ask: give --yes; %s", undone)}
	}
	fmt.Fprintf(w, "\n%s [y/N] ", question)
	answer, _ := bufio.NewReader(in).ReadString('\n')
	if ans := strings.ToLower(strings.TrimSpace(answer)); ans != "y" && ans != "yes" {
		return errors.New("not confirmed: " + undone)
	}
	return nil
}

// PauseVerb is `upgrade pause`: it pauses plan (Pause) and says what that does and does not stop.
func PauseVerb(ctx context.Context, w io.Writer, c client.Client, plan string) error {
	res, err := Pause(ctx, c, plan)
	if err != nil {
		return err
	}
	if len(res.Added) == 0 {
		fmt.Fprintf(w, "Nothing to pause in upgradeplan %s: every node is upgraded or paused already.\n", plan)
		return nil
	}
	fmt.Fprintf(w, "Paused upgradeplan %s: %s added to spec.nodeUpgradeOption.pauseNodes; no new node starts until upgrade resume %s.\n",
		plan, strings.Join(res.Added, ", "), plan)
	if len(res.InFlight) > 0 {
		fmt.Fprintf(w, "Being upgraded, and finishing: %s.\n", strings.Join(res.InFlight, ", "))
	}
	var p v1beta1.UpgradePlan
	if err := c.Get(ctx, client.ObjectKey{Name: plan}, &p); err == nil && beforeNodes(p.Status.Phase) {
		fmt.Fprintf(w, "The plan is %s: the phases before NodeUpgrading go on, and it holds before its first node.\n", p.Status.Phase.Name())
	}
	return nil
}

// beforeNodes reports whether a running plan has not reached NodeUpgrading yet.
func beforeNodes(p v1beta1.Phase) bool {
	switch p {
	case v1beta1.PhaseNodeUpgrading, v1beta1.PhaseNodeUpgraded, v1beta1.PhaseCleaningUp, v1beta1.PhaseCleanedUp,
		v1beta1.PhaseSucceeded, v1beta1.PhaseFailed:
		return false
	}
	return true
}

// ResumeVerb is `upgrade resume`: it resumes plan (Resume) and names the nodes left paused.
func ResumeVerb(ctx context.Context, w io.Writer, c client.Client, plan string, all bool) error {
	removed, still, err := Resume(ctx, c, plan, all)
	if err != nil {
		return err
	}
	if len(removed) == 0 {
		fmt.Fprintf(w, "Nothing to resume in upgradeplan %s: upgrade pause paused no node.\n", plan)
	} else {
		fmt.Fprintf(w, "Resumed upgradeplan %s: %s removed from spec.nodeUpgradeOption.pauseNodes.\n", plan, strings.Join(removed, ", "))
	}
	if len(still) > 0 {
		fmt.Fprintf(w, "Still paused, listed by hand: %s (upgrade resume %s --all removes them).\n", strings.Join(still, ", "), plan)
	}
	return nil
}

// RetryVerb is `upgrade retry`: it asks the sequencer to retry plan (Retry) and says from where.
func RetryVerb(ctx context.Context, w io.Writer, c client.Client, plan string, now time.Time) error {
	v, err := Retry(ctx, c, plan, now)
	if err != nil {
		return err
	}
	var p v1beta1.UpgradePlan
	from := "the phase that failed"
	if c.Get(ctx, client.ObjectKey{Name: plan}, &p) == nil && p.Status.FailedPhase != "" {
		from = string(p.Status.FailedPhase)
	}
	fmt.Fprintf(w, "Asked upgradeplan %s to retry (%s=%s): the sequencer resumes it from %s.\nFollow it: upgrade-repo upgrade status %s -w\n",
		plan, v1beta1.RetryAnnotation, v, from, plan)
	return nil
}

// AbortOptions are what `upgrade abort` is told.
type AbortOptions struct {
	// Plan is the plan to delete.
	Plan string
	// Yes deletes it without asking.
	Yes bool
	// SUCNamespace is where the sequencer creates system-upgrade-controller's Plans.
	SUCNamespace string
	// In is where the answer to the question is read; Interactive says it is a terminal.
	In          io.Reader
	Interactive bool
}

// AbortVerb is `upgrade abort`: it shows what deleting the plan leaves, asks (Confirm) unless
// o.Yes, deletes it (Abort) and says what to do about what it left.
func AbortVerb(ctx context.Context, w io.Writer, c client.Client, o AbortOptions) error {
	var p v1beta1.UpgradePlan
	if err := c.Get(ctx, client.ObjectKey{Name: o.Plan}, &p); err != nil {
		return fmt.Errorf("get upgradeplan %s: %w", o.Plan, err)
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	if !o.Yes {
		fmt.Fprintf(w, "Deleting upgradeplan %s (%s) leaves:\n", p.Name, p.Status.Phase.Name())
		Inspect(&p, nodes.Items, o.SUCNamespace).Write(w, p.Spec.Version, false)
		if err := Confirm(w, o.In, o.Interactive, "Abort?", "nothing was deleted"); err != nil {
			return err
		}
	}
	l, err := Abort(ctx, c, &p, nodes.Items, o.SUCNamespace)
	if err != nil {
		return err
	}
	if !o.Yes {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "Deleted upgradeplan %s (it was %s). It leaves:\n", p.Name, l.Phase.Name())
	l.Write(w, p.Spec.Version, true)
	return nil
}

// Write says what a deleted plan of version leaves; with commands, how to deal with it.
func (l Leftovers) Write(w io.Writer, version string, commands bool) {
	if len(l.Upgraded) > 0 {
		fmt.Fprintf(w, "- upgraded, and they stay so: %s (the installed version is not recorded: only a plan that succeeds does)\n", strings.Join(l.Upgraded, ", "))
	}
	if len(l.Interrupted) > 0 {
		fmt.Fprintf(w, "- interrupted: the step of %s; its Job and pod are deleted with the plan, wherever the step is: the node may be half upgraded\n", strings.Join(l.Interrupted, ", "))
	}
	if l.ClusterJob {
		fmt.Fprintln(w, "- interrupted: the cluster Job, deleted with the plan wherever it is")
	}
	if len(l.Cordoned) > 0 {
		fmt.Fprintf(w, "- cordoned, and they stay so (nothing uncordons them once the plan is gone): %s\n", strings.Join(l.Cordoned, ", "))
		if commands {
			fmt.Fprintf(w, "  once fit to run pods again: kubectl uncordon %s\n", strings.Join(l.Cordoned, " "))
		}
	}
	if len(l.Restored) > 0 {
		verb := "is uncordoned"
		if !commands {
			verb = "will be uncordoned"
		}
		fmt.Fprintf(w, "- nothing on %s: the release failed there first and kubeadm restored its manifests; it runs its earlier version and %s\n", strings.Join(l.Restored, ", "), verb)
	}
	if len(l.SUCPlans) > 0 {
		fmt.Fprintf(w, "- system-upgrade-controller's Plans %s, which go on upgrading nodes until deleted\n", strings.Join(l.SUCPlans, ", "))
		if commands {
			ns, _, _ := strings.Cut(l.SUCPlans[0], "/")
			var names []string
			for _, p := range l.SUCPlans {
				_, n, _ := strings.Cut(p, "/")
				names = append(names, n)
			}
			fmt.Fprintf(w, "  to stop them: kubectl -n %s delete plans.upgrade.cattle.io %s\n", ns, strings.Join(names, " "))
		}
	}
	fmt.Fprintf(w, "- the Version %s, for a later plan\n", version)
	fmt.Fprintln(w, "Gone with the plan: its Jobs and their pods (and logs), compatibility mode's Service and Deployment; the agents drop the ISO once no plan holds it.")
}

// NodeVerb is `upgrade node`: it makes sure a plan upgrades node alone (UpgradeNode, with version
// and name as given) and says which.
func NodeVerb(ctx context.Context, w io.Writer, c client.Client, node, version, name string) error {
	res, err := UpgradeNode(ctx, c, node, version, name)
	if err != nil {
		return err
	}
	p := res.Plan
	from := ""
	if res.From != "" {
		from = " (the Version of " + res.From + ", the plan that Succeeded last)"
	}
	if res.Created {
		fmt.Fprintf(w, "Created upgradeplan %s: node %s alone to version %s%s.\n", p.Name, node, p.Spec.Version, from)
	} else {
		fmt.Fprintf(w, "Upgradeplan %s upgrades node %s alone to version %s already (%s): nothing created.\n",
			p.Name, node, p.Spec.Version, p.Status.Phase.Name())
	}
	if len(res.Others) > 0 {
		fmt.Fprintf(w, "In flight: %s; the sequencer starts %s once they are finished.\n", strings.Join(res.Others, ", "), p.Name)
	}
	fmt.Fprintf(w, "Follow it: upgrade-repo upgrade status %s -w\n", p.Name)
	return nil
}

// SkipVerb is `upgrade skip`: it skips the nodes of args ([PLAN] NODE..., PlanAndNodes) and says
// what that leaves.
func SkipVerb(ctx context.Context, w io.Writer, c client.Client, args []string) error {
	plan, nodes, err := PlanAndNodes(ctx, c, args)
	if err != nil {
		return err
	}
	res, err := Skip(ctx, c, plan, nodes)
	if err != nil {
		return err
	}
	if len(res.Added) > 0 {
		fmt.Fprintf(w, "Skipped in upgradeplan %s: %s added to spec.nodeUpgradeOption.skipNodes; the plan finishes without them.\n", plan, strings.Join(res.Added, ", "))
	}
	if len(res.Already) > 0 {
		fmt.Fprintf(w, "Already skipped in upgradeplan %s: %s.\n", plan, strings.Join(res.Already, ", "))
	}
	for _, n := range append(res.Added, res.Already...) {
		at := "the version it has"
		if v := res.Versions[n]; v != "" {
			at = "kubelet " + v
		}
		fmt.Fprintf(w, "%s stays at %s; once it is back: upgrade-repo upgrade node %s\n", n, at, n)
	}
	if len(res.Stepping) > 0 {
		fmt.Fprintf(w, "Being upgraded: %s; the step goes on, and the node is skipped once it ends.\n", strings.Join(res.Stepping, ", "))
	}
	return nil
}

// soakPlan reads plan name, or the plan that soaks now when name is empty (Soaking).
func soakPlan(ctx context.Context, c client.Reader, name string) (*v1beta1.UpgradePlan, error) {
	if name == "" {
		return Soaking(ctx, c)
	}
	var p v1beta1.UpgradePlan
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
		return nil, fmt.Errorf("get upgradeplan %s: %w", name, err)
	}
	return &p, nil
}

// FinalizeVerb is `upgrade finalize`: it finalizes plan (the soaking one when empty) and says
// what follows.
func FinalizeVerb(ctx context.Context, w io.Writer, c client.Client, plan string, now time.Time) error {
	p, err := soakPlan(ctx, c, plan)
	if err != nil {
		return err
	}
	if err := Finalize(ctx, c, p.Name, now); err != nil {
		return err
	}
	fmt.Fprintf(w, "Finalized upgradeplan %s: its soak ends, release %s can no longer be rolled back to, and the agents clean it up.\n",
		p.Name, p.Status.Soak.PreviousVersion)
	return nil
}

// RollbackVerb is `upgrade rollback`: it creates the rollback of plan (the soaking one when
// empty), or says why not before anything is created.
func RollbackVerb(ctx context.Context, w io.Writer, c client.Client, plan string, now time.Time) error {
	of, err := soakPlan(ctx, c, plan)
	if err != nil {
		return err
	}
	p, err := Rollback(ctx, c, of, now)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Created upgradeplan %s: rolls upgradeplan %s back from %s to %s with the ISO and images its soak kept; "+
		"workers first, then the control plane; etcd stays at its newer version.\nFollow it: upgrade-repo upgrade status %s -w\n",
		p.Name, of.Name, of.Spec.Version, p.Spec.Version, p.Name)
	return nil
}
