package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/peer/fetch"
	"github.com/upgrade-repo/upgrade-repo/preload"
)

// The board's status becomes the RepoNode the sequencer reads.
func TestBoardRepoNode(t *testing.T) {
	t.Parallel()
	sha := "ab"
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name  string
		setup func(b *Board)
		want  v1beta1.RepoNodeStatus
	}{
		{
			name:  "nothing held",
			setup: func(*Board) {},
			want:  v1beta1.RepoNodeStatus{ISO: v1beta1.RepoNodeISO{State: v1beta1.ISOPending}},
		},
		{
			name: "fetching, counted by source",
			setup: func(b *Board) {
				b.update(func(s *Status) {
					s.ISO = ISOStatus{SHA512: sha, State: ISOFetching, Progress: fetch.Progress{Size: 10, Held: 6, FromPeers: 4, FromOrigin: 2}}
				})
			},
			want: v1beta1.RepoNodeStatus{ISO: v1beta1.RepoNodeISO{Checksum: sha, State: v1beta1.ISODownloading,
				BytesDone: 6, BytesTotal: 10, BytesFromPeers: 4, BytesFromOrigin: 2}},
		},
		{
			name: "served, with the checksum as the plan writes it",
			setup: func(b *Board) {
				b.plan("up", "sha512:"+sha)
				b.update(func(s *Status) { s.ISO, s.Ready = ISOStatus{SHA512: sha, State: ISOVerified}, true })
			},
			want: v1beta1.RepoNodeStatus{
				ISO:  v1beta1.RepoNodeISO{Checksum: "sha512:" + sha, State: v1beta1.ISOReady},
				Repo: v1beta1.RepoNodeRepo{Ready: true, URL: "http://n1:8080/"},
			},
		},
		{
			name:  "failed, saying why",
			setup: func(b *Board) { b.update(func(s *Status) { s.ISO.SHA512 = sha }); b.failed("sha512 mismatch") },
			want:  v1beta1.RepoNodeStatus{ISO: v1beta1.RepoNodeISO{Checksum: sha, State: v1beta1.ISOFailed, Message: "sha512 mismatch"}},
		},
		{
			name:  "a preload that could not start",
			setup: func(b *Board) { b.preloading(nil, errors.New("open release.iso: no such file")) },
			want: v1beta1.RepoNodeStatus{
				ISO:     v1beta1.RepoNodeISO{State: v1beta1.ISOPending},
				Preload: v1beta1.RepoNodePreload{State: v1beta1.PreloadFailed, Reason: "PreloadNotStarted", Message: "open release.iso: no such file"},
			},
		},
		{
			name: "a step's report, kept across a reset",
			setup: func(b *Board) {
				b.step(&v1beta1.RepoNodeStep{Plan: "up", Stage: v1beta1.StageOSUpgrading, Message: "rebooting"})
				b.reset()
			},
			want: v1beta1.RepoNodeStatus{
				ISO:  v1beta1.RepoNodeISO{State: v1beta1.ISOPending},
				Step: &v1beta1.RepoNodeStep{Plan: "up", Stage: v1beta1.StageOSUpgrading, Message: "rebooting"},
			},
		},
		{
			name: "images put back, the latest ten kept",
			setup: func(b *Board) {
				for i := range 12 {
					b.restored([]preload.Restore{{Image: fmt.Sprintf("docker.io/library/x:%d", i), Source: "iso", Time: at}})
				}
			},
			want: v1beta1.RepoNodeStatus{
				ISO: v1beta1.RepoNodeISO{State: v1beta1.ISOPending},
				Preload: v1beta1.RepoNodePreload{RestoredTotal: 12, Restored: func() []v1beta1.RepoNodeRestore {
					var out []v1beta1.RepoNodeRestore
					for i := 2; i < 12; i++ {
						out = append(out, v1beta1.RepoNodeRestore{Image: fmt.Sprintf("docker.io/library/x:%d", i), Source: "iso", Time: metav1.NewTime(at)})
					}
					return out
				}()},
			},
		},
		{
			name: "the release's images pinned, as the guard last counted them",
			setup: func(b *Board) {
				b.pinned(3)
				b.pinned(5)
			},
			want: v1beta1.RepoNodeStatus{
				ISO:     v1beta1.RepoNodeISO{State: v1beta1.ISOPending},
				Preload: v1beta1.RepoNodePreload{ImagesPinned: 5},
			},
		},
		{
			name: "reset after a drop",
			setup: func(b *Board) {
				b.plan("up", sha)
				b.update(func(s *Status) { s.ISO, s.Ready = ISOStatus{SHA512: sha, State: ISOVerified}, true })
				b.restored([]preload.Restore{{Image: "docker.io/library/x:1", Source: "iso", Time: at}})
				b.pinned(4)
				b.reset()
			},
			want: v1beta1.RepoNodeStatus{ISO: v1beta1.RepoNodeISO{State: v1beta1.ISOPending}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := NewBoard("n1", func() int { return 3 })
			tc.setup(b)
			require.Equal(t, tc.want, b.RepoNode("http://n1:8080/"))
		})
	}
}

// /v1/status is the board as JSON, with the members counted when asked.
func TestBoardServesStatus(t *testing.T) {
	t.Parallel()
	members := 1
	b := NewBoard("n1", func() int { return members })
	b.plan("up", "")
	step := &v1beta1.RepoNodeStep{Plan: "up", Stage: v1beta1.StageKubernetesUpgraded}
	b.step(step)
	members = 4
	rec := httptest.NewRecorder()
	b.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/status", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
	var s Status
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &s))
	require.Equal(t, Status{Node: "n1", Members: 4, ISO: ISOStatus{State: ISOPending}, Plan: "up", Step: step}, s)
}
