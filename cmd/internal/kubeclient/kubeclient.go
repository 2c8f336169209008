// Package kubeclient is the one place the project's commands build their clients of the
// Kubernetes API: the configuration of the cluster kubectl would talk to (its loading rules: a
// kubeconfig, else $KUBECONFIG, else ~/.kube/config, else the in-cluster configuration of a pod;
// the context, else the current one), the scheme that knows the core kinds and the project's
// API, the flags that name the cluster (kubectl's --kubeconfig, --context and -n/--namespace,
// and --api-timeout), and the clients built from them. Only the commands under cmd/ import it.
//
// Imports: api/v1beta1, cli (the usage error) and planctl (the client that rides out a
// restarting API server).
package kubeclient

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/cmd/internal/cli"
	"github.com/upgrade-repo/upgrade-repo/planctl"
)

// DefaultNamespace is the namespace the chart and the manifests install the sequencer into.
const DefaultNamespace = "upgrade-repo-system"

// ErrNoKubeconfig says that no kubeconfig was found and the process does not run in a pod.
var ErrNoKubeconfig = errors.New("none found (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not running in a cluster")

// Config loads the configuration of the cluster kubectl would talk to: clientcmd's loading
// rules (kubeconfig, else $KUBECONFIG, else ~/.kube/config, else the in-cluster configuration of
// a pod) and the context to use (the current one when empty). With neither a kubeconfig nor a
// pod's configuration the error wraps ErrNoKubeconfig.
func Config(kubeconfig, context string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	switch {
	case err == nil:
		if kubeconfig == "" && inClusterFallback(rules) {
			cfg.Dial = (&net.Dialer{Timeout: inClusterDialTimeout, KeepAlive: 30 * time.Second}).DialContext
		}
		return cfg, nil
	case kubeconfig != "":
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	case clientcmd.IsEmptyConfig(err):
		return nil, fmt.Errorf("load kubeconfig: %w", ErrNoKubeconfig)
	}
	return nil, fmt.Errorf("load kubeconfig: %w", err)
}

// inClusterDialTimeout bounds a pod's connect to the API server through its Service. After its
// node restarts, a pod may start before kube-proxy has written the Service's rules: its first
// connect then goes nowhere, and client-go's 30 s connect timeout left the agent blind that long
// (a rebooted kind node's agent reached the API server 30 s after its start, and the plan waited
// for it). Within a cluster a connect takes milliseconds; the retry after 5 s finds the rules.
const inClusterDialTimeout = 5 * time.Second

// inClusterFallback reports whether rules find no kubeconfig, so that the configuration is the
// pod's in-cluster one.
func inClusterFallback(rules *clientcmd.ClientConfigLoadingRules) bool {
	c, err := rules.Load()
	return err == nil && len(c.Clusters) == 0
}

// InCluster reports whether the process runs in a pod that has the in-cluster configuration.
func InCluster() bool {
	_, err := rest.InClusterConfig()
	return err == nil
}

// Scheme returns a scheme that knows the core kinds and v1beta1.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	if err := v1beta1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("build scheme: %w", err)
	}
	return s, nil
}

// New builds a client of the cluster of cfg that knows Scheme's kinds and watches.
func New(cfg *rest.Config) (client.WithWatch, error) {
	s, err := Scheme()
	if err != nil {
		return nil, err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("connect to the cluster: %w", err)
	}
	return c, nil
}

// Clientset builds client-go's typed clientset of the cluster of cfg.
func Clientset(cfg *rest.Config) (*kubernetes.Clientset, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the cluster: %w", err)
	}
	return cs, nil
}

// Options are the flags of every command that talks to the cluster as a client (plan and the
// upgrade verbs): which cluster and namespace, as kubectl takes them, and how long to wait for
// its API server while it is away.
type Options struct {
	// Kubeconfig is the kubeconfig file; empty: kubectl's loading rules.
	Kubeconfig string
	// Context is the kubeconfig context; empty: the current one.
	Context string
	// Namespace is the sequencer's: where the installed-version ConfigMap and its pods are.
	Namespace string
	// APITimeout bounds each wait for an API server that is away (planctl.RetryingClient).
	APITimeout time.Duration
}

// AddFlags registers kubectl's --kubeconfig, --context and -n/--namespace, and --api-timeout, on
// fset.
func (o *Options) AddFlags(fset *flag.FlagSet) {
	fset.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig `file`; else $KUBECONFIG, else ~/.kube/config, as kubectl")
	fset.StringVar(&o.Context, "context", "", "the kubeconfig `context` to use; its current context when empty")
	fset.StringVar(&o.Namespace, "namespace", DefaultNamespace, "the sequencer's `namespace`, where the installed version is recorded")
	fset.StringVar(&o.Namespace, "n", DefaultNamespace, "same as --namespace, as kubectl")
	fset.DurationVar(&o.APITimeout, "api-timeout", planctl.DefaultAPITimeout,
		"how long to wait for an API server that is away (restarting, electing a leader, overloaded) before failing")
}

// Check refuses flags that cannot work, with a usage error.
func (o Options) Check() error {
	switch {
	case o.APITimeout <= 0:
		return fmt.Errorf("%w: --api-timeout must be positive", cli.ErrUsage)
	case o.Namespace == "":
		return fmt.Errorf("%w: --namespace must not be empty", cli.ErrUsage)
	}
	return nil
}

// Config loads the configuration of the cluster o names (Config).
func (o Options) Config() (*rest.Config, error) { return Config(o.Kubeconfig, o.Context) }

// Retrying builds a client of the cluster of cfg that knows Scheme's kinds and waits for its API
// server for at most apiTimeout at each outage, saying once on stderr that it waits and why.
func Retrying(cfg *rest.Config, apiTimeout time.Duration, stderr io.Writer) (*planctl.RetryingClient, error) {
	s, err := Scheme()
	if err != nil {
		return nil, err
	}
	return planctl.NewClusterClient(cfg, s, apiTimeout, planctl.WithWaiting(func(w planctl.Wait) {
		fmt.Fprintf(stderr, "upgrade-repo: waiting up to %s for the API server (%s: %s)\n", w.Bound, w.Op, w.Why)
	}))
}

// Client builds a client of the cluster o names that rides out a restarting API server
// (Retrying).
func (o Options) Client(stderr io.Writer) (*planctl.RetryingClient, error) {
	cfg, err := o.Config()
	if err != nil {
		return nil, err
	}
	return Retrying(cfg, o.APITimeout, stderr)
}

// Reader builds a client of the cluster o names, and one that asks its API server for its
// version.
func (o Options) Reader() (client.Reader, discovery.ServerVersionInterface, error) {
	cfg, err := o.Config()
	if err != nil {
		return nil, nil, err
	}
	c, err := New(cfg)
	if err != nil {
		return nil, nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to the cluster: %w", err)
	}
	return c, dc, nil
}
