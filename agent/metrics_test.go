package agent

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer/fetch"
)

// The node's metrics follow its board: the ISO's state and bytes, a failing origin, and a preload
// that could not start.
func TestBoardMetricsFollowTheBoard(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(b *Board)
		want  string
	}{
		{
			name:  "nothing held",
			setup: func(*Board) {},
			want: `
upgrade_repo_agent_iso_held_bytes 0
upgrade_repo_agent_iso_size_bytes 0
upgrade_repo_agent_iso_state{state="Downloading"} 0
upgrade_repo_agent_iso_state{state="Failed"} 0
upgrade_repo_agent_iso_state{state="Pending"} 1
upgrade_repo_agent_iso_state{state="Ready"} 0
upgrade_repo_agent_iso_state{state="Verifying"} 0
upgrade_repo_agent_origin_failing 0
upgrade_repo_agent_pinned_images 0
upgrade_repo_agent_preload_state{state="ImagePreloadFailed"} 0
upgrade_repo_agent_preload_state{state="ImagePreloaded"} 0
upgrade_repo_agent_preload_state{state="ImagePreloading"} 0
upgrade_repo_agent_ready 0
`,
		},
		{
			name:  "the release's images pinned",
			setup: func(b *Board) { b.pinned(7) },
			want: `
upgrade_repo_agent_pinned_images 7
`,
		},
		{
			name: "downloading while the origin fails",
			setup: func(b *Board) {
				b.update(func(s *Status) {
					s.ISO.State = ISOFetching
					s.ISO.Progress = fetch.Progress{Size: 1000, Held: 250, FromPeers: 200, FromOrigin: 50, OriginError: "503 Service Unavailable"}
				})
			},
			want: `
upgrade_repo_agent_iso_held_bytes 250
upgrade_repo_agent_iso_size_bytes 1000
upgrade_repo_agent_iso_state{state="Downloading"} 1
upgrade_repo_agent_iso_state{state="Failed"} 0
upgrade_repo_agent_iso_state{state="Pending"} 0
upgrade_repo_agent_iso_state{state="Ready"} 0
upgrade_repo_agent_iso_state{state="Verifying"} 0
upgrade_repo_agent_origin_failing 1
upgrade_repo_agent_preload_state{state="ImagePreloadFailed"} 0
upgrade_repo_agent_preload_state{state="ImagePreloaded"} 0
upgrade_repo_agent_preload_state{state="ImagePreloading"} 0
upgrade_repo_agent_ready 0
`,
		},
		{
			name: "serving, the preload never started",
			setup: func(b *Board) {
				b.update(func(s *Status) {
					s.Ready = true
					s.ISO.State = ISOVerified
					s.ISO.Progress = fetch.Progress{Size: 1000, Held: 1000, Verified: true}
				})
				b.preloading(nil, errors.New("no image store"))
			},
			want: `
upgrade_repo_agent_iso_held_bytes 1000
upgrade_repo_agent_iso_size_bytes 1000
upgrade_repo_agent_iso_state{state="Downloading"} 0
upgrade_repo_agent_iso_state{state="Failed"} 0
upgrade_repo_agent_iso_state{state="Pending"} 0
upgrade_repo_agent_iso_state{state="Ready"} 1
upgrade_repo_agent_iso_state{state="Verifying"} 0
upgrade_repo_agent_origin_failing 0
upgrade_repo_agent_preload_state{state="ImagePreloadFailed"} 1
upgrade_repo_agent_preload_state{state="ImagePreloaded"} 0
upgrade_repo_agent_preload_state{state="ImagePreloading"} 0
upgrade_repo_agent_ready 1
`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := NewBoard("n1", nil)
			reg := prometheus.NewPedanticRegistry()
			require.NoError(t, reg.Register(newBoardCollector(b)))
			tc.setup(b)
			got := samples(t, reg)
			for _, line := range strings.Split(strings.TrimSpace(tc.want), "\n") {
				key, value, _ := strings.Cut(line, " ")
				require.Contains(t, got, key)
				require.Equal(t, value, got[key], key)
			}
		})
	}
}

// samples gathers reg into "name{label="value",...}" -> value, as the exposition format writes them.
func samples(t *testing.T, reg prometheus.Gatherer) map[string]string {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			if len(m.GetLabel()) > 0 {
				var ls []string
				for _, l := range m.GetLabel() {
					ls = append(ls, l.GetName()+"="+strconv.Quote(l.GetValue()))
				}
				key += "{" + strings.Join(ls, ",") + "}"
			}
			out[key] = strconv.FormatFloat(m.GetGauge().GetValue(), 'g', -1, 64)
		}
	}
	return out
}
