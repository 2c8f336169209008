package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// The tokens fakeAuthenticator knows, and whose they are.
const (
	stepToken = "token-of-n1-step" // a node Job's pod on n1: the one that may report
	otherNode = "token-of-n2-step" // a node Job's pod on n2
	otherSA   = "token-of-a-pod-of-another-account"
	otherNS   = "token-of-a-pod-of-another-namespace"
	noNode    = "token-without-node"
	noPod     = "token-of-no-pod"
	broken    = "token-the-API-server-cannot-review"
)

// fakeAuthenticator is the API server's TokenReview as the gate sees it: the tokens above, each
// with its identity; every other token is unauthenticated (forged).
type fakeAuthenticator struct {
	ids   map[string]StepIdentity
	calls atomic.Int64
}

var _ StepAuthenticator = (*fakeAuthenticator)(nil)

func newFakeAuthenticator() *fakeAuthenticator {
	job := func(node string) StepIdentity {
		return StepIdentity{Namespace: "upgrade-repo-system", ServiceAccount: "upgrade-job", Pod: "up-node-" + node + "-x", PodUID: "uid-" + node, Node: node}
	}
	sa, ns, nn, np := job("n1"), job("n1"), job("n1"), job("n1")
	sa.ServiceAccount, ns.Namespace, nn.Node, np.Pod, np.Node = "default", "kube-system", "", "", ""
	return &fakeAuthenticator{ids: map[string]StepIdentity{
		stepToken: job("n1"), otherNode: job("n2"), otherSA: sa, otherNS: ns, noNode: nn, noPod: np,
	}}
}

func (f *fakeAuthenticator) Authenticate(_ context.Context, token string) (StepIdentity, error) {
	f.calls.Add(1)
	if token == broken {
		return StepIdentity{}, errors.New("token review: connection refused")
	}
	id, ok := f.ids[token]
	if !ok {
		return StepIdentity{}, fmt.Errorf("%w: invalid bearer token", ErrUnauthenticated)
	}
	return id, nil
}

func testStepAuth(a StepAuthenticator) StepAuth {
	return StepAuth{Authenticator: a, Namespace: "upgrade-repo-system", ServiceAccount: "upgrade-job"}
}

// Only node n1's own step reports n1's stage: a missing or forged token is 401, the token of
// another pod (another node's step, another account or namespace, a token bound to no pod or
// node) is 403, a token that cannot be reviewed is 503, and none of them changes the board.
func TestStepHandlerAuthenticates(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	body := `{"plan":"up","stage":"KubernetesUpgrading","message":"kubeadm upgrade node"}`
	tests := []struct {
		name     string
		auth     string // the Authorization header
		noAuth   bool   // the agent has no authenticator (no cluster)
		code     int
		wantBody string
	}{
		{name: "the node's step", auth: "Bearer " + stepToken, code: http.StatusNoContent},
		{name: "scheme in other case", auth: "bearer " + stepToken, code: http.StatusNoContent},
		{name: "no token", code: http.StatusUnauthorized, wantBody: "needs the step's service-account token"},
		{name: "basic auth", auth: "Basic dXNlcjpwYXNz", code: http.StatusUnauthorized, wantBody: "needs the step's service-account token"},
		{name: "empty bearer", auth: "Bearer ", code: http.StatusUnauthorized},
		{name: "forged token", auth: "Bearer forged", code: http.StatusUnauthorized, wantBody: "the token proves no identity"},
		{name: "another node's step", auth: "Bearer " + otherNode, code: http.StatusForbidden, wantBody: "runs on node n2, not on n1"},
		{name: "another service account", auth: "Bearer " + otherSA, code: http.StatusForbidden, wantBody: "service account upgrade-repo-system/default is not the node steps'"},
		{name: "another namespace", auth: "Bearer " + otherNS, code: http.StatusForbidden, wantBody: "service account kube-system/upgrade-job"},
		{name: "a token that names no node", auth: "Bearer " + noNode, code: http.StatusForbidden, wantBody: "names no node"},
		{name: "a token bound to no pod", auth: "Bearer " + noPod, code: http.StatusForbidden, wantBody: "bound to no pod"},
		{name: "review failed", auth: "Bearer " + broken, code: http.StatusServiceUnavailable, wantBody: "could not be verified"},
		{name: "no cluster to verify with", auth: "Bearer " + stepToken, noAuth: true, code: http.StatusForbidden, wantBody: "this agent has none"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := NewBoard("n1", nil)
			auth := testStepAuth(newFakeAuthenticator())
			if tc.noAuth {
				auth = StepAuth{}
			}
			now := func() time.Time { return at }
			h := &stepHandler{board: b, gate: newStepGate(auth, "n1", now), log: discardLog(), now: now}
			req := httptest.NewRequest(http.MethodPost, StepPath, strings.NewReader(body))
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, tc.code, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), tc.wantBody)
			require.NotContains(t, rec.Body.String(), "token-of", "the token is never echoed")
			if tc.code == http.StatusUnauthorized {
				require.Contains(t, rec.Header().Get("WWW-Authenticate"), "Bearer")
			}
			if tc.code != http.StatusNoContent {
				require.Nil(t, b.Snapshot().Step, "a refused report changes nothing")
				return
			}
			require.Equal(t, &v1beta1.RepoNodeStep{Plan: "up", Stage: v1beta1.StageKubernetesUpgrading, Message: "kubeadm upgrade node",
				Time: b.Snapshot().Step.Time}, b.Snapshot().Step)
		})
	}
}

// A flood of forged tokens costs the API server a few reviews a second and never locks the
// node's step out once its token is known; a valid token's reports are bounded too, so repeating
// them cannot keep the node's progress time fresh; a token known for a minute is reviewed again.
func TestStepGateBounds(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fa := newFakeAuthenticator()
	b := NewBoard("n1", nil)
	now := at
	clock := func() time.Time { return now }
	h := &stepHandler{board: b, gate: newStepGate(testStepAuth(fa), "n1", clock), log: discardLog(), now: clock}
	post := func(token, message string) int {
		req := httptest.NewRequest(http.MethodPost, StepPath, strings.NewReader(`{"plan":"up","stage":"OSUpgrading","message":"`+message+`"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}

	require.Equal(t, http.StatusNoContent, post(stepToken, "first"))
	require.EqualValues(t, 1, fa.calls.Load())

	// Forged tokens: 5 reviews at once (one of them spent above), then 429 without a review.
	for i := range 4 {
		require.Equal(t, http.StatusUnauthorized, post(fmt.Sprintf("forged-%d", i), "x"))
	}
	require.EqualValues(t, 5, fa.calls.Load())
	require.Equal(t, http.StatusTooManyRequests, post("forged-again", "x"))
	require.EqualValues(t, 5, fa.calls.Load(), "no review past the bound")
	require.Equal(t, "first", b.Snapshot().Step.Message, "no forged report on the board")

	// The step's token is known: its report needs no review.
	require.Equal(t, http.StatusNoContent, post(stepToken, "second"))
	require.EqualValues(t, 5, fa.calls.Load())

	// Its reports are bounded: 20 at once (2 spent), then 1 every 2 seconds.
	for i := range 18 {
		require.Equal(t, http.StatusNoContent, post(stepToken, fmt.Sprint("burst-", i)))
	}
	require.Equal(t, http.StatusTooManyRequests, post(stepToken, "one too many"))
	require.Equal(t, "burst-17", b.Snapshot().Step.Message)
	now = now.Add(2 * time.Second)
	require.Equal(t, http.StatusNoContent, post(stepToken, "later"))
	require.EqualValues(t, 5, fa.calls.Load())

	// After a minute the token is reviewed again.
	now = now.Add(tokenTTL)
	require.Equal(t, http.StatusNoContent, post(stepToken, "a minute on"))
	require.EqualValues(t, 6, fa.calls.Load())
}

// What a step reports is escaped before it reaches the board, the RepoNode or the log: no
// escape sequence reaches an operator's terminal.
func TestStepHandlerEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	b := NewBoard("n1", nil)
	rec := httptest.NewRecorder()
	newStepHandler(b, time.Unix(1000, 0)).ServeHTTP(rec, stepRequest(http.MethodPost, StepPath,
		`{"plan":"up\u0007","stage":"OSUpgrading","message":"\u001b[2J\u001b[Hall good\r\nnode ready\u202e"}`))
	require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
	st := b.Snapshot().Step
	require.Equal(t, `up\x07`, st.Plan)
	require.Equal(t, `\x1b[2J\x1b[Hall good\x0d\x0anode ready\u202e`, st.Message)
}

// The TokenReview's answer makes an identity only when it is authenticated for the step's
// audience and names a service account; the pod and node come from the bound token's extras.
func TestReviewed(t *testing.T) {
	t.Parallel()
	extra := map[string]authenticationv1.ExtraValue{
		extraPodName: {"up-node-n1-x"}, extraPodUID: {"uid"}, extraNodeName: {"n1"},
	}
	tests := []struct {
		name    string
		status  authenticationv1.TokenReviewStatus
		want    StepIdentity
		wantErr string
	}{
		{
			name: "bound token of a node Job's pod",
			status: authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{StepTokenAudience},
				User: authenticationv1.UserInfo{Username: "system:serviceaccount:upgrade-repo-system:upgrade-job", Extra: extra}},
			want: StepIdentity{Namespace: "upgrade-repo-system", ServiceAccount: "upgrade-job", Pod: "up-node-n1-x", PodUID: "uid", Node: "n1"},
		},
		{
			name:    "not authenticated",
			status:  authenticationv1.TokenReviewStatus{Error: "token has been invalidated"},
			wantErr: "the token proves no identity: token has been invalidated",
		},
		{
			name: "no audience in the answer",
			status: authenticationv1.TokenReviewStatus{Authenticated: true,
				User: authenticationv1.UserInfo{Username: "system:serviceaccount:upgrade-repo-system:upgrade-job", Extra: extra}},
			wantErr: "not a token for audience upgrade-repo-step",
		},
		{
			name: "a user, not a service account",
			status: authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{StepTokenAudience},
				User: authenticationv1.UserInfo{Username: "kubernetes-admin"}},
			wantErr: `"kubernetes-admin" is not a service account`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id, err := reviewed(tc.status)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, ErrUnauthenticated)
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, id)
		})
	}
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }
