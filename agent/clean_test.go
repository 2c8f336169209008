package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/sequencer/report"
)

// A cleanup reaches the RepoNode with its counts, naming at most maxCleanupNames images, and
// outlives the board's reset when the ISO is dropped.
func TestCleanupOnTheRepoNode(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	many := make([]string, maxCleanupNames+5)
	for i := range many {
		many[i] = fmt.Sprintf("docker.io/library/old-%03d:v1", i)
	}
	tests := []struct {
		name string
		in   *preload.Cleanup
		want *v1beta1.RepoNodeCleanup
	}{
		{name: "none yet", in: nil, want: nil},
		{
			name: "removed and kept",
			in: &preload.Cleanup{
				Release: "v1.5.2", Previous: []string{"v1.4.2"}, Candidates: 3, Time: at,
				Removal: preload.Removal{
					Removed: []string{"docker.io/library/gone:v1"}, Bytes: 4096,
					Kept: []preload.Kept{
						{Image: "docker.io/library/used:v1", Reason: preload.KeptInUse, Users: []string{"c1"}},
						{Image: "docker.io/library/pinned:v1", Reason: preload.KeptPinned},
					},
				},
			},
			want: &v1beta1.RepoNodeCleanup{
				Release: "v1.5.2", Previous: []string{"v1.4.2"}, Candidates: 3, RemovedTotal: 1, BytesFreed: 4096,
				Removed: []string{"docker.io/library/gone:v1"}, Time: metav1.NewTime(at),
				Kept: []v1beta1.RepoNodeKeptImage{
					{Image: "docker.io/library/used:v1", Reason: "InUse", Containers: []string{"c1"}},
					{Image: "docker.io/library/pinned:v1", Reason: "Pinned"},
				},
			},
		},
		{
			name: "dry run, more than the RepoNode names, stopped short",
			in: &preload.Cleanup{
				Release: "v1.5.2", DryRun: true, Candidates: len(many), Time: at, Error: "list containers: unavailable",
				Removal: preload.Removal{Removed: many, Bytes: 1 << 30},
			},
			want: &v1beta1.RepoNodeCleanup{
				Release: "v1.5.2", DryRun: true, Candidates: int64(len(many)), RemovedTotal: int64(len(many)),
				BytesFreed: 1 << 30, Removed: many[:maxCleanupNames], Time: metav1.NewTime(at),
				Message: "list containers: unavailable",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := NewBoard("n1", nil)
			b.update(func(s *Status) { s.Cleanup = tc.in })
			b.reset()
			require.Equal(t, tc.want, b.RepoNode("http://n1/").Cleanup)
		})
	}
}

// The cleanup runs for an ISO only once a plan that installed it Succeeded.
func TestInstalled(t *testing.T) {
	t.Parallel()
	hex := strings.Repeat("ab", 64)
	tests := []struct {
		name      string
		installed []string
		want      bool
	}{
		{name: "no plan Succeeded", want: false},
		{name: "this ISO", installed: []string{"sha512:" + hex}, want: true},
		{name: "another ISO", installed: []string{strings.Repeat("cd", 64)}, want: false},
		{name: "an unusable checksum", installed: []string{"md5:00"}, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := &Agent{plans: newInstructions()}
			a.plans.set(report.Instruction{Installed: tc.installed})
			require.Equal(t, tc.want, a.installed(hex))
		})
	}
}
