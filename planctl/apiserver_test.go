package planctl_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
	"github.com/upgrade-repo/upgrade-repo/planctl"
	"github.com/upgrade-repo/upgrade-repo/planctl/planctltest"
)

func TestTransient(t *testing.T) {
	t.Parallel()
	plans := schema.GroupResource{Group: v1beta1.GroupVersion.Group, Resource: "upgradeplans"}
	urlErr := func(err error) error { return &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/apis", Err: err} }
	tests := []struct {
		name    string
		err     error
		want    bool
		wantWhy string
	}{
		{name: "connection refused", err: urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), want: true, wantWhy: "connection refused"},
		{name: "connection reset", err: urlErr(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), want: true, wantWhy: "connection reset"},
		{name: "EOF", err: urlErr(io.EOF), want: true, wantWhy: "the connection closed early (EOF)"},
		{name: "unexpected EOF", err: fmt.Errorf("get upgradeplan p: %w", urlErr(io.ErrUnexpectedEOF)), want: true},
		{name: "no route", err: urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.EHOSTUNREACH}), want: true},
		{name: "a network timeout", err: urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: timeoutError{}}), want: true, wantWhy: "timed out"},
		{name: "a deadline", err: urlErr(context.DeadlineExceeded), want: true, wantWhy: "timed out"},
		{name: "HTTP/2 connection lost, as text", err: errors.New("http2: client connection lost"), want: true},
		{name: "429", err: apierrors.NewTooManyRequests("slow down", 1), want: true, wantWhy: "429 too many requests"},
		{name: "503 unable to handle the request", err: apierrors.NewServiceUnavailable("the server is currently unable to handle the request"), want: true,
			wantWhy: "503 the server is currently unable to handle the request"},
		{name: "500", err: apierrors.NewInternalError(errors.New("boom")), want: true},
		{name: "etcd leader changed", err: apierrors.NewInternalError(errors.New("etcdserver: leader changed")), want: true},
		{name: "etcd leader changed, as text", err: errors.New("rpc error: code = Unavailable desc = etcdserver: leader changed"), want: true, wantWhy: "etcdserver: leader changed"},
		{name: "server timeout", err: apierrors.NewServerTimeout(plans, "get", 2), want: true},
		{name: "timeout", err: apierrors.NewTimeoutError("no answer", 1), want: true},
		{name: "unable to handle, as text", err: errors.New("discovery: the server is currently unable to handle the request"), want: true},
		{name: "not found", err: apierrors.NewNotFound(plans, "p")},
		{name: "conflict", err: apierrors.NewConflict(plans, "p", errors.New("changed"))},
		{name: "forbidden", err: apierrors.NewForbidden(plans, "p", errors.New("no"))},
		{name: "invalid", err: apierrors.NewBadRequest("bad")},
		{name: "501", err: apierrors.NewGenericServerResponse(http.StatusNotImplemented, "get", plans, "p", "", 0, true)},
		{name: "canceled", err: urlErr(context.Canceled)},
		{name: "nil"},
		{name: "anything else", err: errors.New("no kind is registered for the type")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			why, ok := planctl.Transient(tt.err)
			require.Equal(t, tt.want, ok)
			if tt.wantWhy != "" {
				require.Equal(t, tt.wantWhy, why)
			}
			if ok {
				require.NotEmpty(t, why)
			}
		})
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// fast paces the tests' retries.
var fast = backoff.Policy{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, v1beta1.AddToScheme(s))
	return s
}

// retrying builds a RetryingClient of srv whose waits are sent on the returned channel.
func retrying(t *testing.T, srv *planctltest.APIServer, bound time.Duration, opts ...planctl.RetryOption) (*planctl.RetryingClient, <-chan planctl.Wait) {
	t.Helper()
	waits := make(chan planctl.Wait, 16)
	rc, err := planctl.NewClusterClient(srv.Config(), testScheme(t), bound, append([]planctl.RetryOption{planctl.WithBackoff(fast),
		planctl.WithWaiting(func(w planctl.Wait) { waits <- w })}, opts...)...)
	require.NoError(t, err)
	return rc, waits
}

func testPlan(phase v1beta1.Phase, states map[string]v1beta1.NodeState) *v1beta1.UpgradePlan {
	p := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1beta1.UpgradePlanSpec{Version: "v1.6.0"}}
	p.Status.Phase = phase
	p.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
	for n, s := range states {
		p.Status.NodeUpgradeStatuses[n] = v1beta1.NodeUpgradeStatus{State: s}
	}
	return p
}

func testNode(name string, controlPlane bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if controlPlane {
		n.Labels["node-role.kubernetes.io/control-plane"] = ""
	}
	n.Status.NodeInfo.KubeletVersion = "v1.32.7"
	return n
}

// A call started while the API server is away waits for it, says so once, and completes once it
// is back; the change lands once.
func TestRetryingClientRidesOutRestart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		away  func(*planctltest.APIServer)
		back  func(*planctltest.APIServer)
		opts  []planctl.RetryOption
		why   string
		bound time.Duration
	}{
		{name: "connection refused", away: (*planctltest.APIServer).Stop, back: (*planctltest.APIServer).Restart, why: "connection refused"},
		{
			name: "frozen: no answer", away: (*planctltest.APIServer).Freeze, back: (*planctltest.APIServer).Thaw,
			opts: []planctl.RetryOption{planctl.WithAttemptTimeout(50 * time.Millisecond)}, why: "no answer within 50ms",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := planctltest.Start(t, testPlan(v1beta1.PhaseNodeUpgrading, map[string]v1beta1.NodeState{"a": v1beta1.NodeUpgraded}),
				testNode("a", true), testNode("b", false))
			c, waits := retrying(t, srv, time.Minute, tt.opts...)
			tt.away(srv)
			type result struct {
				res planctl.PauseResult
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := planctl.Pause(t.Context(), c, "p")
				done <- result{res, err}
			}()
			w := <-waits
			require.Contains(t, w.Why, tt.why)
			require.Equal(t, time.Minute, w.Bound)
			require.NotEmpty(t, w.Op)
			tt.back(srv)
			r := <-done
			require.NoError(t, r.err)
			require.Equal(t, []string{"b"}, r.res.Added)
			var p v1beta1.UpgradePlan
			require.True(t, srv.Get(client.ObjectKey{Name: "p"}, &p))
			require.Equal(t, []string{"b"}, p.Spec.NodeUpgradeOption.PauseNodes)
			require.Empty(t, waits, "one line per outage")
		})
	}
}

func TestRetryingClientAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		fail      func(*planctltest.APIServer)
		bound     time.Duration
		wantErr   error
		wantWaits int
	}{
		{name: "503 twice, then the answer", fail: func(s *planctltest.APIServer) {
			s.FailNext(2, http.StatusServiceUnavailable, "the server is currently unable to handle the request")
		}, wantWaits: 1},
		{name: "429", fail: func(s *planctltest.APIServer) { s.FailNext(1, http.StatusTooManyRequests, "slow down") }, wantWaits: 1},
		{name: "etcd leader changed", fail: func(s *planctltest.APIServer) {
			s.FailNext(1, http.StatusInternalServerError, "etcdserver: leader changed")
		}, wantWaits: 1},
		{name: "forbidden at once", fail: func(s *planctltest.APIServer) { s.FailNext(1, http.StatusForbidden, "no") }, wantErr: errForbidden},
		{name: "down for longer than the bound", fail: (*planctltest.APIServer).Stop, bound: 50 * time.Millisecond,
			wantErr: planctl.ErrAPIUnavailable, wantWaits: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := planctltest.Start(t, testPlan(v1beta1.PhaseNodeUpgrading, nil))
			bound := tt.bound
			if bound == 0 {
				bound = time.Minute
			}
			c, waits := retrying(t, srv, bound)
			// Discovery first, so that the failures meet the call.
			var p v1beta1.UpgradePlan
			require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: "p"}, &p))
			tt.fail(srv)
			err := c.Get(t.Context(), client.ObjectKey{Name: "p"}, &p)
			switch {
			case errors.Is(tt.wantErr, errForbidden):
				require.True(t, apierrors.IsForbidden(err), "%v", err)
			case tt.wantErr != nil:
				require.ErrorIs(t, err, tt.wantErr)
				require.ErrorContains(t, err, "connection refused", "the last failure is said")
			default:
				require.NoError(t, err)
				require.Equal(t, "p", p.Name)
			}
			require.Len(t, waits, tt.wantWaits)
		})
	}
}

var errForbidden = errors.New("forbidden")

// A write that landed but whose answer was lost is not made twice, and the call says what it
// did: the retried Update meets a Conflict and re-applies a change that is already there, the
// retried Create finds its plan, the retried Delete finds it gone.
func TestRetryingClientLostAnswers(t *testing.T) {
	t.Parallel()
	t.Run("pause", func(t *testing.T) {
		t.Parallel()
		srv := planctltest.Start(t, testPlan(v1beta1.PhaseNodeUpgrading, nil), testNode("a", false))
		c, waits := retrying(t, srv, time.Minute)
		srv.LoseAnswers(1)
		res, err := planctl.Pause(t.Context(), c, "p")
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, res.Added)
		require.Len(t, waits, 1)
		var p v1beta1.UpgradePlan
		require.True(t, srv.Get(client.ObjectKey{Name: "p"}, &p))
		require.Equal(t, []string{"a"}, p.Spec.NodeUpgradeOption.PauseNodes)

		srv.LoseAnswers(1)
		removed, still, err := planctl.Resume(t.Context(), c, "p", false)
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, removed)
		require.Empty(t, still)
	})
	t.Run("retry", func(t *testing.T) {
		t.Parallel()
		srv := planctltest.Start(t, testPlan(v1beta1.PhaseFailed, nil))
		c, _ := retrying(t, srv, time.Minute)
		srv.LoseAnswers(1)
		now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
		v, err := planctl.Retry(t.Context(), c, "p", now)
		require.NoError(t, err)
		var p v1beta1.UpgradePlan
		require.True(t, srv.Get(client.ObjectKey{Name: "p"}, &p))
		require.Equal(t, v, p.Annotations[v1beta1.RetryAnnotation])
	})
	t.Run("node plan", func(t *testing.T) {
		t.Parallel()
		succeeded := testPlan(v1beta1.PhaseSucceeded, nil)
		srv := planctltest.Start(t, succeeded, testNode("w", false),
			&v1beta1.Version{ObjectMeta: metav1.ObjectMeta{Name: "v1.6.0"}})
		c, _ := retrying(t, srv, time.Minute)
		srv.LoseAnswers(1)
		res, err := planctl.UpgradeNode(t.Context(), c, "w", "", "")
		require.NoError(t, err)
		require.Equal(t, "v1-6-0-w", res.Plan.Name)
		again, err := planctl.UpgradeNode(t.Context(), c, "w", "", "")
		require.NoError(t, err)
		require.False(t, again.Created, "the plan in flight is reported")
		require.Equal(t, "v1-6-0-w", again.Plan.Name)
	})
	t.Run("abort", func(t *testing.T) {
		t.Parallel()
		srv := planctltest.Start(t, testPlan(v1beta1.PhaseNodeUpgrading, nil))
		c, _ := retrying(t, srv, time.Minute)
		var p v1beta1.UpgradePlan
		require.NoError(t, c.Get(t.Context(), client.ObjectKey{Name: "p"}, &p))
		srv.LoseAnswers(1)
		_, err := planctl.Abort(t.Context(), c, &p, nil, "cattle-system")
		require.NoError(t, err)
		require.False(t, srv.Get(client.ObjectKey{Name: "p"}, &p))
	})
}

// A Conflict re-reads the plan and applies the change again.
func TestUpdateConflict(t *testing.T) {
	t.Parallel()
	srv := planctltest.Start(t, testPlan(v1beta1.PhaseNodeUpgrading, nil), testNode("a", false))
	c, waits := retrying(t, srv, time.Minute)
	srv.ConflictNext(3)
	res, err := planctl.Pause(t.Context(), c, "p")
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, res.Added)
	require.Empty(t, waits, "a Conflict is no outage")
	var p v1beta1.UpgradePlan
	require.True(t, srv.Get(client.ObjectKey{Name: "p"}, &p))
	require.Equal(t, []string{"a"}, p.Spec.NodeUpgradeOption.PauseNodes)
}
