package sequencer_test

import (
	"fmt"
	"testing"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// BenchmarkDecideNodeUpgrading decides a reconcile of NodeUpgrading over a thousand workers in
// fifty zones, concurrency 25, with a slot free and every waiting node in a zone in flight: the
// reconcile that looks at every node waiting, which bench-nodes makes often.
func BenchmarkDecideNodeUpgrading(b *testing.B) {
	o := obs(v1beta1.PhaseNodeUpgrading, func(o *sequencer.Observation) {
		o.Nodes = o.Nodes[:2]
		states := map[string]v1beta1.NodeState{"cp-1": v1beta1.NodeUpgraded, "cp-2": v1beta1.NodeUpgraded}
		for i := range 1000 {
			n := sequencer.NodeInfo{Name: fmt.Sprintf("w-%04d", i), Ready: true, Zone: fmt.Sprintf("z-%02d", i%50)}
			o.Nodes = append(o.Nodes, n)
			o.RepoNodes[n.Name] = o.RepoNodes["cp-1"]
			switch {
			case i < 24:
				states[n.Name] = v1beta1.NodeUpgrading
				o.NodeJobs[n.Name] = sequencer.JobState{Exists: true}
			case i%50 < 24:
				states[n.Name] = v1beta1.NodeUpgradePending
			default:
				states[n.Name] = v1beta1.NodeUpgraded
			}
		}
		nodeStates(o, states)
		o.Plan.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{Concurrency: 25}
	})
	for b.Loop() {
		sequencer.Decide(decideCfg, o)
	}
}
