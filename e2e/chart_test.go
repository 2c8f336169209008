package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestChartSchedulesAgentOnEveryNode checks that the agent DaemonSet, with the chart's
// tolerations, places one pod on every node, control planes included.
func TestChartSchedulesAgentOnEveryNode(t *testing.T) {
	c := env(t)
	name := c.release + "-agent"
	eventually(t, 3*time.Minute, "agent pods scheduled on every node", func(ctx context.Context) error {
		ds, err := c.cs.AppsV1().DaemonSets(c.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if int(ds.Status.DesiredNumberScheduled) != len(c.nodes) || int(ds.Status.CurrentNumberScheduled) != len(c.nodes) {
			return fmt.Errorf("daemonset %s: %d desired, %d scheduled, %d nodes", name,
				ds.Status.DesiredNumberScheduled, ds.Status.CurrentNumberScheduled, len(c.nodes))
		}
		return nil
	})
}

// TestChartInstallsCRDs checks that the chart's CRDs are established, so the API serves them.
func TestChartInstallsCRDs(t *testing.T) {
	c := env(t)
	for _, name := range []string{
		"versions.management.harvesterhci.io",
		"upgradeplans.management.harvesterhci.io",
		"reponodes.management.harvesterhci.io",
	} {
		eventually(t, 2*time.Minute, "CRD "+name+" established", func(ctx context.Context) error {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := c.cl.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
				return err
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("CRD %s is not established: %v", name, crd.Status.Conditions)
		})
	}
}

// TestChartAgentRBAC checks the agent's ServiceAccount may do what the agent needs and nothing
// more: the chart binds the ClusterRole controller-gen generated from the agent's markers.
func TestChartAgentRBAC(t *testing.T) {
	c := env(t)
	user := fmt.Sprintf("system:serviceaccount:%s:%s-agent", c.namespace, c.release)
	const group = "management.harvesterhci.io"
	tests := []struct {
		name    string
		attr    authorizationv1.ResourceAttributes
		allowed bool
	}{
		{name: "create reponodes", attr: authorizationv1.ResourceAttributes{Group: group, Resource: "reponodes", Verb: "create"}, allowed: true},
		{name: "patch reponodes status", attr: authorizationv1.ResourceAttributes{Group: group, Resource: "reponodes", Subresource: "status", Verb: "patch"}, allowed: true},
		{name: "watch upgradeplans", attr: authorizationv1.ResourceAttributes{Group: group, Resource: "upgradeplans", Verb: "watch"}, allowed: true},
		{name: "delete reponodes", attr: authorizationv1.ResourceAttributes{Group: group, Resource: "reponodes", Verb: "delete"}},
		{name: "update upgradeplans", attr: authorizationv1.ResourceAttributes{Group: group, Resource: "upgradeplans", Verb: "update"}},
		{name: "read secrets", attr: authorizationv1.ResourceAttributes{Resource: "secrets", Verb: "get", Namespace: c.namespace}},
		{name: "patch nodes", attr: authorizationv1.ResourceAttributes{Resource: "nodes", Verb: "patch"}},
		{name: "create pods", attr: authorizationv1.ResourceAttributes{Resource: "pods", Verb: "create", Namespace: c.namespace}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := accessReview(t, c, user, tt.attr)
			require.Equal(t, tt.allowed, got.Allowed, "%s may %s: %+v", user, tt.name, got)
		})
	}
}

// TestSequencerElectsOneLeader checks the sequencer Deployment runs ready and that one of its
// pods holds the leader Lease, so exactly one replica reconciles.
func TestSequencerElectsOneLeader(t *testing.T) {
	c := env(t)
	name := c.release + "-sequencer"
	eventuallyDeploymentReady(t, c, name, 5*time.Minute)
	eventually(t, 3*time.Minute, "a sequencer pod holds the leader lease", func(ctx context.Context) error {
		lease, err := c.cs.CoordinationV1().Leases(c.namespace).Get(ctx, "upgrade-repo-sequencer", metav1.GetOptions{})
		if err != nil {
			return err
		}
		holder := ""
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		pods, err := c.cs.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=sequencer,app.kubernetes.io/instance=" + c.release,
		})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && strings.HasPrefix(holder, p.Name+"_") {
				return nil
			}
		}
		return fmt.Errorf("lease holder %q is none of the %d sequencer pods", holder, len(pods.Items))
	})
}

// accessReview asks the API server whether user may do attr, retrying through API hiccups.
func accessReview(t *testing.T, c *cluster, user string, attr authorizationv1.ResourceAttributes) authorizationv1.SubjectAccessReviewStatus {
	t.Helper()
	var got *authorizationv1.SubjectAccessReview
	eventually(t, time.Minute, "access review", func(ctx context.Context) error {
		var err error
		got, err = c.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &attr},
		}, metav1.CreateOptions{})
		return err
	})
	return got.Status
}
