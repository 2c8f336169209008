package planctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
)

// ErrAPIUnavailable is wrapped by the error of a RetryingClient's call that gave up: the API
// server answered only with transient errors (Transient), or not at all, for the client's bound.
var ErrAPIUnavailable = errors.New("the API server did not come back")

// DefaultAPITimeout is how long a RetryingClient's call waits for the API server by default: a
// control plane's static pods restart within it during an upgrade.
const DefaultAPITimeout = 2 * time.Minute

// DefaultAttemptTimeout bounds one attempt of a RetryingClient's call: an API server that
// accepts connections but does not answer (its container frozen, its process stopped) looks
// like one that is away.
const DefaultAttemptTimeout = 10 * time.Second

// defaultAPIBackoff paces the attempts of a RetryingClient's call; its Total is the client's
// bound.
var defaultAPIBackoff = backoff.Policy{Initial: 250 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}

// etcdHiccups are messages of errors from etcd that pass once it has a leader again; the API
// server returns them as 500s, and some paths hand them on as plain text.
var etcdHiccups = []string{"etcdserver: leader changed", "etcdserver: no leader", "etcdserver: request timed out", "etcdserver: too many requests"}

// brokenConnection are messages of connection failures that some layers (HTTP/2, TLS) return
// without an error value to match.
var brokenConnection = []string{
	"http2: client connection lost", "http2: server sent GOAWAY", "connection reset by peer", "broken pipe",
	"TLS handshake timeout", "i/o timeout", "unexpected EOF", "use of closed network connection",
}

// Transient reports whether err is a failure of the API server, or of the way to it, that
// passes by itself, and says which in a few words. It is the one rule of the commands for what
// is waited out:
//
//   - the connection: refused, reset, broken, closed early (EOF), unreachable, timed out;
//   - the answer: 429 Too Many Requests, a 5xx but 501 (an API server starting, an aggregated
//     API away: "the server is currently unable to handle the request"), a server-side
//     timeout, etcd without a leader or changing it.
//
// Every other error is an answer (not found, forbidden, invalid, a conflict) and is not
// transient. Neither is a canceled context: the caller gave up. A context's deadline is a
// timeout like any other: a caller whose own deadline passed checks its context first.
func Transient(err error) (why string, ok bool) {
	if err == nil || errors.Is(err, context.Canceled) {
		return "", false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		switch {
		case s.Code == http.StatusTooManyRequests || s.Reason == metav1.StatusReasonTooManyRequests:
			return "429 too many requests", true
		case s.Reason == metav1.StatusReasonServerTimeout || s.Reason == metav1.StatusReasonTimeout:
			return fmt.Sprintf("the server timed out (%d)", s.Code), true
		case backoff.RetryableStatus(int(s.Code)):
			return fmt.Sprintf("%d %s", s.Code, firstLine(s.Message)), true
		}
		for _, m := range etcdHiccups {
			if strings.Contains(s.Message, m) {
				return m, true
			}
		}
		return "", false
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused", true
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED):
		return "connection reset", true
	case errors.Is(err, syscall.EPIPE):
		return "connection broken", true
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to the API server", true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection closed early (EOF)", true
	case errors.Is(err, net.ErrClosed):
		return "connection closed", true
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out", true
	}
	if ne, isNet := errors.AsType[net.Error](err); isNet && ne.Timeout() {
		return "timed out", true
	}
	msg := err.Error()
	for _, m := range etcdHiccups {
		if strings.Contains(msg, m) {
			return m, true
		}
	}
	if strings.Contains(msg, "the server is currently unable to handle the request") {
		return "the server is currently unable to handle the request", true
	}
	for _, m := range brokenConnection {
		if strings.Contains(msg, m) {
			return m, true
		}
	}
	return "", false
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// Wait is what a RetryingClient tells its caller when a call starts waiting for the API server.
type Wait struct {
	// Op names the call: "get upgradeplan to-v1-6-0", "list nodes".
	Op string
	// Why says in a few words why the API server is taken to be away (Transient's why).
	Why string
	// Err is the error of the attempt that failed.
	Err error
	// Bound is how long the call waits at most.
	Bound time.Duration
}

// RetryingClient is a controller-runtime client that rides out a restarting API server: each
// call (Get, List, Create, Update, Patch, Delete, DeleteAllOf, and the opening of a Watch) is
// tried again with backoff while it fails with a Transient error, for at most the client's
// bound, and then fails with an error wrapping ErrAPIUnavailable and the last failure. Any other
// error is returned at once. One attempt that gets no answer within the attempt timeout is a
// transient failure.
//
// A write that failed transiently may have landed all the same (the answer was lost); its next
// attempt then meets what it did: an Update fails with a Conflict (the caller reads the object
// again and applies its change again), a Create with AlreadyExists (the caller compares what
// exists with what it asked for); a Delete that finds the object gone succeeds. Status() and
// SubResource() writers, and the events of an open watch, are the embedded client's, without
// retries.
//
// The first failure of an outage, whichever call meets it, is told once (WithWaiting); the next
// success of any call ends the outage. A RetryingClient is safe for concurrent use, as the
// client it wraps.
type RetryingClient struct {
	client.WithWatch
	bound   time.Duration
	attempt time.Duration
	policy  backoff.Policy
	waiting func(Wait)

	mu   sync.Mutex
	down bool
}

// RetryOption sets an optional setting of a RetryingClient.
type RetryOption func(*RetryingClient)

// WithWaiting has f told when a call starts waiting for the API server, once per outage (see
// RetryingClient). f is called from the goroutine of the call, and must not block.
func WithWaiting(f func(Wait)) RetryOption { return func(c *RetryingClient) { c.waiting = f } }

// WithAttemptTimeout bounds one attempt; DefaultAttemptTimeout by default.
func WithAttemptTimeout(d time.Duration) RetryOption {
	return func(c *RetryingClient) { c.attempt = d }
}

// WithBackoff paces the attempts with p (its Total is replaced by the client's bound); a policy
// from 250 ms up to 5 s by default.
func WithBackoff(p backoff.Policy) RetryOption { return func(c *RetryingClient) { c.policy = p } }

var _ client.WithWatch = (*RetryingClient)(nil)

// NewRetryingClient wraps c: its calls wait for the API server for at most bound
// (DefaultAPITimeout when 0).
func NewRetryingClient(c client.WithWatch, bound time.Duration, opts ...RetryOption) (*RetryingClient, error) {
	if c == nil {
		return nil, errors.New("retrying client: no client to wrap")
	}
	if bound < 0 {
		return nil, fmt.Errorf("retrying client: negative bound %s", bound)
	}
	if bound == 0 {
		bound = DefaultAPITimeout
	}
	r := &RetryingClient{WithWatch: c, bound: bound, attempt: DefaultAttemptTimeout, policy: defaultAPIBackoff}
	for _, o := range opts {
		o(r)
	}
	if r.attempt <= 0 {
		return nil, fmt.Errorf("retrying client: attempt timeout %s is not positive", r.attempt)
	}
	r.policy.Total = bound
	return r, nil
}

// NewClusterClient builds a RetryingClient (NewRetryingClient) of the cluster of cfg that knows
// the kinds of scheme. The discovery the client runs on the first use of each API group takes no
// context: its requests are bounded by the attempt timeout by an HTTP client of their own, so
// that an API server that accepts connections and does not answer does not hold it.
func NewClusterClient(cfg *rest.Config, scheme *runtime.Scheme, bound time.Duration, opts ...RetryOption) (*RetryingClient, error) {
	probe := &RetryingClient{attempt: DefaultAttemptTimeout}
	for _, o := range opts {
		o(probe)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the cluster: %w", err)
	}
	dcfg := rest.CopyConfig(cfg)
	dcfg.Timeout = probe.attempt
	dhc, err := rest.HTTPClientFor(dcfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the cluster: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, dhc)
	if err != nil {
		return nil, fmt.Errorf("connect to the cluster: %w", err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme, HTTPClient: hc, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("connect to the cluster: %w", err)
	}
	return NewRetryingClient(c, bound, opts...)
}

// Do runs call, which talks to the API server (through another client than this one, a
// discovery client), under the client's retries: the attempts, the bound and the telling of an
// outage are the client's own. op names the call for Wait.
func (c *RetryingClient) Do(ctx context.Context, op string, call func(context.Context) error) error {
	return c.do(ctx, op, call)
}

// do is Do.
func (c *RetryingClient) do(ctx context.Context, op string, call func(context.Context) error) error {
	noAnswer := fmt.Errorf("no answer within %s", c.attempt)
	var last error
	err := backoff.Retry(ctx, c.policy, func(ctx context.Context) error {
		actx, cancel := context.WithTimeoutCause(ctx, c.attempt, noAnswer)
		deadline, _ := actx.Deadline()
		err := call(actx)
		// A dial carries the attempt's deadline to the socket, whose timeout can fire before
		// the context's own timer does: a timeout once the deadline passed is no answer too.
		timedOut := errors.Is(context.Cause(actx), noAnswer) || (isTimeout(err) && !time.Now().Before(deadline))
		cancel()
		if err == nil {
			c.up()
			return nil
		}
		if ctx.Err() != nil {
			return backoff.Permanent(err)
		}
		why, ok := Transient(err)
		if timedOut {
			why, ok = noAnswer.Error(), true
		}
		if !ok {
			return backoff.Permanent(err)
		}
		last = err
		c.wait(Wait{Op: op, Why: why, Err: err, Bound: c.bound})
		return err
	})
	switch {
	case err == nil || last == nil:
		return err
	case errors.Is(err, backoff.ErrGaveUp):
		return fmt.Errorf("%w within %s: %w", ErrAPIUnavailable, c.bound, last)
	case ctx.Err() != nil:
		return fmt.Errorf("stopped waiting for the API server (%w): %w", context.Cause(ctx), last)
	}
	return err
}

// isTimeout reports whether err is a timeout: a deadline passed or a network read or dial timed out.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

// wait tells the first failure of an outage.
func (c *RetryingClient) wait(w Wait) {
	c.mu.Lock()
	first := !c.down
	c.down = true
	c.mu.Unlock()
	if first && c.waiting != nil {
		c.waiting(w)
	}
}

// up ends an outage.
func (c *RetryingClient) up() {
	c.mu.Lock()
	c.down = false
	c.mu.Unlock()
}

// op names a call on obj for Wait: the verb, the kind in lower case and the name.
func (c *RetryingClient) op(verb string, obj any) string {
	kind := fmt.Sprintf("%T", obj)
	if ro, ok := obj.(client.Object); ok {
		if gvk, err := c.GroupVersionKindFor(ro); err == nil {
			kind = gvk.Kind
		}
	} else if lo, ok := obj.(client.ObjectList); ok {
		if gvk, err := c.GroupVersionKindFor(lo); err == nil {
			kind = strings.TrimSuffix(gvk.Kind, "List") + "s"
		}
	}
	kind = strings.ToLower(kind[strings.LastIndex(kind, ".")+1:])
	if o, ok := obj.(client.Object); ok && o.GetName() != "" {
		if ns := o.GetNamespace(); ns != "" {
			return verb + " " + kind + " " + ns + "/" + o.GetName()
		}
		return verb + " " + kind + " " + o.GetName()
	}
	return verb + " " + kind
}

// Get implements client.Reader, with retries.
func (c *RetryingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	op := c.op("get", obj)
	if obj.GetName() == "" {
		op += " " + key.String()
	}
	return c.do(ctx, op, func(ctx context.Context) error { return c.WithWatch.Get(ctx, key, obj, opts...) })
}

// List implements client.Reader, with retries.
func (c *RetryingClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.do(ctx, c.op("list", list), func(ctx context.Context) error { return c.WithWatch.List(ctx, list, opts...) })
}

// Create implements client.Writer, with retries: see RetryingClient for a Create that landed
// before its answer was lost.
func (c *RetryingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return c.do(ctx, c.op("create", obj), func(ctx context.Context) error { return c.WithWatch.Create(ctx, obj, opts...) })
}

// Update implements client.Writer, with retries: see RetryingClient for an Update that landed
// before its answer was lost.
func (c *RetryingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.do(ctx, c.op("update", obj), func(ctx context.Context) error { return c.WithWatch.Update(ctx, obj, opts...) })
}

// Patch implements client.Writer, with retries; the patch must be one that can be applied
// twice (a merge patch, not a JSON patch that appends).
func (c *RetryingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.do(ctx, c.op("patch", obj), func(ctx context.Context) error { return c.WithWatch.Patch(ctx, obj, patch, opts...) })
}

// Delete implements client.Writer, with retries: once an attempt failed transiently, a later
// one that finds the object gone succeeds, the object being gone as asked.
func (c *RetryingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	tried := false
	return c.do(ctx, c.op("delete", obj), func(ctx context.Context) error {
		err := c.WithWatch.Delete(ctx, obj, opts...)
		if tried && apierrors.IsNotFound(err) {
			return nil
		}
		tried = true
		return err
	})
}

// DeleteAllOf implements client.Writer, with retries.
func (c *RetryingClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	return c.do(ctx, c.op("delete all of", obj), func(ctx context.Context) error { return c.WithWatch.DeleteAllOf(ctx, obj, opts...) })
}

// Watch implements client.WithWatch: its opening is retried, its events are not (an open watch
// that the API server's going away ends is closed, and the caller reads again).
func (c *RetryingClient) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	var w watch.Interface
	err := c.do(ctx, c.op("watch", list), func(actx context.Context) error {
		// The attempt's timeout bounds the opening only: the watch lives on ctx.
		wctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(actx, cancel)
		ww, err := c.WithWatch.Watch(wctx, list, opts...)
		if !stop() {
			// The attempt timed out (or ctx ended) while the watch opened.
			if err == nil {
				ww.Stop()
			}
			return fmt.Errorf("open watch: %w", context.Cause(actx))
		}
		if err != nil {
			cancel()
			return err
		}
		w = stopWatch{Interface: ww, cancel: cancel}
		return nil
	})
	return w, err
}

// stopWatch ends its context when stopped.
type stopWatch struct {
	watch.Interface
	cancel context.CancelFunc
}

// Stop implements watch.Interface.
func (s stopWatch) Stop() {
	s.Interface.Stop()
	s.cancel()
}
