package sequencer

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// TestTimesEqualKnowsEveryField: timesEqual names each field of NodeTimes; one added there must
// be added to it.
func TestTimesEqualKnowsEveryField(t *testing.T) {
	t.Parallel()
	require.Equal(t, 7, reflect.TypeFor[v1beta1.NodeTimes]().NumField(), "a field was added to NodeTimes: compare it in timesEqual")
}

// TestRowsEqual: rowsEqual agrees with equality.Semantic.DeepEqual, whose cost it saves.
func TestRowsEqual(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	tm := func(d time.Duration) *metav1.Time { v := metav1.NewTime(at.Add(d)); return &v }
	mt := func(d time.Duration) *metav1.MicroTime { v := metav1.NewMicroTime(at.Add(d)); return &v }
	base := v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgrading, Reason: "r", Message: "m", StateTime: tm(0), KubeletVersion: "v1.33.0",
		ControlPlane: &v1beta1.ControlPlaneVersions{APIServer: "a"}, Times: &v1beta1.NodeTimes{Cordoned: mt(0), JobCreated: mt(time.Second)}}
	tests := []struct {
		name   string
		change func(s *v1beta1.NodeUpgradeStatus)
	}{
		{name: "same", change: func(*v1beta1.NodeUpgradeStatus) {}},
		{name: "same times, other pointers", change: func(s *v1beta1.NodeUpgradeStatus) {
			s.StateTime, s.Times = tm(0), &v1beta1.NodeTimes{Cordoned: mt(0), JobCreated: mt(time.Second)}
		}},
		{name: "state", change: func(s *v1beta1.NodeUpgradeStatus) { s.State = v1beta1.NodeRejoining }},
		{name: "message", change: func(s *v1beta1.NodeUpgradeStatus) { s.Message = "" }},
		{name: "state time", change: func(s *v1beta1.NodeUpgradeStatus) { s.StateTime = tm(time.Second) }},
		{name: "state time gone", change: func(s *v1beta1.NodeUpgradeStatus) { s.StateTime = nil }},
		{name: "progress time", change: func(s *v1beta1.NodeUpgradeStatus) { s.LastProgressTime = tm(0) }},
		{name: "a node time", change: func(s *v1beta1.NodeUpgradeStatus) {
			s.Times = &v1beta1.NodeTimes{Cordoned: mt(0), JobCreated: mt(time.Second), Upgraded: mt(time.Minute)}
		}},
		{name: "times gone", change: func(s *v1beta1.NodeUpgradeStatus) { s.Times = nil }},
		{name: "control plane", change: func(s *v1beta1.NodeUpgradeStatus) { s.ControlPlane = &v1beta1.ControlPlaneVersions{APIServer: "b"} }},
		{name: "control plane gone", change: func(s *v1beta1.NodeUpgradeStatus) { s.ControlPlane = nil }},
		{name: "images", change: func(s *v1beta1.NodeUpgradeStatus) { s.ImagesDone = 3 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := *base.DeepCopy()
			tt.change(&b)
			require.Equal(t, equality.Semantic.DeepEqual(base, b), rowsEqual(base, b))
			require.Equal(t, equality.Semantic.DeepEqual(base, b), rowsEqual(b, base))
		})
	}
}
