package agent

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/repo"
)

// newStepHandler returns the step handler of b, whose clock says at, for node n1's step: it
// takes stepToken (see fakeAuthenticator).
func newStepHandler(b *Board, at time.Time) *stepHandler {
	now := func() time.Time { return at }
	return &stepHandler{board: b, gate: newStepGate(testStepAuth(newFakeAuthenticator()), "n1", now), log: slog.New(slog.DiscardHandler), now: now}
}

// stepRequest returns a step report as node n1's step sends it, with its token.
func stepRequest(method, path, body string) *http.Request {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+stepToken)
	return r
}

// POST /v1/step puts a valid report on the board and refuses anything else with a status and a
// message that say why.
func TestStepHandler(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	tests := []struct {
		name     string
		method   string
		body     string
		code     int
		wantBody string // a part of the plain-text answer
		want     *v1beta1.RepoNodeStep
	}{
		{
			name: "valid", method: http.MethodPost,
			body: `{"plan":"to-v1-6-0","stage":"KubernetesUpgrading","message":"kubeadm upgrade node"}`,
			code: http.StatusNoContent,
			want: &v1beta1.RepoNodeStep{Plan: "to-v1-6-0", Stage: v1beta1.StageKubernetesUpgrading,
				Message: "kubeadm upgrade node", Time: metav1.NewTime(at.Truncate(time.Second))},
		},
		{
			name: "valid without a message", method: http.MethodPost, body: `{"plan":"up","stage":"OSUpgraded"}` + "\n",
			code: http.StatusNoContent,
			want: &v1beta1.RepoNodeStep{Plan: "up", Stage: v1beta1.StageOSUpgraded, Time: metav1.NewTime(at.Truncate(time.Second))},
		},
		{
			name: "unknown stage", method: http.MethodPost, body: `{"plan":"up","stage":"Rebooting"}`,
			code: http.StatusBadRequest, wantBody: `stage "Rebooting": want one of KubernetesUpgrading, KubernetesUpgraded, OSUpgrading, OSUpgraded`,
		},
		{
			name: "stage in other case", method: http.MethodPost, body: `{"plan":"up","stage":"osupgraded"}`,
			code: http.StatusBadRequest, wantBody: `stage "osupgraded"`,
		},
		{
			name: "no plan", method: http.MethodPost, body: `{"stage":"OSUpgrading"}`,
			code: http.StatusBadRequest, wantBody: "plan is required",
		},
		{
			name: "unknown field", method: http.MethodPost, body: `{"plan":"up","stage":"OSUpgrading","time":"2026-01-01T00:00:00Z"}`,
			code: http.StatusBadRequest, wantBody: `unknown field "time"`,
		},
		{
			name: "bad JSON", method: http.MethodPost, body: `{"plan":"up",`,
			code: http.StatusBadRequest, wantBody: "step report: ",
		},
		{
			name: "empty body", method: http.MethodPost, body: ``,
			code: http.StatusBadRequest, wantBody: "step report: EOF",
		},
		{
			name: "two objects", method: http.MethodPost, body: `{"plan":"up","stage":"OSUpgrading"}{"plan":"up","stage":"OSUpgraded"}`,
			code: http.StatusBadRequest, wantBody: "more than one JSON object",
		},
		{
			name: "too big", method: http.MethodPost,
			body: `{"plan":"up","stage":"OSUpgrading","message":"` + strings.Repeat("x", maxStepBody) + `"}`,
			code: http.StatusRequestEntityTooLarge, wantBody: "the body is over 4096 bytes",
		},
		{
			name: "wrong method", method: http.MethodGet,
			code: http.StatusMethodNotAllowed, wantBody: "POST a step report",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := NewBoard("n1", nil)
			rec := httptest.NewRecorder()
			newStepHandler(b, at).ServeHTTP(rec, stepRequest(tc.method, StepPath, tc.body))
			require.Equal(t, tc.code, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), tc.wantBody)
			if tc.code != http.StatusNoContent {
				require.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"))
			}
			if tc.code == http.StatusMethodNotAllowed {
				require.Equal(t, http.MethodPost, rec.Header().Get("Allow"))
			}
			require.Equal(t, tc.want, b.Snapshot().Step, "what the board holds")
		})
	}
}

// The mux gives /v1/step to the step handler whatever the method and whether or not an ISO is
// served, and never to the ISO's files; the ISO's paths stay the ISO's.
func TestRoutes(t *testing.T) {
	t.Parallel()
	named := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name) })
	}
	metrics, err := repo.NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	files := repo.NewServer(metrics, nil, nil) // no ISO: not ready
	tests := []struct {
		name     string
		method   string
		path     string
		body     string
		code     int
		wantBody string
	}{
		{name: "step", method: http.MethodPost, path: "/v1/step", body: `{"plan":"up","stage":"OSUpgrading"}`, code: http.StatusNoContent},
		{name: "step, repeated slashes", method: http.MethodPost, path: "//v1//step", body: `{"plan":"up","stage":"OSUpgrading"}`, code: http.StatusNoContent},
		{name: "step, wrong method", method: http.MethodGet, path: "/v1/step", code: http.StatusMethodNotAllowed, wantBody: "POST a step report"},
		{name: "step, HEAD", method: http.MethodHead, path: "/v1/step", code: http.StatusMethodNotAllowed},
		{name: "an ISO file under the prefix", method: http.MethodGet, path: "/harvester-iso/v1/step", code: http.StatusServiceUnavailable},
		{name: "an ISO file below the step's path", method: http.MethodGet, path: "/v1/step/x", code: http.StatusServiceUnavailable},
		{name: "an ISO file", method: http.MethodGet, path: "/harvester-release.yaml", code: http.StatusServiceUnavailable},
		{name: "status", method: http.MethodGet, path: "/v1/status", code: http.StatusOK, wantBody: "status"},
		{name: "peers", method: http.MethodGet, path: "/v1/iso/ab", code: http.StatusOK, wantBody: "peers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := NewBoard("n1", nil)
			h := routes(named("peers"), named("status"), newStepHandler(b, time.Unix(1000, 0)), named("digests"), files, nil)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, stepRequest(tc.method, tc.path, tc.body))
			require.Equal(t, tc.code, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), tc.wantBody)
			require.Equal(t, tc.code == http.StatusNoContent, b.Snapshot().Step != nil, "a report on the board")
		})
	}
}
