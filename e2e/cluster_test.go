package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiv1beta1 "github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// cluster is the cluster under test, as hack/e2e.sh describes it in E2E_* variables.
type cluster struct {
	// name is the kind cluster's name; its nodes are docker containers named after it.
	name string
	// namespace and release are where and under which name the chart is installed.
	namespace, release string
	// image is the project image loaded into every node; version is what its binary reports.
	image, version string
	// artifacts is a directory for files the tests leave for a post-mortem.
	artifacts string
	// cs is a client-go clientset and cl a controller-runtime client knowing the project's CRDs.
	cs kubernetes.Interface
	cl client.Client
	// nodes are the cluster's nodes, management nodes first.
	nodes []corev1.Node
	// formation names the cluster's formation (hack/e2e.sh: single, two, three, witness, four).
	formation string
	// reboot says the test upgrade image reboots each node after its work.
	reboot bool
}

var (
	clusterOnce sync.Once
	clusterVal  *cluster
	clusterErr  error
)

// env returns the cluster under test, or skips the test when none was given.
func env(t *testing.T) *cluster {
	t.Helper()
	if os.Getenv("E2E_KUBECONFIG") == "" {
		t.Skip("E2E_KUBECONFIG is not set: run the end-to-end tests through `make e2e`")
	}
	clusterOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		clusterVal, clusterErr = connect(ctx)
	})
	require.NoError(t, clusterErr)
	return clusterVal
}

// getenv returns the variable's value, or def when it is unset or empty.
func getenv(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// connect builds the clients and waits, with retries, until the API server answers and lists
// the nodes: under load the kind control plane may drop the first calls.
func connect(ctx context.Context) (*cluster, error) {
	c := &cluster{
		name:      getenv("E2E_CLUSTER", "upgrade-repo-e2e"),
		namespace: getenv("E2E_NAMESPACE", "upgrade-repo-system"),
		release:   getenv("E2E_RELEASE", "upgrade-repo"),
		image:     getenv("E2E_IMAGE", "upgrade-repo:e2e"),
		version:   os.Getenv("E2E_VERSION"),
		artifacts: getenv("E2E_ARTIFACTS", os.TempDir()),
		formation: getenv("E2E_FORMATION", "custom"),
		reboot:    os.Getenv("E2E_REBOOT") == "1",
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("E2E_KUBECONFIG"))
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", os.Getenv("E2E_KUBECONFIG"), err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	// A node reboot takes the API server down for a minute or more: a call must fail, and be
	// retried by its poll, rather than hang on a connection that went away with it.
	cfg.Dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 15 * time.Second}).DialContext
	if c.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("clientset: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	if err := apiv1beta1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	if c.cl, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, fmt.Errorf("controller-runtime client: %w", err)
	}
	err = poll(ctx, 2*time.Second, func(ctx context.Context) error {
		nodes, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list nodes: %w", err)
		}
		if len(nodes.Items) == 0 {
			return errors.New("the cluster has no nodes")
		}
		c.nodes = sortManagementFirst(nodes.Items)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// sortManagementFirst orders nodes management first, then by name.
func sortManagementFirst(nodes []corev1.Node) []corev1.Node {
	out := make([]corev1.Node, 0, len(nodes))
	for _, mgmt := range []bool{true, false} {
		var part []corev1.Node
		for _, n := range nodes {
			if isManagement(n) == mgmt {
				part = append(part, n)
			}
		}
		for i := 1; i < len(part); i++ {
			for j := i; j > 0 && part[j].Name < part[j-1].Name; j-- {
				part[j], part[j-1] = part[j-1], part[j]
			}
		}
		out = append(out, part...)
	}
	return out
}

// managementLabels are the labels of a management node (Harvester's control-plane, etcd and
// witness nodes): the sequencer upgrades those one at a time, before the others.
var managementLabels = []string{
	"node-role.kubernetes.io/control-plane",
	"node-role.kubernetes.io/master",
	"node-role.kubernetes.io/etcd",
}

// isManagement reports whether n carries a management label.
func isManagement(n corev1.Node) bool {
	for _, l := range managementLabels {
		if _, ok := n.Labels[l]; ok {
			return true
		}
	}
	return false
}

// internalIP returns the node's InternalIP, which the host reaches kind nodes on.
func internalIP(t *testing.T, n corev1.Node) string {
	t.Helper()
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && !strings.Contains(a.Address, ":") {
			return a.Address
		}
	}
	require.Failf(t, "node has no IPv4 InternalIP", "node %s: %v", n.Name, n.Status.Addresses)
	return ""
}

// attemptTimeout bounds one attempt of a poll, so a call that hangs while the API server is
// down (a node reboot) is given up and retried.
const attemptTimeout = 2 * time.Minute

// poll calls check every interval until it returns nil or ctx ends; the error then names the
// last failure, so a timeout says what was still wrong. Each call of check gets at most
// attemptTimeout.
func poll(ctx context.Context, interval time.Duration, check func(context.Context) error) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := check(actx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting: %w (last: %w)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// eventually polls check for at most timeout and fails the test with the last error.
func eventually(t *testing.T, timeout time.Duration, what string, check func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	start := time.Now()
	require.NoError(t, poll(ctx, 2*time.Second, check), what)
	if d := time.Since(start); d > time.Second {
		t.Logf("%s after %s", what, d.Round(100*time.Millisecond))
	}
}
