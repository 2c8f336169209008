package sequencer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// RBAC of the sequencer, generated into manifests/rbac/sequencer/role.yaml: a ClusterRole for
// what is cluster-scoped or read across the cluster (plans, nodes, and the pods and
// PodDisruptionBudgets of every namespace that drains evict), and a Role for each namespace it
// writes in. The Roles' namespaces stand for the namespaces the sequencer is given, and the chart
// (templates/_rbac.tpl) maps each to its value: upgrade-repo-system is the sequencer's own
// (--namespace: Jobs, the installed-version ConfigMap, the agents' Service and EndpointSlices, the
// leader Lease and its events), cattle-system is system-upgrade-controller's (--suc-namespace),
// harvester-system compatibility mode's (--compat-namespace, compat.go). default is no stand-in:
// events about cluster-scoped objects, the UpgradePlans, are written there (events.k8s.io/v1;
// the leader election's events in upgrade-repo-system are still core/v1 ones). The informers of
// cmd/upgrade-repo/sequencer.go list and watch namespaced kinds in those namespaces only, so the
// Roles grant list and watch there; system-upgrade-controller's Plans are read uncached.
//
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=upgradeplans,verbs=get;list;watch
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=upgradeplans/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=upgradeplans/finalizers,verbs=update
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=versions,verbs=get;list;watch
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=versions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=reponodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;deletecollection,namespace=upgrade-repo-system
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update,namespace=upgrade-repo-system
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch,namespace=upgrade-repo-system
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch,namespace=upgrade-repo-system
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update,namespace=upgrade-repo-system
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch,namespace=upgrade-repo-system
// +kubebuilder:rbac:groups="",resources=pods,verbs=delete,namespace=upgrade-repo-system
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch,namespace=default
// +kubebuilder:rbac:groups=upgrade.cattle.io,resources=plans,verbs=get;list;create;update;delete,namespace=cattle-system

// Labels the sequencer puts on what it creates.
const (
	// LabelPlan names the UpgradePlan an object belongs to.
	LabelPlan = "management.harvesterhci.io/upgrade-plan"
	// LabelComponent is "cluster" or "node" on Jobs.
	LabelComponent = "management.harvesterhci.io/upgrade-component"
	// LabelNode names the node of a node Job.
	LabelNode = "management.harvesterhci.io/node"
	// LabelAttempt is the plan's status.retries when a Job was created: a retried plan runs its
	// step in a new Job and leaves the failed one for its logs.
	LabelAttempt = "management.harvesterhci.io/attempt"
)

// DefaultJobTimeout is how long a Job of the upgrade image may run before it is stopped and
// fails, unless WithJobTimeout says otherwise.
const DefaultJobTimeout = 4 * time.Hour

// podNodeIndex is the field index of pods by node name.
const podNodeIndex = "spec.nodeName"

// EventRecorder records events.k8s.io/v1 Events; client-go's events.EventRecorder (what
// controller-runtime's GetEventRecorder returns) is one. Eventf must not block.
type EventRecorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

// Reconciler drives UpgradePlans. It owns their status; it creates Jobs and
// system-upgrade-controller Plans in its namespace and cordons, drains and uncordons nodes.
type Reconciler struct {
	c            client.Client
	log          *slog.Logger
	events       EventRecorder
	namespace    string
	service      string
	repoURL      string
	image        string
	imageRepo    string
	sucNamespace string
	http         *http.Client
	early        earlyReads
	certs        certReads
	cfg          Config
	now          func() time.Time
	keepPods     labels.Selector
	localService string
	jobAccount   string
	jobTimeout   time.Duration
	compat       compatConfig
	// written holds, by plan name, the last status write (writtenStatus), for staleRead.
	written sync.Map
}

// Option configures a Reconciler.
type Option func(*Reconciler)

// WithNamespace sets the namespace of the Jobs, InstalledConfigMap and the repo Service
// ("upgrade-repo" by default).
func WithNamespace(ns string) Option { return func(r *Reconciler) { r.namespace = ns } }

// WithService sets the name of the repo Service ("upgrade-repo" by default).
func WithService(name string) Option { return func(r *Reconciler) { r.service = name } }

// WithRepoURL sets the base URL of the repo Service (http://SERVICE.NAMESPACE.svc, port 80 as the chart's Service, by default).
func WithRepoURL(u string) Option { return func(r *Reconciler) { r.repoURL = u } }

// WithUpgradeImage sets the upgrade image used when a plan names none.
func WithUpgradeImage(image string) Option { return func(r *Reconciler) { r.image = image } }

// WithUpgradeImageRepository sets the repository of the upgrade image used when neither the plan
// nor WithUpgradeImage names one: the image is the repository tagged with the plan's version.
func WithUpgradeImageRepository(repo string) Option {
	return func(r *Reconciler) { r.imageRepo = repo }
}

// WithSUCNamespace sets system-upgrade-controller's namespace ("cattle-system" by default).
func WithSUCNamespace(ns string) Option { return func(r *Reconciler) { r.sucNamespace = ns } }

// WithHTTPClient sets the client that reads the release metadata.
func WithHTTPClient(hc *http.Client) Option { return func(r *Reconciler) { r.http = hc } }

// WithConfig sets the timing of decisions.
func WithConfig(cfg Config) Option { return func(r *Reconciler) { r.cfg = cfg } }

// WithClock sets the clock; time.Now by default.
func WithClock(now func() time.Time) Option { return func(r *Reconciler) { r.now = now } }

// WithKeepPods makes drains leave the pods of the sequencer's namespace that sel matches: the
// sequencer's own replicas, so that draining the node it runs on never strands the upgrade. The
// pods of the plan's own Jobs are always left.
func WithKeepPods(sel labels.Selector) Option { return func(r *Reconciler) { r.keepPods = sel } }

// WithLocalService names a Service of the agents with internalTrafficPolicy Local, in the
// sequencer's namespace: node Jobs reach their own node's agent through its cluster IP, so the
// node step needs neither cluster DNS nor another node.
func WithLocalService(name string) Option { return func(r *Reconciler) { r.localService = name } }

// WithJobServiceAccount sets the ServiceAccount the upgrade image's Jobs run as.
func WithJobServiceAccount(name string) Option { return func(r *Reconciler) { r.jobAccount = name } }

// WithJobTimeout sets how long a Job may run before it is stopped and fails
// (activeDeadlineSeconds); 0 sets no deadline. DefaultJobTimeout by default.
func WithJobTimeout(d time.Duration) Option { return func(r *Reconciler) { r.jobTimeout = d } }

// WithCertificateSources sets the ports of the control-plane nodes whose serving certificates
// the pre-flight reads (DefaultCertificateSources by default); none reads none.
func WithCertificateSources(sources []CertificateSource) Option {
	return func(r *Reconciler) { r.certs.sources = sources }
}

// WithEventRecorder sets where events go; nowhere by default.
func WithEventRecorder(e EventRecorder) Option { return func(r *Reconciler) { r.events = e } }

// NewReconciler returns a Reconciler that acts through c. c's scheme must know the core kinds and
// v1beta1; listing pods by node needs the spec.nodeName field index that SetupWithManager adds.
func NewReconciler(c client.Client, log *slog.Logger, opts ...Option) (*Reconciler, error) {
	if c == nil || log == nil {
		return nil, errors.New("new reconciler: the client and the logger are required")
	}
	r := &Reconciler{
		c: c, log: log, namespace: "upgrade-repo", service: "upgrade-repo", sucNamespace: "cattle-system",
		http: &http.Client{Timeout: 30 * time.Second}, cfg: DefaultConfig, now: time.Now,
		keepPods: labels.Nothing(), jobTimeout: DefaultJobTimeout, certs: certReads{sources: DefaultCertificateSources},
	}
	for _, o := range opts {
		o(r)
	}
	if r.repoURL == "" {
		r.repoURL = fmt.Sprintf("http://%s.%s.svc", r.service, r.namespace)
	}
	return r, nil
}

var _ reconcile.Reconciler = (*Reconciler)(nil)

// PodNodeIndexer extracts the node name of a pod, for the spec.nodeName field index.
func PodNodeIndexer(o client.Object) []string {
	if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}
	}
	return nil
}

// SetupWithManager registers the Reconciler and the field index it needs with mgr.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, podNodeIndex, PodNodeIndexer); err != nil {
		return fmt.Errorf("index pods by node: %w", err)
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("upgradeplan").
		For(&v1beta1.UpgradePlan{}).
		Owns(&batchv1.Job{}).
		Watches(&v1beta1.RepoNode{}, r.planEvents(r.repoNodeEvents)).
		Watches(&corev1.Node{}, r.planEvents(r.nodeEvents)).
		Watches(&corev1.Pod{}, r.planEvents(r.podEvents)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up the upgradeplan controller: %w", err)
	}
	return nil
}

// Reconcile observes one plan, decides, applies the decision's actions, then writes the status.
// A failed action leaves the status as it was but for a Degraded condition, so the same decision
// is taken again later.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var plan v1beta1.UpgradePlan
	if err := r.c.Get(ctx, req.NamespacedName, &plan); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if r.staleRead(&plan) {
		// The plan comes back once the cache has the write; the poll in case it never shows.
		return reconcile.Result{RequeueAfter: r.cfg.Poll}, nil
	}
	if plan.Status.Phase.Finished() && !retryAsked(&plan) && !soakWatched(&plan) {
		return reconcile.Result{}, nil
	}
	log := r.log.With("plan", plan.Name)
	obs, err := r.observe(ctx, &plan)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("observe plan %s: %w", plan.Name, err)
	}
	d := Decide(r.cfg, obs)
	blocked, failed, err := r.applyAll(ctx, &plan, obs, d.Actions)
	if err != nil {
		log.Error("apply action", "action", failed.Kind, "node", failed.Node, "err", err)
		return r.degrade(ctx, &plan, "ActionFailed", fmt.Sprintf("%s %s: %v", failed.Kind, failed.Node, err))
	}
	for node, refused := range blocked {
		if obs.DrainBlocked == nil {
			obs.DrainBlocked = map[string][]string{}
		}
		obs.DrainBlocked[node] = refused
	}
	if len(obs.DrainBlocked) > 0 {
		// A drain met a PodDisruptionBudget, which only the drain can find out: decide again
		// with that in the observation. Decide is pure and its actions idempotent, so the
		// second decision asks for the same actions, which have been applied.
		d = Decide(r.cfg, obs)
	} else {
		d = r.chain(ctx, &plan, obs, d)
	}
	if err := r.syncCompat(ctx, &plan, d.Status.Phase); err != nil {
		log.Error("publish the repo for the product's scripts", "err", err)
		return r.degrade(ctx, &plan, "CompatibilityFailed", err.Error())
	}
	from := plan.Status.Phase
	written, err := r.patchStatus(ctx, &plan, &d.Status)
	switch {
	case apierrors.IsConflict(err):
		return reconcile.Result{Requeue: true}, nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("update status of plan %s: %w", plan.Name, err)
	case written && from != d.Status.Phase:
		log.Info("phase", "from", string(from), "to", string(d.Status.Phase))
	}
	plan.Status = d.Status
	if r.events != nil {
		for _, e := range d.Events {
			typ := corev1.EventTypeNormal
			if e.Warning {
				typ = corev1.EventTypeWarning
			}
			r.events.Eventf(&plan, nil, typ, e.Reason, string(d.Status.Phase), "%s", e.Message)
		}
	}
	return reconcile.Result{RequeueAfter: d.RequeueAfter}, nil
}

// retryAsked reports whether a Failed plan carries a RetryAnnotation value it has not acted on.
func retryAsked(p *v1beta1.UpgradePlan) bool {
	v := p.Annotations[v1beta1.RetryAnnotation]
	return p.Status.Phase == v1beta1.PhaseFailed && v != "" && v != p.Status.ObservedRetry
}

// degrade records a failed action on the plan's status and asks to be called again.
func (r *Reconciler) degrade(ctx context.Context, plan *v1beta1.UpgradePlan, reason, msg string) (reconcile.Result, error) {
	// The status but for its conditions is shared with plan's: only they are patched.
	to := plan.Status
	to.Conditions = slices.Clone(plan.Status.Conditions)
	meta.SetStatusCondition(&to.Conditions, metav1.Condition{
		Type: v1beta1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: reason, Message: msg,
		ObservedGeneration: plan.Generation, LastTransitionTime: metav1.NewTime(r.now().UTC().Truncate(time.Second)),
	})
	if _, err := r.patchStatus(ctx, plan, &to); err != nil && !apierrors.IsConflict(err) {
		return reconcile.Result{}, fmt.Errorf("update status of plan %s: %w", plan.Name, err)
	}
	plan.Status = to
	if r.events != nil {
		r.events.Eventf(plan, nil, corev1.EventTypeWarning, reason, string(plan.Status.Phase), "%s", msg)
	}
	return reconcile.Result{RequeueAfter: r.cfg.Poll}, nil
}

// maxParallelActions bounds the node actions applied at once.
const maxParallelActions = 16

// applyAll carries out actions in order, but for the actions about nodes that follow each other:
// those are applied together, the actions of one node in order, so that a batch of nodes moves
// in the time of one call rather than one per node. It returns, for the nodes whose drain a
// PodDisruptionBudget refused, the pods refused; on failure, the first action that failed in
// the list's order, and why.
func (r *Reconciler) applyAll(ctx context.Context, plan *v1beta1.UpgradePlan, o Observation, actions []Action) (map[string][]string, Action, error) {
	blocked := map[string][]string{}
	for i := 0; i < len(actions); {
		if actions[i].Node == "" {
			refused, err := r.apply(ctx, plan, o, actions[i])
			if err != nil {
				return nil, actions[i], err
			}
			if len(refused) > 0 {
				blocked[actions[i].Node] = refused
			}
			i++
			continue
		}
		j := i
		for j < len(actions) && actions[j].Node != "" {
			j++
		}
		if a, err := r.applyNodes(ctx, plan, o, actions[i:j], blocked); err != nil {
			return nil, a, err
		}
		i = j
	}
	return blocked, Action{}, nil
}

// applyNodes applies node actions, each node's in order and the nodes together, and records in
// blocked the pods a drain could not evict. It returns the first action that failed, in the
// order of actions.
func (r *Reconciler) applyNodes(ctx context.Context, plan *v1beta1.UpgradePlan, o Observation, actions []Action, blocked map[string][]string) (Action, error) {
	var order []string
	byNode := map[string][]int{}
	for i, a := range actions {
		if _, ok := byNode[a.Node]; !ok {
			order = append(order, a.Node)
		}
		byNode[a.Node] = append(byNode[a.Node], i)
	}
	errs := make([]error, len(actions))
	refusedBy := make([][]string, len(actions))
	sem := make(chan struct{}, maxParallelActions)
	var wg sync.WaitGroup
	for _, node := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func(idx []int) {
			defer func() { <-sem; wg.Done() }()
			for _, i := range idx {
				if refusedBy[i], errs[i] = r.apply(ctx, plan, o, actions[i]); errs[i] != nil {
					return
				}
			}
		}(byNode[node])
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return actions[i], err
		}
		if len(refusedBy[i]) > 0 {
			blocked[actions[i].Node] = refusedBy[i]
		}
	}
	return Action{}, nil
}

// apply carries out one action. A drain returns the pods whose eviction a PodDisruptionBudget
// refused.
func (r *Reconciler) apply(ctx context.Context, plan *v1beta1.UpgradePlan, o Observation, a Action) ([]string, error) {
	switch a.Kind {
	case ActionCreateClusterJob:
		return nil, r.createJob(ctx, plan, "")
	case ActionCreateNodeJob:
		return nil, r.createJob(ctx, plan, a.Node)
	case ActionCordon:
		return nil, r.setUnschedulable(ctx, a.Node, true)
	case ActionUncordon:
		return nil, r.setUnschedulable(ctx, a.Node, false)
	case ActionDeleteNodeJob:
		return nil, r.deleteNodeJob(ctx, plan, a.Node)
	case ActionDrain:
		return r.drain(ctx, a.Node)
	case ActionDeletePod:
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: r.namespace, Name: a.Pod}}
		if err := r.c.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("delete pod %s/%s: %w", r.namespace, a.Pod, err)
		}
		return nil, nil
	case ActionApplySUCPlans:
		return nil, r.applySUCPlans(ctx, plan)
	case ActionCleanUp:
		return nil, r.cleanUp(ctx, plan)
	case ActionRecordInstalled:
		return nil, r.recordInstalled(ctx, plan, o)
	case ActionRecordDownloaded:
		return nil, r.recordDownloaded(ctx, plan, len(o.Nodes))
	case ActionRecordImages:
		return nil, r.recordImages(ctx, plan)
	case ActionRecordRollbackWindow:
		return nil, r.recordRollbackWindow(ctx, plan, a.Window)
	}
	return nil, fmt.Errorf("unknown action %q", a.Kind)
}

// upgradeImage is the image of the plan's Jobs: spec.upgrade, else the sequencer's default
// image, else the default repository tagged with the plan's version (as the upgrade design
// derives rancher/harvester-upgrade:v1.5.2 from a plan to v1.5.2).
func (r *Reconciler) upgradeImage(plan *v1beta1.UpgradePlan) string {
	switch {
	case plan.Spec.Upgrade != nil && *plan.Spec.Upgrade != "":
		return *plan.Spec.Upgrade
	case r.image != "":
		return r.image
	case r.imageRepo != "" && plan.Spec.Version != "":
		return r.imageRepo + ":" + plan.Spec.Version
	}
	return ""
}
