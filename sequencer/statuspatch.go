package sequencer

import (
	"context"
	"encoding/json"
	"fmt"

	jsonpatch "github.com/evanphx/json-patch/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// StatusPatch returns the JSON merge patch (RFC 7386) of an UpgradePlan that takes its status
// from from to to, or nil when the two do not differ. The patch names resourceVersion rv, so that
// the API server refuses it (409 Conflict) when the plan changed since from was read, as an update
// of the whole status would be refused.
//
// The patch holds only what changed: the fields of the status but its node rows that differ, and
// of nodeUpgradeStatuses only the rows that differ, each as the merge patch of its own fields (a
// row gone is null). A plan's status holds a row per node, half a megabyte at a thousand nodes,
// of which a reconcile changes a few: writing it whole at every change made the API server
// decode, validate and store, and the sequencer encode, that much each time.
func StatusPatch(rv string, from, to *v1beta1.UpgradePlanStatus) ([]byte, error) {
	a, b := *from, *to
	a.NodeUpgradeStatuses, b.NodeUpgradeStatuses = nil, nil
	rest, err := mergePatch(a, b)
	if err != nil {
		return nil, err
	}
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(rest, &fields); err != nil {
		return nil, fmt.Errorf("status patch: %w", err)
	}
	rows := map[string]json.RawMessage{}
	for name, row := range to.NodeUpgradeStatuses {
		old, ok := from.NodeUpgradeStatuses[name]
		if ok && rowsEqual(old, row) {
			continue
		}
		var p []byte
		if ok {
			p, err = mergePatch(old, row)
		} else {
			p, err = json.Marshal(row)
		}
		if err != nil {
			return nil, fmt.Errorf("status patch of node %s: %w", name, err)
		}
		if string(p) != "{}" || !ok {
			rows[name] = p
		}
	}
	for name := range from.NodeUpgradeStatuses {
		if _, ok := to.NodeUpgradeStatuses[name]; !ok {
			rows[name] = json.RawMessage("null")
		}
	}
	switch {
	case len(to.NodeUpgradeStatuses) == 0 && len(from.NodeUpgradeStatuses) > 0:
		fields["nodeUpgradeStatuses"] = json.RawMessage("null")
	case len(rows) > 0:
		b, err := json.Marshal(rows)
		if err != nil {
			return nil, fmt.Errorf("status patch: %w", err)
		}
		fields["nodeUpgradeStatuses"] = b
	}
	if len(fields) == 0 {
		return nil, nil
	}
	type meta struct {
		ResourceVersion string `json:"resourceVersion"`
	}
	out, err := json.Marshal(struct {
		Metadata meta                       `json:"metadata"`
		Status   map[string]json.RawMessage `json:"status"`
	}{meta{rv}, fields})
	if err != nil {
		return nil, fmt.Errorf("status patch: %w", err)
	}
	return out, nil
}

// rowsEqual reports whether node rows a and b say the same, as equality.Semantic.DeepEqual would
// but at a fraction of its cost: a reconcile compares every row of the plan. The pointer fields
// are compared by what they point to, and then cleared so that the rest compares with ==: a field
// added to NodeUpgradeStatus that == cannot compare fails to build here, and a pointer field
// added and not named here compares by address, which writes a row that did not change, never
// misses one that did.
func rowsEqual(a, b v1beta1.NodeUpgradeStatus) bool {
	if !a.StateTime.Equal(b.StateTime) || !a.UpgradeStartTime.Equal(b.UpgradeStartTime) ||
		!a.LastProgressTime.Equal(b.LastProgressTime) || !timesEqual(a.Times, b.Times) {
		return false
	}
	if (a.ControlPlane == nil) != (b.ControlPlane == nil) || (a.ControlPlane != nil && *a.ControlPlane != *b.ControlPlane) {
		return false
	}
	a.StateTime, a.UpgradeStartTime, a.LastProgressTime, a.Times, a.ControlPlane = nil, nil, nil, nil, nil
	b.StateTime, b.UpgradeStartTime, b.LastProgressTime, b.Times, b.ControlPlane = nil, nil, nil, nil, nil
	return a == b
}

// timesEqual reports whether a and b hold the same times (TestTimesEqualKnowsEveryField keeps
// it in step with NodeTimes).
func timesEqual(a, b *v1beta1.NodeTimes) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Cordoned.Equal(b.Cordoned) && a.DrainStarted.Equal(b.DrainStarted) && a.JobCreated.Equal(b.JobCreated) &&
		a.StepStarted.Equal(b.StepStarted) && a.StepCompleted.Equal(b.StepCompleted) && a.StepSeen.Equal(b.StepSeen) &&
		a.Upgraded.Equal(b.Upgraded)
}

// mergePatch returns the merge patch from a to b, both marshalled to JSON.
func mergePatch(a, b any) ([]byte, error) {
	ja, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	jb, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	return jsonpatch.CreateMergePatch(ja, jb)
}

// patchStatus writes status to as plan's, from the status plan holds, as StatusPatch's patch;
// it writes nothing and returns false when the two do not differ. It asks for the plan's
// metadata back, not the plan, whose whole status the sequencer would decode for nothing: the
// cache receives the new plan through its watch. An error that apierrors.IsConflict reports
// means the plan changed since it was read.
func (r *Reconciler) patchStatus(ctx context.Context, plan *v1beta1.UpgradePlan, to *v1beta1.UpgradePlanStatus) (bool, error) {
	p, err := StatusPatch(plan.ResourceVersion, &plan.Status, to)
	if err != nil || p == nil {
		return false, err
	}
	m := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "UpgradePlan"},
		ObjectMeta: metav1.ObjectMeta{Name: plan.Name, Namespace: plan.Namespace},
	}
	if err := r.c.Status().Patch(ctx, m, client.RawPatch(types.MergePatchType, p)); err != nil {
		return false, err
	}
	r.written.Store(plan.Name, writtenStatus{from: plan.ResourceVersion, to: m.ResourceVersion})
	return true, nil
}

// writtenStatus is the last status write of a plan: the resourceVersion it was written over and
// the one it made.
type writtenStatus struct{ from, to string }

// staleRead reports whether plan, as read from the cache, predates the Reconciler's own last
// write of its status: the cache has not yet seen that write, whose watch event queues the plan
// again. Deciding on such a read would only be refused (409 Conflict) after acting on it.
func (r *Reconciler) staleRead(plan *v1beta1.UpgradePlan) bool {
	v, ok := r.written.Load(plan.Name)
	if !ok {
		return false
	}
	w := v.(writtenStatus)
	if plan.ResourceVersion == w.from && w.from != w.to {
		return true
	}
	r.written.Delete(plan.Name)
	return false
}
