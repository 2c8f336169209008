package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/upgrade-repo/upgrade-repo/cmd/internal/kubeclient"
	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
	"github.com/upgrade-repo/upgrade-repo/sequencer"
)

// runSequencer runs the controller that drives UpgradePlans, under leader election.
func runSequencer(ctx context.Context, a *app, args []string) error {
	fset := flag.NewFlagSet("sequencer", flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	fset.Usage = func() {
		fmt.Fprintln(fset.Output(), "usage: upgrade-repo sequencer [flags]\n  the controller that drives UpgradePlans through their phases (the chart's Deployment runs it)")
		fset.PrintDefaults()
	}
	kubeconfig := fset.String("kubeconfig", "", "kubeconfig `file`; else $KUBECONFIG, else ~/.kube/config, else the in-cluster configuration")
	namespace := fset.String("namespace", "", "`namespace` of the Jobs, the installed-version ConfigMap, the repo Service and the leader lease (POD_NAMESPACE when empty, else upgrade-repo-system)")
	service := fset.String("service", "upgrade-repo", "`name` of the repo Service")
	repoURL := fset.String("repo-url", "", "base `URL` of the repo Service (http://SERVICE.NAMESPACE.svc, port 80, when empty)")
	image := fset.String("upgrade-image", "", "upgrade `image` for plans that name none")
	imageRepo := fset.String("upgrade-image-repository", "", "with no --upgrade-image, plans that name no image run this `repository` tagged with their version")
	seed := fset.String("installed-version", "", "the `version` the cluster runs, recorded once at start when nothing records one yet (the ConfigMap "+sequencer.InstalledConfigMap+" is created, never overwritten)")
	sucNamespace := fset.String("suc-namespace", "cattle-system", "system-upgrade-controller's `namespace`")
	leaderElect := fset.Bool("leader-elect", true, "elect a leader among replicas")
	leaseNamespace := fset.String("leader-election-namespace", "", "`namespace` of the leader lease (--namespace when empty)")
	metricsAddr := fset.String("metrics-bind-address", ":8081", "`address` of the metrics endpoint; 0 disables it")
	probeAddr := fset.String("health-probe-bind-address", ":8082", "`address` of the health probes")
	pprofAddr := fset.String("pprof-bind-address", "0", "`address` of Go's profiles (net/http/pprof, for measuring); 0 disables them")
	stallAfter := fset.Duration("stall-after", sequencer.DefaultConfig.StallAfter, "how long a short phase may wait before the plan is Degraded")
	heartbeat := fset.Duration("heartbeat-timeout", sequencer.DefaultConfig.HeartbeatTimeout, "how old an agent's report may be")
	poll := fset.Duration("poll", sequencer.DefaultConfig.Poll, "how often a waiting plan is looked at again")
	stepStall := fset.Duration("step-stall-after", sequencer.DefaultConfig.StepStallAfter, "how long a node may go without progress (preload, drain, node step, rejoin) or the cluster step may run before the plan is Degraded; 0 disables it")
	jobTimeout := fset.Duration("job-timeout", sequencer.DefaultJobTimeout, "how long a Job of the upgrade image may run before it is stopped and fails (activeDeadlineSeconds); 0 sets no deadline")
	keepPods := fset.String("keep-pods", "", "label `selector` of the pods in --namespace that drains leave (the sequencer's own replicas)")
	localService := fset.String("local-service", "", "`name` of the agents' Service with internalTrafficPolicy Local: node Jobs reach their node's agent at its cluster IP, without DNS")
	jobAccount := fset.String("job-service-account", "", "`name` of the ServiceAccount the upgrade image's Jobs run as (the namespace's default when empty)")
	compatNS := fset.String("compat-namespace", "", "compatibility mode: publish each plan's repo in this `namespace` (the product's, such as harvester-system) as the Service and Deployment upgrade-repo-PLAN its upgrade scripts look for; empty turns it off")
	clusterDomain := fset.String("cluster-domain", "cluster.local", "the cluster's DNS `domain`, into which compatibility mode's Services point")
	qps := fset.Float64("kube-api-qps", 50, "the sequencer's requests per second to the API server, on average; a batch of nodes moves as fast as its cordons, Jobs and uncordons are sent")
	burst := fset.Int("kube-api-burst", 100, "the sequencer's requests to the API server at once, above --kube-api-qps")
	startTimeout := fset.Duration("start-timeout", 5*time.Minute, "how long to wait for the API server at start before giving up")
	if help, err := parseFlags(a.stdout, fset, args); help || err != nil {
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
		ns = kubeclient.DefaultNamespace
	}
	if *leaseNamespace == "" {
		*leaseNamespace = ns
	}
	keep := labels.Nothing()
	if *keepPods != "" {
		sel, err := labels.Parse(*keepPods)
		if err != nil {
			return fmt.Errorf("%w: --keep-pods: %w", errUsage, err)
		}
		keep = sel
	}
	cfg, err := kubeclient.Config(*kubeconfig, "")
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	if err := waitAPIServer(ctx, a.log, cfg, *startTimeout); err != nil {
		return err
	}
	s, err := kubeclient.Scheme()
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
		Cache:                         sequencerCache(ns, *compatNS),
		HealthProbeBindAddress:        *probeAddr,
		PprofBindAddress:              *pprofAddr,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	r, err := sequencer.NewReconciler(mgr.GetClient(), a.log.With("component", "sequencer"),
		sequencer.WithNamespace(ns),
		sequencer.WithService(*service),
		sequencer.WithRepoURL(*repoURL),
		sequencer.WithUpgradeImage(*image),
		sequencer.WithUpgradeImageRepository(*imageRepo),
		sequencer.WithSUCNamespace(*sucNamespace),
		sequencer.WithEventRecorder(mgr.GetEventRecorder("upgrade-repo-sequencer")),
		sequencer.WithConfig(sequencer.Config{StallAfter: *stallAfter, HeartbeatTimeout: *heartbeat, Poll: *poll, StepStallAfter: *stepStall}),
		sequencer.WithKeepPods(keep),
		sequencer.WithLocalService(*localService),
		sequencer.WithJobServiceAccount(*jobAccount),
		sequencer.WithJobTimeout(*jobTimeout),
		sequencer.WithCompat(*compatNS),
		sequencer.WithClusterDomain(*clusterDomain),
	)
	if err != nil {
		return err
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	vr, err := sequencer.NewVersionReconciler(mgr.GetClient(), a.log.With("component", "versions"), nil, nil)
	if err != nil {
		return err
	}
	if err := vr.SetupWithManager(mgr); err != nil {
		return err
	}
	// The leader seeds the installed version once its cache is running.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		created, err := sequencer.SeedInstalled(ctx, mgr.GetClient(), ns, *seed)
		if err != nil {
			a.log.Error("seed the installed version", "version", *seed, "err", err)
			return nil
		}
		if created {
			a.log.Info("installed version seeded", "version", *seed)
		}
		return nil
	})); err != nil {
		return fmt.Errorf("add the installed version's seed: %w", err)
	}
	if _, err := sequencer.NewMetrics(mgr.GetClient(), a.log.With("component", "metrics"), ctrlmetrics.Registry); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("add ready check: %w", err)
	}
	a.log.Info("sequencer starting", "namespace", ns, "service", *service, "leaderElect", *leaderElect, "compatNamespace", *compatNS)
	start := time.Now()
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("run manager: %w", err)
	}
	a.log.Info("sequencer stopped", "uptime", time.Since(start).Round(time.Second))
	return nil
}

// sequencerCache returns the cache options of the sequencer with its namespace ns and
// compatibility mode's namespace compatNS (empty: off). What the sequencer creates or reads by
// name lives in its namespace, and in compatibility mode in the product's: those kinds are listed
// and watched there only, as the sequencer's Roles allow no more (the RBAC markers in
// sequencer/reconciler.go and sequencer/compat.go; TestSequencerCacheMatchesRoles keeps the two
// in step). Pods, PodDisruptionBudgets, nodes and the project's cluster-scoped kinds are watched
// across the cluster, under the ClusterRole.
func sequencerCache(ns, compatNS string) cache.Options {
	services := map[string]cache.Config{ns: {}}
	byObject := map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}:          {Namespaces: map[string]cache.Config{ns: {}}},
		&batchv1.Job{}:               {Namespaces: map[string]cache.Config{ns: {}}},
		&discoveryv1.EndpointSlice{}: {Namespaces: map[string]cache.Config{ns: {}}},
		&corev1.Service{}:            {Namespaces: services},
	}
	if compatNS != "" {
		services[compatNS] = cache.Config{}
		byObject[&appsv1.Deployment{}] = cache.ByObject{Namespaces: map[string]cache.Config{compatNS: {}}}
	}
	// What the cache keeps of each object is trimmed to what the sequencer reads
	// (sequencer.CacheTransform): at a thousand nodes, the managedFields and images of Nodes and
	// the pod templates of Jobs would be most of its memory.
	return cache.Options{ByObject: byObject, DefaultTransform: sequencer.CacheTransform}
}

// waitAPIServer waits until the API server answers, with backoff, for at most timeout: after a
// node reboots, the pod network and Service routing may need a while before the API server is
// reachable, and giving up at once would only crash-loop the pod.
func waitAPIServer(ctx context.Context, log *slog.Logger, cfg *rest.Config, timeout time.Duration) error {
	probe := rest.CopyConfig(cfg)
	probe.Timeout = 10 * time.Second
	dc, err := discovery.NewDiscoveryClientForConfig(probe)
	if err != nil {
		return fmt.Errorf("api server client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	retry := backoff.Policy{Initial: time.Second, Max: 15 * time.Second, Jitter: 0.2}.Start()
	for attempt := 1; ; attempt++ {
		v, err := dc.ServerVersion()
		if err == nil {
			log.Info("api server reachable", "version", v.GitVersion, "attempts", attempt)
			return nil
		}
		log.Warn("api server not reachable yet", "attempt", attempt, "err", err)
		if retry.Wait(ctx) != nil {
			return fmt.Errorf("api server not reachable after %s: %w", timeout, err)
		}
	}
}
