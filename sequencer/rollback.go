package sequencer

import (
	"fmt"
	"strings"
	"time"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/policy"
)

// A rollback is a plan like any other (spec.rollback names the Succeeded plan whose upgrade it
// undoes) with three differences: it is judged against that plan's record before anything moves
// (JudgeRollback), the policies lift the rule against a downgrade for it alone (policy.Input's
// Rollback, within one minor version), and its nodes go in the reverse order where the skew
// rules need it: the other nodes first, so that no kubelet is ever newer than the API server it
// talks to, then the control plane, one node at a time. Its ISO is the one the soak kept in the
// nodes' caches and its images are still pinned there: nothing is downloaded or pulled.

// RollbackState is a rollback plan of a soaking plan, as observed.
type RollbackState struct {
	Name  string
	Phase v1beta1.Phase
}

// JudgeRollback says why plan p may not roll back the plan it names, of (nil when it does not
// exist), to p's Version target (nil when it does not exist), with installed the version the
// cluster runs, at now; it returns "" when it may. It is pure, and what both the sequencer (in
// Initializing, before anything moves) and `upgrade rollback` (before the plan is created) ask.
func JudgeRollback(p *v1beta1.UpgradePlan, of *v1beta1.UpgradePlan, target *v1beta1.Version, installed string, now time.Time) string {
	if p.Spec.Rollback == nil {
		return ""
	}
	name := p.Spec.Rollback.Plan
	switch {
	case of == nil:
		return fmt.Sprintf("there is no upgradeplan %s: no upgrade to roll back", name)
	case of.Spec.Rollback != nil:
		return fmt.Sprintf("upgradeplan %s is a rollback itself: upgrade again to go forward", name)
	case of.Status.Phase != v1beta1.PhaseSucceeded:
		return fmt.Sprintf("upgradeplan %s is %s: only a Succeeded upgrade is rolled back (a Failed one is retried or aborted)", name, of.Status.Phase.Name())
	case installed != "" && installed != of.Spec.Version:
		return fmt.Sprintf("the cluster runs %s, not %s, which upgradeplan %s installed", installed, of.Spec.Version, name)
	}
	s := of.Status.Soak
	switch {
	case s == nil:
		return fmt.Sprintf("upgradeplan %s kept nothing for a rollback (spec.soak 0, or it predates soaks): its previous release was cleaned up", name)
	case s.EndReason == v1beta1.SoakNothingKept:
		return fmt.Sprintf("upgradeplan %s kept nothing for a rollback: %s", name, s.Message)
	case s.Ended != nil:
		return fmt.Sprintf("the soak of upgradeplan %s ended at %s (%s): release %s was cleaned up and can no longer be rolled back to",
			name, s.Ended.UTC().Format(time.RFC3339), s.EndReason, s.PreviousVersion)
	case now.After(s.Until.Time):
		return fmt.Sprintf("the soak of upgradeplan %s ended at %s: release %s can no longer be rolled back to",
			name, s.Until.UTC().Format(time.RFC3339), s.PreviousVersion)
	case p.Spec.Version != s.PreviousVersion:
		return fmt.Sprintf("upgradeplan %s upgraded from %s: a rollback goes back to %s, not to %s", name, s.PreviousVersion, s.PreviousVersion, p.Spec.Version)
	}
	cur, cerr := policy.ParseVersion(of.Spec.Version)
	tgt, terr := policy.ParseVersion(p.Spec.Version)
	if cerr != nil || terr != nil || !policy.IsPatchDowngrade(cur, tgt) {
		return fmt.Sprintf("%s to %s is not a rollback within one minor version: only a patch release is rolled back", of.Spec.Version, p.Spec.Version)
	}
	if target == nil {
		return fmt.Sprintf("there is no Version %s: the rollback needs the Version of the ISO the soak kept", p.Spec.Version)
	}
	want, werr := checksum.Parse(s.ISOChecksum)
	got, gerr := checksum.Parse(target.Spec.ISOChecksum)
	if werr != nil || gerr != nil || want.Hex() != got.Hex() {
		return fmt.Sprintf("Version %s names another ISO than the one upgradeplan %s kept: the rollback would download it", p.Spec.Version, name)
	}
	return ""
}

// refuseRollback fails a rollback that JudgeRollback refuses, in Initializing, before anything
// moves, and reports whether it did.
func (d *decider) refuseRollback() bool {
	if d.o.Plan.Spec.Rollback == nil {
		return false
	}
	if why := JudgeRollback(d.o.Plan, d.o.RollbackOf, d.o.Version, d.o.Installed.Version, d.now.Time); why != "" {
		d.fail("RollbackRefused", why+"; nothing was changed")
		return true
	}
	return false
}

// rollbackNotes adds to a rollback that passed Initializing what it leaves at the newer
// version, said plainly rather than reported later as a mismatch: kubeadm does not downgrade
// etcd, and the release's other add-ons it upgraded stay as they are.
func (d *decider) rollbackNotes() {
	of := d.o.RollbackOf
	if d.o.Plan.Spec.Rollback == nil || of == nil || d.st.Phase != v1beta1.PhaseInitialized {
		return
	}
	etcd := "the etcd the upgrade installed"
	if m := of.Status.ReleaseMetadata; m != nil && m.Etcd != "" {
		etcd = "etcd " + m.Etcd
	}
	note := fmt.Sprintf("rollback of upgradeplan %s from %s to %s: kubeadm does not downgrade etcd, %s stays; "+
		"the control plane's static pods, the kubelets, kubeadm and kubectl go back to %s; workers first, then the control plane",
		of.Name, of.Spec.Version, d.o.Plan.Spec.Version, etcd, d.o.Plan.Spec.Version)
	for _, w := range d.st.Warnings {
		if w == note {
			return
		}
	}
	d.st.Warnings = append(d.st.Warnings, note)
	d.event("Rollback", "%s", note)
}

// startInOrder starts the nodes that may start, in the plan's order: for an upgrade the
// control-plane nodes cp one at a time, then, once each is done, the others with the plan's
// concurrency; for a rollback the others first, then the control plane. The nodes of the group
// that waits are shown pending, with what they wait for. It returns the nodes held (paused).
func (d *decider) startInOrder(r *nodeRound, cp, others []string) []string {
	first, firstLimit, then, thenLimit := cp, 1, others, nodeConcurrency(d.o.Plan)
	waitReason := "WaitingForControlPlane"
	if WorkersFirst(d.o.Plan) {
		first, firstLimit, then, thenLimit = others, nodeConcurrency(d.o.Plan), cp, 1
		waitReason = "WaitingForWorkers"
	}
	held := d.startNodes(r, first, firstLimit)
	firstDone := true
	for _, n := range first {
		firstDone = firstDone && d.rule(n).done
	}
	if firstDone {
		return append(held, d.startNodes(r, then, thenLimit)...)
	}
	for _, n := range then {
		if rule := d.rule(n); !rule.done && !rule.inFlight {
			d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
				s.State, s.Reason, s.Message = v1beta1.NodeUpgradePending, waitReason, ""
			})
		}
	}
	return held
}

// firstNodeFailure says, when the plan failed on its first control-plane node with no other
// node touched, where the cluster stands and the way back: kubeadm restores the node's
// manifests when the new control plane does not come up, so the cluster runs the previous
// version; aborting the plan uncordons the node and leaves nothing behind.
func (d *decider) firstNodeFailure() {
	if d.o.Plan.Status.Phase == v1beta1.PhaseFailed || d.st.Phase != v1beta1.PhaseFailed || d.st.FailedPhase != v1beta1.PhaseNodeUpgrading ||
		d.o.Plan.Spec.Rollback != nil {
		return
	}
	var failed string
	for name, s := range d.st.NodeUpgradeStatuses {
		switch s.State {
		case v1beta1.NodeUpgradeFailed:
			if failed != "" {
				return
			}
			failed = name
		case v1beta1.NodeCordoned, v1beta1.NodeUpgrading, v1beta1.NodeKubernetesUpgrading, v1beta1.NodeKubernetesUpgraded,
			v1beta1.NodeOSUpgrading, v1beta1.NodeOSUpgraded, v1beta1.NodeRejoining, v1beta1.NodeUpgraded:
			return
		}
	}
	if failed == "" || !d.info(failed).ControlPlane {
		return
	}
	prev := d.st.PreviousVersion
	if prev == "" {
		prev = "the previous version"
	}
	note := fmt.Sprintf("the release failed on its first control-plane node %s and no other node was touched: kubeadm restores that node's "+
		"manifests when its new control plane does not come up, so the cluster runs %s and needs no rollback; the way back is "+
		"upgrade-repo upgrade abort %s (it uncordons %s); upgrade-repo upgrade retry %s tries the release again", failed, prev, d.o.Plan.Name, failed, d.o.Plan.Name)
	for _, typ := range []string{v1beta1.ConditionDegraded, v1beta1.ConditionProgressing, v1beta1.ConditionAvailable} {
		for i := range d.st.Conditions {
			if c := &d.st.Conditions[i]; c.Type == typ && c.Status != "Unknown" && !strings.Contains(c.Message, note) {
				c.Message += "; " + note
			}
		}
	}
	d.setNode(failed, func(s *v1beta1.NodeUpgradeStatus) {
		s.Reason = v1beta1.ReasonFirstNodeFailed
		if !strings.Contains(s.Message, "first control-plane node") {
			s.Message += " (" + note + ")"
		}
	})
}
