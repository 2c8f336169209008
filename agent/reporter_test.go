package agent

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	require.Equal(t, v1beta1.RepoNodeCache{}, cacheUsage(""))
	missing := t.TempDir() + "/missing"
	require.Equal(t, v1beta1.RepoNodeCache{Path: missing}, cacheUsage(missing))
	c := cacheUsage(t.TempDir())
	require.Positive(t, c.TotalBytes)
	require.LessOrEqual(t, c.FreeBytes, c.TotalBytes)
}
