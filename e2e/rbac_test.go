package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiv1beta1 "github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// nodeNameExtra is the user extra in which the API server names the node of a token bound to a
// pod; the chart's ValidatingAdmissionPolicy compares it with the RepoNode's name.
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// TestRBACSequencerWritesOnlyInItsNamespaces checks, with SubjectAccessReviews, that the
// sequencer's ServiceAccount writes namespaced objects only where its Roles put it (its own
// namespace; events about UpgradePlans in default) and keeps cluster-wide what drains need.
func TestRBACSequencerWritesOnlyInItsNamespaces(t *testing.T) {
	c := env(t)
	user := fmt.Sprintf("system:serviceaccount:%s:%s-sequencer", c.namespace, c.release)
	attr := func(group, resource, verb, ns string) authorizationv1.ResourceAttributes {
		sub := ""
		if i := strings.IndexByte(resource, '/'); i >= 0 {
			resource, sub = resource[:i], resource[i+1:]
		}
		return authorizationv1.ResourceAttributes{Group: group, Resource: resource, Subresource: sub, Verb: verb, Namespace: ns}
	}
	tests := []struct {
		name    string
		attr    authorizationv1.ResourceAttributes
		allowed bool
	}{
		{name: "create jobs in its namespace", attr: attr("batch", "jobs", "create", c.namespace), allowed: true},
		{name: "delete its jobs", attr: attr("batch", "jobs", "deletecollection", c.namespace), allowed: true},
		{name: "create jobs in kube-system", attr: attr("batch", "jobs", "create", "kube-system")},
		{name: "create jobs in default", attr: attr("batch", "jobs", "create", "default")},
		{name: "delete jobs in kube-system", attr: attr("batch", "jobs", "deletecollection", "kube-system")},
		{name: "update configmaps in its namespace", attr: attr("", "configmaps", "update", c.namespace), allowed: true},
		{name: "update configmaps in kube-system", attr: attr("", "configmaps", "update", "kube-system")},
		{name: "update its lease", attr: attr("coordination.k8s.io", "leases", "update", c.namespace), allowed: true},
		{name: "update leases in kube-node-lease", attr: attr("coordination.k8s.io", "leases", "update", "kube-node-lease")},
		{name: "create events about plans in default", attr: attr("events.k8s.io", "events", "create", "default"), allowed: true},
		{name: "create core events in default", attr: attr("", "events", "create", "default")},
		{name: "create leader election events in its namespace", attr: attr("", "events", "create", c.namespace), allowed: true},
		{name: "create events in kube-system", attr: attr("", "events", "create", "kube-system")},
		{name: "create events about plans in kube-system", attr: attr("events.k8s.io", "events", "create", "kube-system")},
		{name: "create suc plans in kube-system", attr: attr("upgrade.cattle.io", "plans", "create", "kube-system")},
		{name: "read secrets in its namespace", attr: attr("", "secrets", "get", c.namespace)},
		{name: "list pods everywhere", attr: attr("", "pods", "list", ""), allowed: true},
		{name: "evict pods in kube-system", attr: attr("", "pods/eviction", "create", "kube-system"), allowed: true},
		{name: "cordon nodes", attr: attr("", "nodes", "patch", ""), allowed: true},
		{name: "list poddisruptionbudgets everywhere", attr: attr("policy", "poddisruptionbudgets", "list", ""), allowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := accessReview(t, c, user, tt.attr)
			require.Equal(t, tt.allowed, got.Allowed, "%s may %s: %+v", user, tt.name, got)
		})
	}
}

// TestRBACAgentWritesOnlyItsRepoNode checks the chart's admission policy with real tokens of the
// agent's ServiceAccount: one bound to an agent pod, as the kubelet's projected token of that pod
// is (the TokenRequest the kubelet makes), may write its node's RepoNode and no other; one bound
// to no pod names no node and writes none. Every write is a dry run: admission runs, nothing is
// stored, so the agents' reports stay theirs.
func TestRBACAgentWritesOnlyItsRepoNode(t *testing.T) {
	c := env(t)
	sa := c.release + "-agent"
	policy := sa + "-own-node"
	eventually(t, time.Minute, "ValidatingAdmissionPolicy "+policy, func(ctx context.Context) error {
		_, err := c.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, policy, metav1.GetOptions{})
		return err
	})
	waitDaemonSetReady(t, c, sa, 8*time.Minute)
	node := c.nodes[0].Name
	var pod types.NamespacedName
	var podUID types.UID
	eventually(t, 2*time.Minute, "a running agent pod on "+node, func(ctx context.Context) error {
		pods, err := c.cs.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=agent,app.kubernetes.io/instance=" + c.release,
			FieldSelector: "spec.nodeName=" + node,
		})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == "Running" {
				pod, podUID = types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, p.UID
				return nil
			}
		}
		return fmt.Errorf("none of the %d agent pods on %s runs", len(pods.Items), node)
	})
	eventually(t, 2*time.Minute, "RepoNode "+node+" written by its agent", func(ctx context.Context) error {
		return c.cl.Get(ctx, client.ObjectKey{Name: node}, &apiv1beta1.RepoNode{})
	})

	bound := tokenClient(t, c, sa, &authenticationv1.BoundObjectReference{
		Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: podUID,
	})
	// The API server must name the pod's node in the token's user: that is what the policy reads.
	var who *authenticationv1.SelfSubjectReview
	eventually(t, time.Minute, "self subject review of the agent pod's token", func(ctx context.Context) error {
		var err error
		who, err = bound.cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		return err
	})
	require.Equal(t, fmt.Sprintf("system:serviceaccount:%s:%s", c.namespace, sa), who.Status.UserInfo.Username)
	require.Equal(t, authenticationv1.ExtraValue{node}, who.Status.UserInfo.Extra[nodeNameExtra],
		"the token bound to pod %s names no node: %+v", pod, who.Status.UserInfo.Extra)

	heartbeat := func(name string) func(context.Context, client.Client) error {
		return func(ctx context.Context, cl client.Client) error {
			patch := fmt.Sprintf(`{"status":{"heartbeatTime":%q}}`, time.Now().UTC().Format(time.RFC3339))
			rn := &apiv1beta1.RepoNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
			return cl.Status().Patch(ctx, rn, client.RawPatch(types.MergePatchType, []byte(patch)), client.DryRunAll)
		}
	}
	create := func(name string) func(context.Context, client.Client) error {
		return func(ctx context.Context, cl client.Client) error {
			return cl.Create(ctx, &apiv1beta1.RepoNode{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.DryRunAll)
		}
	}
	const forged = "e2e-forged-node"
	t.Run("its own RepoNode", func(t *testing.T) {
		expectWrite(t, bound.cl, "the agent of "+node+" patches its RepoNode's status", heartbeat(node), "")
		// Admission lets the create through; the RepoNode the agent made is in the way.
		err := writeOutcome(t, bound.cl, "the agent of "+node+" creates its RepoNode", create(node))
		require.True(t, apierrors.IsAlreadyExists(err), "create RepoNode %s as its agent: %v", node, err)
	})
	t.Run("another node's RepoNode", func(t *testing.T) {
		want := fmt.Sprintf("the agent of node %s may write the RepoNode %s only, not ", node, node)
		expectWrite(t, bound.cl, "the agent of "+node+" creates RepoNode "+forged, create(forged), want+forged)
		for _, n := range c.nodes[1:] {
			expectWrite(t, bound.cl, "the agent of "+node+" patches RepoNode "+n.Name, heartbeat(n.Name), want+n.Name)
		}
		// The policy concerns the agents only: the same create as the test's own user passes.
		expectWrite(t, c.cl, "the test's user creates RepoNode "+forged, create(forged), "")
	})
	t.Run("a token bound to no pod", func(t *testing.T) {
		unbound := tokenClient(t, c, sa, nil)
		expectWrite(t, unbound.cl, "the agent's ServiceAccount, with a token bound to no pod, patches RepoNode "+node,
			heartbeat(node), "the agent's token names no node")
	})
}

// tokenClients are clients that authenticate with one ServiceAccount token and nothing else.
type tokenClients struct {
	cs kubernetes.Interface
	cl client.Client
}

// tokenClient requests a token of the ServiceAccount sa (bound to ref when it is not nil, as the
// kubelet does for a pod's projected token) and returns clients that use only it.
func tokenClient(t *testing.T, c *cluster, sa string, ref *authenticationv1.BoundObjectReference) tokenClients {
	t.Helper()
	var token string
	eventually(t, time.Minute, "a token of "+sa, func(ctx context.Context) error {
		tr, err := c.cs.CoreV1().ServiceAccounts(c.namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600), BoundObjectRef: ref},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		token = tr.Status.Token
		return nil
	})
	admin, err := clientcmd.BuildConfigFromFlags("", os.Getenv("E2E_KUBECONFIG"))
	require.NoError(t, err)
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = token
	var out tokenClients
	out.cs, err = kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, apiv1beta1.AddToScheme(scheme))
	out.cl, err = client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	return out
}

// expectWrite makes write with cl until it succeeds (refusal empty) or is refused as Forbidden
// with a message containing refusal, and fails the test with the last outcome otherwise. It
// polls because an admission policy takes effect a moment after it is created.
func expectWrite(t *testing.T, cl client.Client, what string, write func(context.Context, client.Client) error, refusal string) {
	t.Helper()
	eventually(t, time.Minute, what+outcome(refusal), func(ctx context.Context) error {
		err := write(ctx, cl)
		switch {
		case refusal == "" && err == nil:
			return nil
		case refusal == "" && err != nil:
			return err
		case err == nil:
			return errors.New("allowed")
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), refusal):
			return nil
		}
		return fmt.Errorf("not the refusal expected: %w", err)
	})
}

// outcome says what expectWrite waits for.
func outcome(refusal string) string {
	if refusal == "" {
		return ": allowed"
	}
	return ": refused"
}

// writeOutcome makes write with cl, again while the API server is unsteady, and returns its
// outcome as the API server gave it.
func writeOutcome(t *testing.T, cl client.Client, what string, write func(context.Context, client.Client) error) error {
	t.Helper()
	var last error
	eventually(t, time.Minute, what, func(ctx context.Context) error {
		last = write(ctx, cl)
		var status apierrors.APIStatus
		if last == nil || errors.As(last, &status) && !apierrors.IsServerTimeout(last) && !apierrors.IsTimeout(last) &&
			!apierrors.IsTooManyRequests(last) && !apierrors.IsServiceUnavailable(last) {
			return nil
		}
		return last
	})
	return last
}
