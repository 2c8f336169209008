package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// runSequencer runs the controller that drives UpgradePlans, under leader election.
func runSequencer(ctx context.Context, a *app, args []string) error {
	fset := flag.NewFlagSet("sequencer", flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	kubeconfig := fset.String("kubeconfig", "", "kubeconfig `file`; the in-cluster configuration when empty")
	namespace := fset.String("namespace", "", "`namespace` of the Jobs, the installed-version ConfigMap, the repo Service and the leader lease (POD_NAMESPACE when empty, else upgrade-repo-system)")
	service := fset.String("service", "upgrade-repo", "`name` of the repo Service")
	repoURL := fset.String("repo-url", "", "base `URL` of the repo Service (http://SERVICE.NAMESPACE.svc:8080 when empty)")
	image := fset.String("upgrade-image", "", "upgrade `image` for plans that name none")
	sucNamespace := fset.String("suc-namespace", "cattle-system", "system-upgrade-controller's `namespace`")
	leaderElect := fset.Bool("leader-elect", true, "elect a leader among replicas")
	leaseNamespace := fset.String("leader-election-namespace", "", "`namespace` of the leader lease (--namespace when empty)")
	metricsAddr := fset.String("metrics-bind-address", ":8081", "`address` of the metrics endpoint; 0 disables it")
	probeAddr := fset.String("health-probe-bind-address", ":8082", "`address` of the health probes")
	stallAfter := fset.Duration("stall-after", sequencer.DefaultConfig.StallAfter, "how long a short phase may wait before the plan is Degraded")
	heartbeat := fset.Duration("heartbeat-timeout", sequencer.DefaultConfig.HeartbeatTimeout, "how old an agent's report may be")
	poll := fset.Duration("poll", sequencer.DefaultConfig.Poll, "how often a waiting plan is looked at again")
	if help, err := parseFlags(fset, args); help || err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return fmt.Errorf("%w: sequencer takes no arguments, got %q", errUsage, fset.Args())
	}
	ns := *namespace
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	if ns == "" {
		ns = "upgrade-repo-system"
	}
	if *leaseNamespace == "" {
		*leaseNamespace = ns
	}
	cfg, err := sequencerRESTConfig(*kubeconfig)
	if err != nil {
		return err
	}
	s, err := planScheme()
	if err != nil {
		return err
	}
	ctrl.SetLogger(logr.FromSlogHandler(a.log.Handler()))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  s,
		LeaderElection:          *leaderElect,
		LeaderElectionID:        "upgrade-repo-sequencer",
		LeaderElectionNamespace: *leaseNamespace,
		// Give up the lease on shutdown so a new leader starts at once.
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: *metricsAddr},
		// What the sequencer creates or reads by name lives in its namespace: cache only that.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}:          {Namespaces: map[string]cache.Config{ns: {}}},
			&batchv1.Job{}:               {Namespaces: map[string]cache.Config{ns: {}}},
			&discoveryv1.EndpointSlice{}: {Namespaces: map[string]cache.Config{ns: {}}},
		}},
		HealthProbeBindAddress: *probeAddr,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	r, err := sequencer.NewReconciler(mgr.GetClient(), a.log.With("component", "sequencer"),
		sequencer.WithNamespace(ns),
		sequencer.WithService(*service),
		sequencer.WithRepoURL(*repoURL),
		sequencer.WithUpgradeImage(*image),
		sequencer.WithSUCNamespace(*sucNamespace),
		// The core/v1 recorder: the events.k8s.io/v1 one that replaces it has another signature.
		sequencer.WithEventRecorder(mgr.GetEventRecorderFor("upgrade-repo-sequencer")),
		sequencer.WithConfig(sequencer.Config{StallAfter: *stallAfter, HeartbeatTimeout: *heartbeat, Poll: *poll}),
	)
	if err != nil {
		return err
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("add ready check: %w", err)
	}
	a.log.Info("sequencer starting", "namespace", ns, "service", *service, "leaderElect", *leaderElect)
	start := time.Now()
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("run manager: %w", err)
	}
	a.log.Info("sequencer stopped", "uptime", time.Since(start).Round(time.Second))
	return nil
}

// sequencerRESTConfig loads kubeconfig, or the in-cluster configuration when it is empty.
func sequencerRESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster configuration (give --kubeconfig outside a cluster): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}
