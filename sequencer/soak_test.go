package sequencer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

const prevChecksum = "sha512:0ddba11d0ddba11d0ddba11d0ddba11d0ddba11d0ddba11d0ddba11d0ddba11d0ddba11d0ddba11d0ddba11d0ddba11d0ddba11d0ddba11d0ddba11d0ddba11d"

// prevVersion is the Version of v1.5.2, the release the test plans upgrade from.
func prevVersion() *v1beta1.Version {
	return &v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: "v1.5.2"}, Spec: v1beta1.VersionSpec{ISOURL: "http://o/v1.5.2.iso", ISOChecksum: prevChecksum}}
}

// soakingPlan is a Succeeded plan whose soak started an hour ago and ends in until.
func soakingPlan(until time.Duration, mut ...func(*sequencer.Observation)) sequencer.Observation {
	return obs(v1beta1.PhaseSucceeded, append([]func(*sequencer.Observation){func(o *sequencer.Observation) {
		o.Plan.Status.Agents.Hold = false
		o.Plan.Status.Soak = &v1beta1.SoakStatus{PreviousVersion: "v1.5.2", ISOURL: "http://o/v1.5.2.iso", ISOChecksum: prevChecksum,
			Started: metav1.NewTime(decideNow.Add(-time.Hour)), Until: metav1.NewTime(decideNow.Add(until))}
	}}, mut...)...)
}

func TestDecideSoak(t *testing.T) {
	t.Parallel()
	soak := func(d time.Duration) func(*sequencer.Observation) {
		return func(o *sequencer.Observation) { o.Plan.Spec.Soak = &metav1.Duration{Duration: d} }
	}
	withPrev := func(o *sequencer.Observation) { o.PreviousVersion = prevVersion() }
	finalize := func(o *sequencer.Observation) {
		o.Plan.Annotations = map[string]string{v1beta1.FinalizeAnnotation: "2026-03-01T12:00:00Z"}
	}
	rollback := func(phase v1beta1.Phase) func(*sequencer.Observation) {
		return func(o *sequencer.Observation) { o.Rollbacks = []sequencer.RollbackState{{Name: "back", Phase: phase}} }
	}
	tests := []struct {
		name string
		o    sequencer.Observation
		// want is the soak's record after the decision; nil for none.
		wantReason string
		wantNone   bool
		wantKept   bool
		wantUntil  time.Time
		// window is whether the decision records the rollback window on the Version (true),
		// clears it (false with clear), or does nothing with it.
		window, clear bool
		requeue       time.Duration
	}{
		{name: "CleaningUp starts the default soak", o: obs(v1beta1.PhaseCleaningUp, withPrev),
			wantKept: true, wantUntil: decideNow.Add(v1beta1.DefaultSoak), window: true},
		{name: "CleaningUp starts spec.soak", o: obs(v1beta1.PhaseCleaningUp, withPrev, soak(2*time.Hour)),
			wantKept: true, wantUntil: decideNow.Add(2 * time.Hour), window: true},
		{name: "soak 0 is today's behaviour: nothing recorded", o: obs(v1beta1.PhaseCleaningUp, withPrev, soak(0)), wantNone: true},
		{name: "no Version of the previous release: nothing kept, said", o: obs(v1beta1.PhaseCleaningUp),
			wantReason: v1beta1.SoakNothingKept},
		{name: "a rollback keeps nothing", o: obs(v1beta1.PhaseCleaningUp, withPrev, func(o *sequencer.Observation) {
			o.Plan.Spec.Rollback = &v1beta1.RollbackSpec{Plan: "up-0"}
		}), wantReason: v1beta1.SoakNothingKept},
		{name: "a recorded soak is not restarted", o: obs(v1beta1.PhaseCleaningUp, withPrev, func(o *sequencer.Observation) {
			o.Plan.Status.Soak = &v1beta1.SoakStatus{PreviousVersion: "v1.5.2", ISOChecksum: prevChecksum, Until: metav1.NewTime(decideNow.Add(time.Minute))}
		}), wantKept: true, wantUntil: decideNow.Add(time.Minute)},
		{name: "soaking: the window recorded, looked at again within a minute", o: soakingPlan(3 * time.Hour),
			wantKept: true, wantUntil: decideNow.Add(3 * time.Hour), window: true, requeue: time.Minute},
		{name: "soaking: looked at again at its end", o: soakingPlan(20 * time.Second),
			wantKept: true, wantUntil: decideNow.Add(20 * time.Second), window: true, requeue: 20 * time.Second},
		{name: "the soak expires at its end", o: soakingPlan(0), wantReason: v1beta1.SoakExpired, clear: true},
		{name: "the soak expires past its end", o: soakingPlan(-time.Hour), wantReason: v1beta1.SoakExpired, clear: true},
		{name: "finalize ends it before its end", o: soakingPlan(3*time.Hour, finalize), wantReason: v1beta1.SoakFinalized, clear: true},
		{name: "a rollback that Succeeded ends it", o: soakingPlan(3*time.Hour, rollback(v1beta1.PhaseSucceeded)), wantReason: v1beta1.SoakRolledBack, clear: true},
		{name: "a rollback in flight holds it past its end", o: soakingPlan(-time.Minute, rollback(v1beta1.PhaseNodeUpgrading)),
			wantKept: true, wantUntil: decideNow.Add(-time.Minute), requeue: decideCfg.Poll},
		{name: "a rollback in flight holds finalize", o: soakingPlan(time.Hour, finalize, rollback(v1beta1.PhaseInitializing)),
			wantKept: true, wantUntil: decideNow.Add(time.Hour), requeue: decideCfg.Poll},
		{name: "a Failed rollback does not hold it", o: soakingPlan(-time.Minute, rollback(v1beta1.PhaseFailed)), wantReason: v1beta1.SoakExpired, clear: true},
		{name: "an ended soak stays ended", o: soakingPlan(-time.Hour, func(o *sequencer.Observation) {
			o.Plan.Status.Soak.Ended, o.Plan.Status.Soak.EndReason, o.Plan.Status.Soak.Message = since(time.Minute), v1beta1.SoakFinalized, "finalized"
		}), wantReason: v1beta1.SoakFinalized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := sequencer.Decide(decideCfg, tt.o)
			s := d.Status.Soak
			if tt.wantNone {
				require.Nil(t, s)
				return
			}
			require.NotNil(t, s)
			if tt.wantKept {
				require.Nil(t, s.Ended, s.Message)
				require.Equal(t, "v1.5.2", s.PreviousVersion)
				require.Equal(t, prevChecksum, s.ISOChecksum)
				require.True(t, s.Until.Time.Equal(tt.wantUntil), "until %s", s.Until)
				require.True(t, sequencer.SoakOn(&v1beta1.UpgradePlan{Status: d.Status}))
			} else {
				require.NotNil(t, s.Ended)
				require.Equal(t, tt.wantReason, s.EndReason)
				require.NotEmpty(t, s.Message)
				require.False(t, sequencer.SoakOn(&v1beta1.UpgradePlan{Status: d.Status}))
			}
			var windows []sequencer.Action
			for _, a := range d.Actions {
				if a.Kind == sequencer.ActionRecordRollbackWindow {
					windows = append(windows, a)
				}
			}
			switch {
			case tt.window:
				require.Len(t, windows, 1)
				require.Equal(t, &v1beta1.VersionRollback{To: "v1.5.2", Until: s.Until, Plan: "up"}, windows[0].Window)
			case tt.clear:
				require.Len(t, windows, 1)
				require.Nil(t, windows[0].Window)
			default:
				require.Empty(t, windows)
			}
			if tt.requeue > 0 {
				require.Equal(t, tt.requeue, d.RequeueAfter)
			}
		})
	}
}

func TestRollbackUntil(t *testing.T) {
	t.Parallel()
	p := soakingPlan(time.Hour).Plan
	until, ok := sequencer.RollbackUntil(p, decideNow)
	require.True(t, ok)
	require.True(t, until.Equal(decideNow.Add(time.Hour)))
	_, ok = sequencer.RollbackUntil(p, decideNow.Add(2*time.Hour))
	require.False(t, ok, "past its end")
	p.Status.Soak.Ended = since(0)
	_, ok = sequencer.RollbackUntil(p, decideNow)
	require.False(t, ok, "ended")
}

// TestReconcileSoakThenFinalize runs a plan to Succeeded with a soak, through sequencer
// restarts: the soak is recorded in the status and on the Version, survives a restart, and ends
// when the operator finalizes the plan.
func TestReconcileSoakThenFinalize(t *testing.T) {
	t.Parallel()
	prev := prevVersion()
	k := newCluster(t, newPlan("up", func(p *v1beta1.UpgradePlan) { p.Spec.Soak = &metav1.Duration{Duration: time.Hour} }), prev)
	p := k.run("up", 300, "", 2, 2, nil)
	require.Equal(t, v1beta1.PhaseSucceeded, p.Status.Phase)
	s := p.Status.Soak
	require.NotNil(t, s)
	require.Nil(t, s.Ended)
	require.Equal(t, prevChecksum, s.ISOChecksum)
	require.False(t, p.Status.Agents.Hold, "the new release's ISO is released as before")

	var v v1beta1.Version
	require.NoError(t, k.c.Get(t.Context(), client.ObjectKey{Name: "v1.6.0"}, &v))
	require.NotNil(t, v.Status.Rollback)
	require.Equal(t, "v1.5.2", v.Status.Rollback.To)
	require.True(t, v.Status.Rollback.Until.Equal(&s.Until))

	// A restarted sequencer looks at the soaking plan again, and keeps it.
	res := k.reconcile("up")
	require.Positive(t, res.RequeueAfter)
	require.Nil(t, k.plan("up").Status.Soak.Ended)

	p = k.plan("up")
	p.Annotations = map[string]string{v1beta1.FinalizeAnnotation: "now"}
	require.NoError(t, k.c.Update(t.Context(), p))
	k.reconcile("up")
	s = k.plan("up").Status.Soak
	require.NotNil(t, s.Ended)
	require.Equal(t, v1beta1.SoakFinalized, s.EndReason)
	require.NoError(t, k.c.Get(t.Context(), client.ObjectKey{Name: "v1.6.0"}, &v))
	require.Nil(t, v.Status.Rollback)
	// Once ended, a finished plan is left alone.
	require.Zero(t, k.reconcile("up"))
}
