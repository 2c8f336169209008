package sequencer

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestWithEffects(t *testing.T) {
	t.Parallel()
	nodes := []NodeInfo{{Name: "a"}, {Name: "b", Unschedulable: true}}
	tests := []struct {
		name        string
		actions     []Action
		wantChanged bool
		wantCordon  map[string]bool
		wantJobs    []string
	}{
		{name: "nothing applied", wantCordon: map[string]bool{"a": false, "b": true}},
		{name: "a cordon", actions: []Action{{Kind: ActionCordon, Node: "a"}}, wantChanged: true, wantCordon: map[string]bool{"a": true, "b": true}},
		{name: "an uncordon", actions: []Action{{Kind: ActionUncordon, Node: "b"}}, wantChanged: true, wantCordon: map[string]bool{"a": false, "b": false}},
		{name: "a cordon the observation showed already", actions: []Action{{Kind: ActionCordon, Node: "b"}}, wantCordon: map[string]bool{"a": false, "b": true}},
		{name: "a Job created", actions: []Action{{Kind: ActionCreateNodeJob, Node: "a"}}, wantChanged: true, wantCordon: map[string]bool{"a": false, "b": true}, wantJobs: []string{"a"}},
		{name: "a drain: its effect is not known", actions: []Action{{Kind: ActionDrain, Node: "a"}}, wantCordon: map[string]bool{"a": false, "b": true}},
		{name: "a node not observed", actions: []Action{{Kind: ActionCordon, Node: "z"}}, wantCordon: map[string]bool{"a": false, "b": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := Observation{Nodes: nodes, NodeJobs: map[string]JobState{"b": {Exists: true, Succeeded: true}}}
			got, changed := withEffects(o, Decision{Actions: tt.actions})
			assert.Equal(t, tt.wantChanged, changed)
			for _, n := range got.Nodes {
				assert.Equal(t, tt.wantCordon[n.Name], n.Unschedulable, "node %s", n.Name)
			}
			for _, j := range tt.wantJobs {
				assert.True(t, got.NodeJobs[j].Exists, "job of %s", j)
			}
			assert.True(t, got.NodeJobs["b"].Succeeded, "the Jobs observed are kept")
			// The observation given is not changed.
			assert.Equal(t, []NodeInfo{{Name: "a"}, {Name: "b", Unschedulable: true}}, nodes)
			assert.Len(t, o.NodeJobs, 1)
		})
	}
}

func TestMergeEvents(t *testing.T) {
	t.Parallel()
	a := []Event{{Reason: "NodeStepped", Message: "x"}}
	b := []Event{{Reason: "NodeStepped", Message: "x"}, {Reason: "NodeRejoined", Message: "y"}}
	assert.Equal(t, []Event{{Reason: "NodeStepped", Message: "x"}, {Reason: "NodeRejoined", Message: "y"}}, mergeEvents(a, b))
}
