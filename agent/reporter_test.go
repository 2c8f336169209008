package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer/report"
)

// recorder is a StatusWriter that keeps what it is asked to write, or fails with err.
type recorder struct {
	mu     sync.Mutex
	writes []v1beta1.RepoNodeStatus
	err    error
}

func (r *recorder) Write(_ context.Context, st v1beta1.RepoNodeStatus) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	r.writes = append(r.writes, st)
	return nil
}

// The report is written on every change of state at once, and otherwise once an interval: a
// change of progress alone waits for the heartbeat.
func TestReporterWritesOnChangeAndHeartbeat(t *testing.T) {
	t.Parallel()
	hex := strings.Repeat("ab", 64)
	w := &recorder{}
	b := NewBoard("n1", nil)
	plans := newInstructions()
	plans.set(report.Instruction{Plan: "up", ISOChecksum: "sha512:" + hex, Held: []string{"sha512:" + hex}})
	r := &reporter{w: w, board: b, plans: plans, url: "http://n1/", cacheDir: t.TempDir(), interval: 10 * time.Second}
	t0 := time.Unix(1000, 0)

	require.NoError(t, r.once(t.Context(), t0))
	require.Len(t, w.writes, 1, "the first report")
	require.Positive(t, w.writes[0].Cache.TotalBytes)

	b.update(func(s *Status) { s.ISO = ISOStatus{SHA512: hex, State: ISOFetching} })
	require.NoError(t, r.once(t.Context(), t0.Add(time.Second)))
	require.Len(t, w.writes, 2, "a change of state goes out at once")
	require.Equal(t, "sha512:"+hex, w.writes[1].ISO.Checksum, "the checksum as the plan writes it")

	b.update(func(s *Status) { s.ISO.Held = 100 })
	require.NoError(t, r.once(t.Context(), t0.Add(2*time.Second)))
	require.Len(t, w.writes, 2, "progress alone waits for the heartbeat")
	require.NoError(t, r.once(t.Context(), t0.Add(11*time.Second)))
	require.Len(t, w.writes, 3)
	require.EqualValues(t, 100, w.writes[2].ISO.BytesDone)

	w.err = errors.New("the API server is away")
	b.update(func(s *Status) { s.ISO.State = ISOVerified })
	require.ErrorIs(t, r.once(t.Context(), t0.Add(12*time.Second)), w.err)
	w.err = nil
	require.NoError(t, r.once(t.Context(), t0.Add(13*time.Second)))
	require.Len(t, w.writes, 4, "a failed write is written again")
	require.Equal(t, v1beta1.ISOReady, w.writes[3].ISO.State)
}

func TestSameState(t *testing.T) {
	t.Parallel()
	base := v1beta1.RepoNodeStatus{ISO: v1beta1.RepoNodeISO{Checksum: "ab", State: v1beta1.ISODownloading, BytesDone: 1}}
	tests := []struct {
		name   string
		change func(*v1beta1.RepoNodeStatus)
		same   bool
	}{
		{name: "bytes", change: func(s *v1beta1.RepoNodeStatus) { s.ISO.BytesDone = 2 }, same: true},
		{name: "cache", change: func(s *v1beta1.RepoNodeStatus) { s.Cache.FreeBytes = 2 }, same: true},
		{name: "ISO state", change: func(s *v1beta1.RepoNodeStatus) { s.ISO.State = v1beta1.ISOReady }, same: false},
		{name: "repo", change: func(s *v1beta1.RepoNodeStatus) { s.Repo.Ready = true }, same: false},
		{name: "preload reason", change: func(s *v1beta1.RepoNodeStatus) { s.Preload.Reason = "X" }, same: false},
		{name: "step reported", change: func(s *v1beta1.RepoNodeStatus) {
			s.Step = &v1beta1.RepoNodeStep{Plan: "up", Stage: v1beta1.StageOSUpgrading}
		}, same: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			other := base
			tc.change(&other)
			require.Equal(t, tc.same, sameState(base, other))
		})
	}
}

func TestCacheUsage(t *testing.T) {
	t.Parallel()
	require.Equal(t, v1beta1.RepoNodeCache{}, fsUsage(""))
	missing := t.TempDir() + "/missing"
	require.Equal(t, v1beta1.RepoNodeCache{Path: missing}, fsUsage(missing))
	dir := t.TempDir()
	c := fsUsage(dir)
	require.Positive(t, c.TotalBytes)
	require.LessOrEqual(t, c.FreeBytes, c.TotalBytes)
	require.NotEmpty(t, c.FilesystemID)
	require.Equal(t, c.FilesystemID, fsUsage(dir+"/..").FilesystemID, "two directories of one file system")
}

// A step report reaches the RepoNode at the next report, not at the heartbeat, replaces the one
// before, is read back by a restarted agent, and is dropped once the plans the agent follows name
// another plan or none.
func TestReporterWritesStepReports(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local) // as metav1.Time reads it back
	step := func(plan string, stage v1beta1.StepStage, msg string, at time.Time) *v1beta1.RepoNodeStep {
		return &v1beta1.RepoNodeStep{Plan: plan, Stage: stage, Message: msg, Time: metav1.NewTime(at)}
	}
	tests := []struct {
		name string
		// stored is the step report the RepoNode carries before the agent starts.
		stored *v1beta1.RepoNodeStep
		// posts are POST /v1/step bodies, the i-th at t0+i+1 s, each followed by a report.
		posts []string
		// follow is the plan the agent follows at the last report, at t0+10 s.
		follow string
		want   *v1beta1.RepoNodeStep
	}{
		{
			name:   "a report reaches the RepoNode",
			posts:  []string{`{"plan":"up","stage":"KubernetesUpgrading","message":"kubeadm upgrade node"}`},
			follow: "up",
			want:   step("up", v1beta1.StageKubernetesUpgrading, "kubeadm upgrade node", t0.Add(time.Second)),
		},
		{
			name: "a new report replaces the last",
			posts: []string{
				`{"plan":"up","stage":"KubernetesUpgrading"}`,
				`{"plan":"up","stage":"KubernetesUpgraded","message":"kubelet v1.33.1"}`,
			},
			follow: "up",
			want:   step("up", v1beta1.StageKubernetesUpgraded, "kubelet v1.33.1", t0.Add(2*time.Second)),
		},
		{
			name:   "another plan followed: dropped",
			posts:  []string{`{"plan":"up","stage":"OSUpgraded"}`},
			follow: "next",
		},
		{
			name:   "no plan followed: dropped",
			posts:  []string{`{"plan":"up","stage":"OSUpgraded"}`},
			follow: "",
		},
		{
			name:   "a restarted agent keeps its plan's report",
			stored: step("up", v1beta1.StageOSUpgrading, "rebooting", t0.Add(-time.Minute)),
			follow: "up",
			want:   step("up", v1beta1.StageOSUpgrading, "rebooting", t0.Add(-time.Minute)),
		},
		{
			name:   "a restarted agent drops another plan's report",
			stored: step("old", v1beta1.StageOSUpgraded, "", t0.Add(-time.Hour)),
			follow: "up",
		},
		{
			name:   "a report after a restart replaces the stored one",
			stored: step("up", v1beta1.StageOSUpgrading, "rebooting", t0.Add(-time.Minute)),
			posts:  []string{`{"plan":"up","stage":"OSUpgraded"}`},
			follow: "up",
			want:   step("up", v1beta1.StageOSUpgraded, "", t0.Add(time.Second)),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := runtime.NewScheme()
			require.NoError(t, v1beta1.AddToScheme(s))
			cb := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&v1beta1.RepoNode{})
			if tc.stored != nil {
				cb = cb.WithObjects(&v1beta1.RepoNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1beta1.RepoNodeStatus{Step: tc.stored}})
			}
			c := cb.Build()
			w, err := report.NewWriter(c, "n1")
			require.NoError(t, err)
			b := NewBoard("n1", nil)
			plans := newInstructions()
			plans.set(report.Instruction{Plan: "up"})
			// A heartbeat far away: every write below is one of a change.
			r := &reporter{w: w, board: b, plans: plans, url: "http://n1/", interval: time.Hour}
			require.NoError(t, r.once(t.Context(), t0))

			for i, body := range tc.posts {
				at := t0.Add(time.Duration(i+1) * time.Second)
				rec := httptest.NewRecorder()
				newStepHandler(b, at).ServeHTTP(rec, stepRequest(http.MethodPost, StepPath, body))
				require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
				require.NoError(t, r.once(t.Context(), at))
			}
			plans.set(report.Instruction{Plan: tc.follow})
			require.NoError(t, r.once(t.Context(), t0.Add(10*time.Second)))

			var rn v1beta1.RepoNode
			require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: "n1"}, &rn))
			require.Equal(t, tc.want, rn.Status.Step, "the RepoNode's step")
			require.Equal(t, tc.want, b.Snapshot().Step, "the board's step, as /v1/status shows it")
		})
	}
}

// The report loop writes a step report as soon as it is posted: the board wakes it, the clock
// does not.
func TestReporterRunWritesAStepAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := runtime.NewScheme()
		require.NoError(t, v1beta1.AddToScheme(s))
		c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&v1beta1.RepoNode{}).Build()
		w, err := report.NewWriter(c, "n1")
		require.NoError(t, err)
		b := NewBoard("n1", nil)
		plans := newInstructions()
		plans.set(report.Instruction{Plan: "up"})
		r := &reporter{w: w, board: b, plans: plans, url: "http://n1/", interval: time.Hour, look: time.Hour,
			warn: func(msg string, args ...any) { t.Errorf("%s %v", msg, args) }}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { r.run(ctx); close(done) }()
		synctest.Wait()
		start := time.Now()

		rec := httptest.NewRecorder()
		newStepHandler(b, time.Now()).ServeHTTP(rec, stepRequest(http.MethodPost, StepPath,
			`{"plan":"up","stage":"OSUpgrading","message":"rebooting"}`))
		require.Equal(t, http.StatusNoContent, rec.Code)
		synctest.Wait()

		var rn v1beta1.RepoNode
		require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: "n1"}, &rn))
		require.NotNil(t, rn.Status.Step)
		require.Equal(t, v1beta1.StageOSUpgrading, rn.Status.Step.Stage)
		require.Zero(t, time.Since(start), "written without waiting for a timer")
		cancel()
		<-done
	})
}
