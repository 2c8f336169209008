package report_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer/report"
)

func TestDecideKeepAndCleanFor(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ended := metav1.NewTime(at)
	plan := func(name string, age int, phase v1beta1.Phase, soak *v1beta1.SoakStatus) v1beta1.UpgradePlan {
		return v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(at.Add(time.Duration(age) * time.Hour))},
			Spec: v1beta1.UpgradePlanSpec{Version: name}, Status: v1beta1.UpgradePlanStatus{Phase: phase, Soak: soak}}
	}
	soaking := &v1beta1.SoakStatus{PreviousVersion: "v1.34.3", ISOURL: "http://o/3.iso", ISOChecksum: "c3"}
	endedBy := func(reason string) *v1beta1.SoakStatus {
		s := *soaking
		s.Ended, s.EndReason = &ended, reason
		return &s
	}
	kept := []report.Kept{{Release: "v1.34.3", ISOURL: "http://o/3.iso", ISOChecksum: "c3"}}
	tests := []struct {
		name     string
		plans    []v1beta1.UpgradePlan
		keep     []report.Kept
		cleanFor string
	}{
		{name: "no plans"},
		{name: "soaking keeps the previous release", plans: []v1beta1.UpgradePlan{plan("v1.34.4", 1, v1beta1.PhaseSucceeded, soaking)}, keep: kept},
		{name: "expired: clean up for the running release", plans: []v1beta1.UpgradePlan{plan("v1.34.4", 1, v1beta1.PhaseSucceeded, endedBy(v1beta1.SoakExpired))}, cleanFor: "v1.34.4"},
		{name: "finalized: clean up", plans: []v1beta1.UpgradePlan{plan("v1.34.4", 1, v1beta1.PhaseSucceeded, endedBy(v1beta1.SoakFinalized))}, cleanFor: "v1.34.4"},
		{name: "rolled back: the rollback's own drop cleaned up", plans: []v1beta1.UpgradePlan{
			plan("v1.34.4", 1, v1beta1.PhaseSucceeded, endedBy(v1beta1.SoakRolledBack)), plan("v1.34.3", 2, v1beta1.PhaseSucceeded, nil)}},
		{name: "no soak (0): nothing deferred", plans: []v1beta1.UpgradePlan{plan("v1.34.4", 1, v1beta1.PhaseSucceeded, nil)}},
		{name: "a plan in flight defers the cleanup", plans: []v1beta1.UpgradePlan{
			plan("v1.34.4", 1, v1beta1.PhaseSucceeded, endedBy(v1beta1.SoakExpired)), plan("v1.34.5", 2, v1beta1.PhaseImagePreloading, nil)}},
		{name: "a rollback in flight keeps", plans: []v1beta1.UpgradePlan{
			plan("v1.34.4", 1, v1beta1.PhaseSucceeded, soaking), plan("back", 2, v1beta1.PhaseNodeUpgrading, nil)}, keep: kept},
		{name: "only the newest plan's end counts", plans: []v1beta1.UpgradePlan{
			plan("v1.34.4", 1, v1beta1.PhaseSucceeded, endedBy(v1beta1.SoakExpired)), plan("v1.34.5", 2, v1beta1.PhaseSucceeded, nil)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := report.Decide(tt.plans, "n1")
			require.Equal(t, tt.keep, in.Keep)
			require.Equal(t, tt.cleanFor, in.CleanFor)
		})
	}
}
