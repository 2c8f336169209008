// Package planview renders an UpgradePlan's status for the operator, the table kubeadm and
// StarlingX users expect: a header (plan, versions, phase and how long it has run, why it is
// Degraded, its warnings) and one row per node, in the order the nodes are upgraded.
//
// New turns a plan into a Plan, the one document both renderers print: WriteText a kubectl-like
// table, WriteJSON the Plan itself, whose field names are part of the command's interface for
// scripts. Everything relative (ages, elapsed times) is computed against the now handed to New,
// so that the output is a function of its inputs. The package knows only the API types: the
// cluster's nodes, and so the upgrade order, are handed in by the caller.
//
// Report is what `upgrade-repo plan` shows, WriteReport its text; NewTable, Encode and EncodeYAML
// are the one table writer (kubectl's settings) and the one JSON and YAML writers of every
// command.
//
// Imports: api, forecast and policy (the types a report shows) and printable; never the
// sequencer, planctl or the commands.
package planview

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/forecast"
)

// StatePending is the state shown for a node the caller knows of but the plan's status does not
// list yet: the sequencer has not reached it.
const StatePending = "Pending"

// Node is a cluster node as the caller knows it.
type Node struct {
	// Name is the node's name, the key of the plan's nodeUpgradeStatuses.
	Name string
	// KubeletVersion is the version the node's kubelet reports now (status.nodeInfo); empty
	// when unknown.
	KubeletVersion string
	// ISOBytesDone and ISOBytesTotal are the node's download of the plan's ISO as its agent
	// reports it (its RepoNode's status.iso); 0 when unknown.
	ISOBytesDone int64
	// ISOBytesTotal is the ISO's size as the agent reports it.
	ISOBytesTotal int64
}

// Plan is one UpgradePlan as the operator reads it. WriteJSON prints it as it is: its JSON field
// names are stable, and every field is always present (null or empty when unknown).
type Plan struct {
	// Name is the plan's name.
	Name string `json:"name"`
	// Version is the target version (spec.version).
	Version string `json:"version"`
	// PreviousVersion is the version installed when the plan started; empty until the
	// sequencer recorded it.
	PreviousVersion string `json:"previousVersion"`
	// Phase is the plan's phase; empty before the sequencer first saw the plan.
	Phase v1beta1.Phase `json:"phase"`
	// FailedPhase is the phase that failed, once Phase is Failed.
	FailedPhase v1beta1.Phase `json:"failedPhase"`
	// Time is when this view was taken, the now given to New; the elapsed times are counted to
	// it.
	Time time.Time `json:"time"`
	// StartTime is when the plan entered its first phase (its creation when it has none yet).
	StartTime *time.Time `json:"startTime"`
	// PhaseTime is when the plan entered Phase.
	PhaseTime *time.Time `json:"phaseTime"`
	// FinishTime is when the plan entered Succeeded or Failed.
	FinishTime *time.Time `json:"finishTime"`
	// ElapsedSeconds is how long the plan has run: from StartTime to FinishTime, or to Time
	// while it runs.
	ElapsedSeconds int64 `json:"elapsedSeconds"`
	// PhaseElapsedSeconds is how long the plan has been in Phase, to Time.
	PhaseElapsedSeconds int64 `json:"phaseElapsedSeconds"`
	// Degraded says why the plan cannot proceed (or why it failed), while its Degraded
	// condition is True; null otherwise.
	Degraded *Condition `json:"degraded"`
	// Warnings are the plan's warnings (status.warnings).
	Warnings []string `json:"warnings"`
	// Retries counts the times the plan was resumed after it failed.
	Retries int `json:"retries"`
	// Installed is the version the cluster runs as recorded (a Version's Installed condition,
	// else the installed-version ConfigMap); set by the caller, empty when unknown.
	Installed string `json:"installed"`
	// Release is the target release's metadata as the sequencer read it (the CRD's
	// status.releaseMetadata, same field names); null until it was read.
	Release *v1beta1.ReleaseMetadata `json:"release"`
	// Held says what holds the plan's nodes back on purpose (spec.nodeUpgradeOption.pauseNodes)
	// while the plan runs, and what releases them; null when nothing does.
	Held *Hold `json:"held"`
	// SkipNodes are the nodes the plan gives up on (spec.nodeUpgradeOption.skipNodes): it
	// finishes without them, and they stay at their version.
	SkipNodes []string `json:"skipNodes"`
	// OnlyNodes, when not empty, are the only nodes the plan upgrades
	// (spec.nodeUpgradeOption.nodes).
	OnlyNodes []string `json:"onlyNodes"`
	// Nodes are the plan's nodes in upgrade order.
	Nodes []NodeStatus `json:"nodes"`
	// Estimate is when the plan is expected to end; set by the caller for a plan that runs,
	// null otherwise.
	Estimate *Estimate `json:"estimate"`
}

// Estimate is when a running plan is expected to end, and what that rests on.
type Estimate struct {
	// RemainingSeconds is the time left; EndTime is Time plus it.
	RemainingSeconds int64     `json:"remainingSeconds"`
	EndTime          time.Time `json:"endTime"`
	// First is true on the cluster's first plan: nothing recorded to go on but this plan's
	// own rates.
	First bool `json:"first"`
	// Partial is true when some phase left has nothing to go on: RemainingSeconds is then a
	// lower bound.
	Partial bool `json:"partial"`
	// Assumed is true when some phase left rests on an assumption (basis assumed), each
	// phase's assumption said in its Assumption.
	Assumed bool `json:"assumed"`
	// Phases are the phases left, in order.
	Phases []PhaseEstimate `json:"phases"`
	// Nodes are the nodes left and when each is expected to be upgraded.
	Nodes []NodeEstimate `json:"nodes"`
}

// PhaseEstimate is the estimate of one phase left.
type PhaseEstimate struct {
	Phase            string `json:"phase"`
	RemainingSeconds int64  `json:"remainingSeconds"`
	// Basis is what it rests on: rate (this plan's bytes a second, measured), history (the
	// median of the cluster's earlier plans), this plan (its finished node upgrades, measured),
	// assumed (the bytes or nodes known against a stated rate or node time) or unknown (nothing:
	// it counts for nothing in RemainingSeconds).
	Basis string `json:"basis"`
	// Samples is how many earlier plans or node upgrades it rests on.
	Samples int `json:"samples"`
	// BytesLeft and BytesPerSecond are, for a phase estimated from a rate (measured or
	// assumed), the bytes it still moves and that rate over the nodes moving them at once.
	BytesLeft      int64 `json:"bytesLeft"`
	BytesPerSecond int64 `json:"bytesPerSecond"`
	// NodeSeconds is, for NodeUpgrading, how long one node's upgrade is taken to last.
	NodeSeconds int64 `json:"nodeSeconds"`
	// Assumption says what was assumed, for the basis assumed; empty otherwise.
	Assumption string `json:"assumption"`
}

// NodeEstimate is when a node left is expected to be upgraded, from now.
type NodeEstimate struct {
	Node             string `json:"node"`
	RemainingSeconds int64  `json:"remainingSeconds"`
}

// Line says the estimate in one line: the time left, the end, and what each part rests on:
// measured (this plan's rates and finished nodes), from history, assumed (with what was
// assumed), the phases with nothing to do (a few seconds assumed), and the phases with nothing
// to go on, which make the time a lower bound.
func (e *Estimate) Line() string {
	left := (time.Duration(e.RemainingSeconds) * time.Second).String()
	var measured, past, assumed, idle, unknown []string
	for _, ph := range e.Phases {
		switch ph.Basis {
		case "unknown":
			unknown = append(unknown, ph.Phase)
		case "rate":
			measured = append(measured, fmt.Sprintf("%s at %s/s", ph.Phase, forecast.Bytes(ph.BytesPerSecond)))
		case "this plan":
			measured = append(measured, fmt.Sprintf("%s at %s a node", ph.Phase, time.Duration(ph.NodeSeconds)*time.Second))
		case "history":
			past = append(past, ph.Phase)
		case "assumed":
			assumed = append(assumed, fmt.Sprintf("%s (%s)", ph.Phase, ph.Assumption))
		case "nothing to do":
			idle = append(idle, ph.Phase)
		default:
			past = append(past, ph.Phase+" ("+ph.Basis+")")
		}
	}
	near := e.EndTime.UTC().Format("15:04 UTC")
	var parts []string
	switch {
	case e.Partial && e.RemainingSeconds == 0:
		parts = append(parts, "not known yet: nothing to go on for "+strings.Join(unknown, ", "))
		unknown = nil
	case e.Partial:
		parts = append(parts, fmt.Sprintf("in at least %s, near %s at the earliest", left, near))
	default:
		parts = append(parts, fmt.Sprintf("in about %s, near %s", left, near))
	}
	for _, g := range []struct {
		label string
		what  []string
	}{{"measured: ", measured}, {"from history: ", past}, {"assumed: ", assumed}, {"nothing to do: ", idle}, {"nothing to go on yet for ", unknown}} {
		if len(g.what) > 0 {
			parts = append(parts, g.label+strings.Join(g.what, ", "))
		}
	}
	if e.First {
		parts = append(parts, "a first estimate: the cluster recorded no earlier plan")
	}
	return strings.Join(parts, "; ")
}

// Hold is what holds a running plan's nodes back until the operator releases them.
type Hold struct {
	// Nodes are the nodes listed in spec.nodeUpgradeOption.pauseNodes that are not upgraded:
	// the sequencer starts none of them.
	Nodes []string `json:"nodes"`
	// Command is the command that releases them. New sets `upgrade-repo upgrade resume PLAN`;
	// the caller, who knows which nodes were paused by hand, may widen it.
	Command string `json:"command"`
}

// Condition is a condition of the plan that the operator must see.
type Condition struct {
	// Reason is the condition's CamelCase reason.
	Reason string `json:"reason"`
	// Message says what is wrong, for humans.
	Message string `json:"message"`
	// Since is when the condition last changed.
	Since *time.Time `json:"since"`
}

// NodeStatus is one node's row.
type NodeStatus struct {
	// Name is the node's name.
	Name string `json:"name"`
	// State is the node's state in the plan (a v1beta1.NodeState), or StatePending.
	State string `json:"state"`
	// Reason is a CamelCase word for what went wrong or is waited for.
	Reason string `json:"reason"`
	// Message says what happened, for humans, whole.
	Message string `json:"message"`
	// StateTime is when the node entered State.
	StateTime *time.Time `json:"stateTime"`
	// LastProgressTime is when the node last moved.
	LastProgressTime *time.Time `json:"lastProgressTime"`
	// KubeletVersionBefore is the kubelet version the node had when the plan started.
	KubeletVersionBefore string `json:"kubeletVersionBefore"`
	// KubeletVersion is the kubelet version the node reports now, as the plan's status has it;
	// the caller's Node gives it for a node the status does not have yet.
	KubeletVersion string `json:"kubeletVersion"`
	// TargetKubeletVersion is the kubelet version the release brings: the node's status, else
	// the release's Kubernetes version.
	TargetKubeletVersion string `json:"targetKubeletVersion"`
	// ImagesDone and ImagesTotal count the images preloaded on the node.
	ImagesDone int64 `json:"imagesDone"`
	// ImagesTotal is the number of images to preload.
	ImagesTotal int64 `json:"imagesTotal"`
	// BytesDone is how many archive bytes were preloaded.
	BytesDone int64 `json:"bytesDone"`
	// BytesTotal is how many archive bytes there are to preload.
	BytesTotal int64 `json:"bytesTotal"`
	// DownloadBytesDone and DownloadBytesTotal are the node's download of the ISO, as the
	// caller's Node gives it.
	DownloadBytesDone int64 `json:"downloadBytesDone"`
	// DownloadBytesTotal is the ISO's size.
	DownloadBytesTotal int64 `json:"downloadBytesTotal"`
	// PreloadPercent is the share of the preload done, 0 to 100, by bytes when their total is
	// known, else by images; null when there is nothing to count.
	PreloadPercent *int `json:"preloadPercent"`
	// ControlPlane is, for a control-plane node, the versions its static pods run (API
	// server, controller manager, scheduler, etcd); null for the other nodes.
	ControlPlane *v1beta1.ControlPlaneVersions `json:"controlPlane"`
}

// New builds the view of plan at now. nodes gives the upgrade order and the nodes the status
// does not list yet (shown as StatePending); nodes of the status that are not in it follow, by
// name. With no nodes, the rows are the status's nodes by name.
func New(plan *v1beta1.UpgradePlan, nodes []Node, now time.Time) *Plan {
	st := &plan.Status
	p := &Plan{
		Name:            plan.Name,
		Version:         plan.Spec.Version,
		PreviousVersion: st.PreviousVersion,
		Phase:           st.Phase,
		FailedPhase:     st.FailedPhase,
		Time:            now.UTC(),
		Warnings:        append([]string{}, st.Warnings...),
		Retries:         st.Retries,
		Release:         st.ReleaseMetadata,
		Nodes:           []NodeStatus{},
		SkipNodes:       []string{},
		OnlyNodes:       []string{},
	}
	if o := plan.Spec.NodeUpgradeOption; o != nil {
		p.SkipNodes = append(p.SkipNodes, o.SkipNodes...)
		p.OnlyNodes = append(p.OnlyNodes, o.Nodes...)
		var held []string
		for _, n := range o.PauseNodes {
			if st.NodeUpgradeStatuses[n].State != v1beta1.NodeUpgraded && !slices.Contains(o.SkipNodes, n) {
				held = append(held, n)
			}
		}
		if len(held) > 0 && !st.Phase.Finished() {
			p.Held = &Hold{Nodes: held, Command: "upgrade-repo upgrade resume " + plan.Name}
		}
	}
	if ts := st.PhaseTransitionTimestamps; len(ts) > 0 {
		p.StartTime = timeOf(&ts[0].PhaseTransitionTimestamp)
	} else {
		p.StartTime = timeOf(&plan.CreationTimestamp)
	}
	// The last entry of the current phase: a retried plan enters a phase again.
	for i := len(st.PhaseTransitionTimestamps) - 1; i >= 0; i-- {
		if t := st.PhaseTransitionTimestamps[i]; t.Phase == st.Phase {
			p.PhaseTime = timeOf(&t.PhaseTransitionTimestamp)
			break
		}
	}
	if st.Phase.Finished() {
		p.FinishTime = p.PhaseTime
	}
	if p.StartTime != nil {
		end := p.Time
		if p.FinishTime != nil {
			end = *p.FinishTime
		}
		p.ElapsedSeconds = seconds(end.Sub(*p.StartTime))
	}
	if p.PhaseTime != nil {
		p.PhaseElapsedSeconds = seconds(p.Time.Sub(*p.PhaseTime))
	}
	if c := meta.FindStatusCondition(st.Conditions, v1beta1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
		p.Degraded = &Condition{Reason: c.Reason, Message: c.Message, Since: timeOf(&c.LastTransitionTime)}
	}
	targetKubelet := ""
	if st.ReleaseMetadata != nil {
		targetKubelet = st.ReleaseMetadata.Kubernetes
	}
	seen := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		if seen[n.Name] {
			continue
		}
		seen[n.Name] = true
		ns, ok := st.NodeUpgradeStatuses[n.Name]
		row := nodeRow(n.Name, ns, targetKubelet)
		if !ok {
			row.State = StatePending
		}
		if row.KubeletVersion == "" {
			row.KubeletVersion = n.KubeletVersion
		}
		row.DownloadBytesDone, row.DownloadBytesTotal = n.ISOBytesDone, n.ISOBytesTotal
		p.Nodes = append(p.Nodes, row)
	}
	var rest []string
	for name := range st.NodeUpgradeStatuses {
		if !seen[name] {
			rest = append(rest, name)
		}
	}
	slices.Sort(rest)
	for _, name := range rest {
		p.Nodes = append(p.Nodes, nodeRow(name, st.NodeUpgradeStatuses[name], targetKubelet))
	}
	return p
}

func nodeRow(name string, ns v1beta1.NodeUpgradeStatus, targetKubelet string) NodeStatus {
	row := NodeStatus{
		Name:                 name,
		State:                string(ns.State),
		Reason:               ns.Reason,
		Message:              ns.Message,
		StateTime:            timeOf(ns.StateTime),
		LastProgressTime:     timeOf(ns.LastProgressTime),
		KubeletVersionBefore: ns.KubeletVersionBefore,
		KubeletVersion:       ns.KubeletVersion,
		TargetKubeletVersion: ns.TargetKubeletVersion,
		ImagesDone:           ns.ImagesDone,
		ImagesTotal:          ns.ImagesTotal,
		BytesDone:            ns.BytesDone,
		BytesTotal:           ns.BytesTotal,
		ControlPlane:         ns.ControlPlane.DeepCopy(),
	}
	if row.TargetKubeletVersion == "" {
		row.TargetKubeletVersion = targetKubelet
	}
	switch {
	case ns.BytesTotal > 0:
		row.PreloadPercent = percent(ns.BytesDone, ns.BytesTotal)
	case ns.ImagesTotal > 0:
		row.PreloadPercent = percent(ns.ImagesDone, ns.ImagesTotal)
	}
	return row
}

// percent rounds down, so that 100 means done.
func percent(done, total int64) *int {
	v := int(min(max(done, 0), total) * 100 / total)
	return &v
}

// Pick returns the plan an operator asking for "the" plan means: the newest one that is not
// finished, else the newest one; nil when there is none. Newest is by creation time, then by
// name.
func Pick(plans []v1beta1.UpgradePlan) *v1beta1.UpgradePlan {
	var best *v1beta1.UpgradePlan
	for i := range plans {
		c := &plans[i]
		if best == nil {
			best = c
			continue
		}
		cRuns, bestRuns := !c.Status.Phase.Finished(), !best.Status.Phase.Finished()
		switch {
		case cRuns != bestRuns:
			if cRuns {
				best = c
			}
		case newer(c, best):
			best = c
		}
	}
	return best
}

func newer(a, b *v1beta1.UpgradePlan) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return b.CreationTimestamp.Before(&a.CreationTimestamp)
	}
	return strings.Compare(a.Name, b.Name) > 0
}

func timeOf(t *metav1.Time) *time.Time {
	if t == nil || t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func seconds(d time.Duration) int64 {
	return int64(max(d, 0) / time.Second)
}
