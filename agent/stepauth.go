package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/nodestep"
)

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create

// StepTokenAudience is the audience of the service-account token a node step presents to its
// agent: a token projected for this audience alone, so that no other token of the pod (its API
// token) is accepted, nor this one by the API server.
const StepTokenAudience = nodestep.TokenAudience

// ErrUnauthenticated is wrapped by a StepAuthenticator's error when the token proves no identity:
// forged, expired, for another audience, or of a pod that no longer exists.
var ErrUnauthenticated = errors.New("the token proves no identity")

// StepIdentity is who a verified step token belongs to: a pod's service account, and the pod and
// node the API server bound the token to.
type StepIdentity struct {
	// Namespace and ServiceAccount are the token's service account
	// (system:serviceaccount:NAMESPACE:NAME).
	Namespace, ServiceAccount string
	// Pod and PodUID are the pod the token is bound to (extra authentication.kubernetes.io/pod-name
	// and pod-uid); empty for a token bound to no pod.
	Pod, PodUID string
	// Node is the node of that pod (extra authentication.kubernetes.io/node-name, which the API
	// server adds from Kubernetes 1.30 on); empty when the token does not say.
	Node string
}

// StepAuthenticator verifies the bearer token of a node step's report. Implementations are safe
// for concurrent use; Authenticate blocks for at most one round trip to the API server.
type StepAuthenticator interface {
	// Authenticate returns the identity token proves for StepTokenAudience. It wraps
	// ErrUnauthenticated when the token proves none, and returns another error when it could not
	// be told (the API server unreachable, the review refused).
	Authenticate(ctx context.Context, token string) (StepIdentity, error)
}

// TokenReviewer is the StepAuthenticator of a cluster: a TokenReview of the token for
// StepTokenAudience, through c.
type TokenReviewer struct {
	c client.Client
}

var _ StepAuthenticator = (*TokenReviewer)(nil)

// NewTokenReviewer returns the TokenReviewer over c, whose scheme must know authentication/v1.
func NewTokenReviewer(c client.Client) (*TokenReviewer, error) {
	if c == nil {
		return nil, errors.New("new token reviewer: a cluster client is required")
	}
	return &TokenReviewer{c: c}, nil
}

// The extra claims of a bound service-account token.
const (
	extraPodName  = "authentication.kubernetes.io/pod-name"
	extraPodUID   = "authentication.kubernetes.io/pod-uid"
	extraNodeName = "authentication.kubernetes.io/node-name"
)

// Authenticate implements StepAuthenticator.
func (t *TokenReviewer) Authenticate(ctx context.Context, token string) (StepIdentity, error) {
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{StepTokenAudience}}}
	if err := t.c.Create(ctx, tr); err != nil {
		return StepIdentity{}, fmt.Errorf("token review: %w", err)
	}
	return reviewed(tr.Status)
}

// reviewed reads the identity out of a TokenReview's status.
func reviewed(st authenticationv1.TokenReviewStatus) (StepIdentity, error) {
	if !st.Authenticated {
		if st.Error != "" {
			return StepIdentity{}, fmt.Errorf("%w: %s", ErrUnauthenticated, st.Error)
		}
		return StepIdentity{}, ErrUnauthenticated
	}
	// An API server that does not know audiences answers without them: the token may be one
	// of its own, which is not a step's.
	if !slices.Contains(st.Audiences, StepTokenAudience) {
		return StepIdentity{}, fmt.Errorf("%w: not a token for audience %s", ErrUnauthenticated, StepTokenAudience)
	}
	rest, ok := strings.CutPrefix(st.User.Username, "system:serviceaccount:")
	ns, sa, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || ns == "" || sa == "" {
		return StepIdentity{}, fmt.Errorf("%w: %q is not a service account", ErrUnauthenticated, st.User.Username)
	}
	one := func(key string) string {
		if v := st.User.Extra[key]; len(v) == 1 {
			return v[0]
		}
		return ""
	}
	return StepIdentity{Namespace: ns, ServiceAccount: sa, Pod: one(extraPodName), PodUID: one(extraPodUID), Node: one(extraNodeName)}, nil
}

// StepAuth says who may report a node's step: a token for StepTokenAudience of a pod that runs on
// Node, in Namespace, as ServiceAccount (the node Jobs' account).
type StepAuth struct {
	// Authenticator verifies the tokens (required).
	Authenticator StepAuthenticator
	// Namespace and ServiceAccount are those of the node Jobs' pods (required).
	Namespace, ServiceAccount string
}

// stepGate checks the bearer token of a step report and bounds how often reports are taken: it
// is what keeps anyone but the node's own step from moving the node's progress time.
//
// A verified token is remembered (by its sha256) for tokenTTL, so that the step's reports cost one
// review, and the reviews of tokens not remembered are bounded (reviews), so that a flood of
// forged tokens costs the API server little; reports that pass are bounded too (reports), so that
// even a valid token cannot hold the progress time up by repeating itself.
type stepGate struct {
	auth    StepAuth
	node    string
	reviews *rate.Limiter
	reports *rate.Limiter
	now     func() time.Time

	mu   sync.Mutex
	seen map[[sha256.Size]byte]time.Time // verified tokens → when they stop being trusted
}

const (
	// tokenTTL is how long a verified token is trusted without another review: much less than
	// a projected token's life (an hour at least), so a deleted pod's token is soon refused.
	tokenTTL = time.Minute
	// maxSeen bounds the tokens remembered; a node runs one step at a time.
	maxSeen = 16
)

// newStepGate returns the gate of node's step reports: reviews of unknown tokens at 1 a second
// (5 at once), reports at 1 every 2 seconds (20 at once: a step's stages and its retries).
func newStepGate(auth StepAuth, node string, now func() time.Time) *stepGate {
	return &stepGate{
		auth: auth, node: node, now: now,
		reviews: rate.NewLimiter(rate.Every(time.Second), 5),
		reports: rate.NewLimiter(rate.Every(2*time.Second), 20),
		seen:    map[[sha256.Size]byte]time.Time{},
	}
}

// errStepRefused is what check returns with the HTTP status of a refusal and a message that
// says why, without the token.
type errStepRefused struct {
	code int
	msg  string
}

func (e *errStepRefused) Error() string { return e.msg }

// check lets r's report through or says why not: 401 without a valid token, 403 for a valid token
// of another pod than the node's step, 429 past the rate bounds, 503 when the token could not be
// reviewed.
func (g *stepGate) check(r *http.Request) error {
	if g.auth.Authenticator == nil {
		return &errStepRefused{http.StatusForbidden, "step reports are verified with the cluster, and this agent has none"}
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return &errStepRefused{http.StatusUnauthorized, "a step report needs the step's service-account token (Authorization: Bearer, audience " + StepTokenAudience + ")"}
	}
	key := sha256.Sum256([]byte(token))
	if !g.remembered(key) {
		if !g.reviews.AllowN(g.now(), 1) {
			return &errStepRefused{http.StatusTooManyRequests, "too many step tokens to review: try again later"}
		}
		id, err := g.auth.Authenticator.Authenticate(r.Context(), token)
		switch {
		case errors.Is(err, ErrUnauthenticated):
			return &errStepRefused{http.StatusUnauthorized, "step report: " + err.Error()}
		case err != nil:
			return &errStepRefused{http.StatusServiceUnavailable, "step report: the token could not be verified: " + err.Error()}
		}
		if err := g.bound(id); err != nil {
			return &errStepRefused{http.StatusForbidden, "step report: " + err.Error()}
		}
		g.remember(key)
	}
	if !g.reports.AllowN(g.now(), 1) {
		return &errStepRefused{http.StatusTooManyRequests, "too many step reports: try again later"}
	}
	return nil
}

// bound reports why id is not this node's step, or nil.
func (g *stepGate) bound(id StepIdentity) error {
	switch {
	case id.Namespace != g.auth.Namespace || id.ServiceAccount != g.auth.ServiceAccount:
		return fmt.Errorf("service account %s/%s is not the node steps' (%s/%s)", id.Namespace, id.ServiceAccount, g.auth.Namespace, g.auth.ServiceAccount)
	case id.Pod == "":
		return errors.New("the token is bound to no pod")
	case id.Node == "":
		return fmt.Errorf("the token of pod %s names no node (Kubernetes 1.30 or later adds it)", id.Pod)
	case id.Node != g.node:
		return fmt.Errorf("pod %s runs on node %s, not on %s", id.Pod, id.Node, g.node)
	}
	return nil
}

func (g *stepGate) remembered(key [sha256.Size]byte) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	until, ok := g.seen[key]
	if ok && g.now().Before(until) {
		return true
	}
	delete(g.seen, key)
	return false
}

func (g *stepGate) remember(key [sha256.Size]byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if len(g.seen) >= maxSeen {
		for k, until := range g.seen {
			if !now.Before(until) {
				delete(g.seen, k)
			}
		}
	}
	if len(g.seen) >= maxSeen {
		clear(g.seen) // the tokens are reviewed again: only the cost of a review is lost
	}
	g.seen[key] = now.Add(tokenTTL)
}
