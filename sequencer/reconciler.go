package sequencer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer/repoclient"
	"github.com/upgrade-repo/upgrade-repo/sequencer/suc"
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
	sucNamespace string
	http         *http.Client
	cfg          Config
	now          func() time.Time
	keepPods     labels.Selector
	localService string
	jobAccount   string
	jobTimeout   time.Duration
	compat       compatConfig
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
		keepPods: labels.Nothing(), jobTimeout: DefaultJobTimeout,
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
	allPlans := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var plans v1beta1.UpgradePlanList
		if err := r.c.List(ctx, &plans); err != nil {
			r.log.Error("list upgrade plans", "err", err)
			return nil
		}
		var out []reconcile.Request
		for _, p := range plans.Items {
			if !finished(p.Status.Phase) {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
			}
		}
		return out
	})
	err := ctrl.NewControllerManagedBy(mgr).
		Named("upgradeplan").
		For(&v1beta1.UpgradePlan{}).
		Owns(&batchv1.Job{}).
		Watches(&v1beta1.RepoNode{}, allPlans).
		Watches(&corev1.Node{}, allPlans).
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
	if finished(plan.Status.Phase) && !retryAsked(&plan) {
		return reconcile.Result{}, nil
	}
	log := r.log.With("plan", plan.Name)
	obs, err := r.observe(ctx, &plan)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("observe plan %s: %w", plan.Name, err)
	}
	d := Decide(r.cfg, obs)
	var stall string
	for _, a := range d.Actions {
		blocked, err := r.apply(ctx, &plan, obs, a)
		if err != nil {
			log.Error("apply action", "action", a.Kind, "node", a.Node, "err", err)
			return r.degrade(ctx, &plan, "ActionFailed", fmt.Sprintf("%s %s: %v", a.Kind, a.Node, err))
		}
		if blocked != "" {
			stall = blocked
		}
	}
	if err := r.syncCompat(ctx, &plan, d.Status.Phase); err != nil {
		log.Error("publish the repo for the product's scripts", "err", err)
		return r.degrade(ctx, &plan, "CompatibilityFailed", err.Error())
	}
	if stall != "" {
		// A drain blocked by a PodDisruptionBudget: the plan waits and says why, keeping the
		// time it was first Degraded.
		since := metav1.NewTime(obs.Now.UTC().Truncate(time.Second))
		if c := meta.FindStatusCondition(plan.Status.Conditions, v1beta1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
			since = c.LastTransitionTime
		}
		meta.RemoveStatusCondition(&d.Status.Conditions, v1beta1.ConditionDegraded)
		meta.SetStatusCondition(&d.Status.Conditions, metav1.Condition{
			Type: v1beta1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: "DrainBlocked", Message: stall,
			ObservedGeneration: plan.Generation, LastTransitionTime: since,
		})
		if d.RequeueAfter == 0 || d.RequeueAfter > r.cfg.Poll {
			d.RequeueAfter = r.cfg.Poll
		}
	}
	if !equality.Semantic.DeepEqual(plan.Status, d.Status) {
		from := plan.Status.Phase
		plan.Status = d.Status
		if err := r.c.Status().Update(ctx, &plan); err != nil {
			if apierrors.IsConflict(err) {
				return reconcile.Result{Requeue: true}, nil
			}
			return reconcile.Result{}, fmt.Errorf("update status of plan %s: %w", plan.Name, err)
		}
		if from != d.Status.Phase {
			log.Info("phase", "from", string(from), "to", string(d.Status.Phase))
		}
	}
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
	meta.SetStatusCondition(&plan.Status.Conditions, metav1.Condition{
		Type: v1beta1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: reason, Message: msg,
		ObservedGeneration: plan.Generation, LastTransitionTime: metav1.NewTime(r.now().UTC().Truncate(time.Second)),
	})
	if err := r.c.Status().Update(ctx, plan); err != nil && !apierrors.IsConflict(err) {
		return reconcile.Result{}, fmt.Errorf("update status of plan %s: %w", plan.Name, err)
	}
	if r.events != nil {
		r.events.Eventf(plan, nil, corev1.EventTypeWarning, reason, string(plan.Status.Phase), "%s", msg)
	}
	return reconcile.Result{RequeueAfter: r.cfg.Poll}, nil
}

// observe reads what Decide needs. It reads the release metadata only in MetadataPopulating and
// the pods of a node only while that node is being drained.
func (r *Reconciler) observe(ctx context.Context, plan *v1beta1.UpgradePlan) (Observation, error) {
	o := Observation{Now: r.now(), Plan: plan, UpgradeImage: r.upgradeImage(plan)}
	f, err := GatherFacts(ctx, r.c, r.namespace, plan.Name, plan.Spec.Version)
	if err != nil {
		return o, err
	}
	o.Version, o.Installed, o.PlansInFlight = f.Version, f.Installed, f.PlansInFlight
	for i := range f.Nodes {
		n := &f.Nodes[i]
		o.Nodes = append(o.Nodes, NodeInfo{Name: n.Name, ControlPlane: IsControlPlane(n), Ready: IsReady(n), Unschedulable: n.Spec.Unschedulable})
	}
	var rns v1beta1.RepoNodeList
	if err := r.c.List(ctx, &rns); err != nil {
		return o, fmt.Errorf("list repo nodes: %w", err)
	}
	o.RepoNodes = map[string]*v1beta1.RepoNodeStatus{}
	for i := range rns.Items {
		o.RepoNodes[rns.Items[i].Name] = &rns.Items[i].Status
	}
	switch plan.Status.Phase {
	case v1beta1.PhaseInitializing:
		if o.Version != nil {
			o.ISOSize = r.isoSize(ctx, o.Version.Spec.ISOURL)
		}
		if o.DrainWarnings, err = r.drainWarnings(ctx); err != nil {
			return o, err
		}
	case v1beta1.PhaseRepoCreating:
		var slices discoveryv1.EndpointSliceList
		if err := r.c.List(ctx, &slices, client.InNamespace(r.namespace),
			client.MatchingLabels{discoveryv1.LabelServiceName: r.service}); err != nil {
			return o, fmt.Errorf("list endpoint slices of service %s/%s: %w", r.namespace, r.service, err)
		}
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					o.ReadyEndpoints++
				}
			}
		}
	case v1beta1.PhaseMetadataPopulating:
		o.Release, o.ReleaseErr = repoclient.Fetch(ctx, r.http, r.repoURL)
	}
	var jobs batchv1.JobList
	if err := r.c.List(ctx, &jobs, client.InNamespace(r.namespace), client.MatchingLabels{LabelPlan: plan.Name}); err != nil {
		return o, fmt.Errorf("list jobs: %w", err)
	}
	o.NodeJobs = map[string]JobState{}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if attempt(j.Labels) != plan.Status.Retries {
			continue
		}
		st := jobState(j)
		if !st.Succeeded && !st.Failed {
			if st.Stuck, err = r.stuck(ctx, j); err != nil {
				return o, err
			}
			if j.Labels[LabelComponent] == "node" {
				if st.Orphaned, err = r.orphanedPods(ctx, j, f.Nodes, o.Now); err != nil {
					return o, err
				}
			}
		}
		switch j.Labels[LabelComponent] {
		case "cluster":
			o.ClusterJob = st
		case "node":
			o.NodeJobs[j.Labels[LabelNode]] = st
		}
	}
	if plan.Status.Phase == v1beta1.PhaseNodeUpgrading {
		if executor(plan) == v1beta1.ExecutorSystemUpgradeController {
			var list unstructured.UnstructuredList
			list.SetGroupVersionKind(suc.PlanListGVK)
			if err := r.c.List(ctx, &list, client.InNamespace(r.sucNamespace), client.MatchingLabels{suc.PlanLabel: plan.Name}); err != nil {
				return o, fmt.Errorf("list system-upgrade-controller plans: %w", err)
			}
			o.SUC = SUCProgress{Exists: len(list.Items) > 0, Upgraded: suc.Upgraded(plan.Name, list.Items, f.Nodes)}
		}
		o.PodsToEvict = map[string]int{}
		o.ControlPlaneNotReady = map[string][]string{}
		for name, ns := range plan.Status.NodeUpgradeStatuses {
			if ns.State == v1beta1.NodeRejoining {
				if o.ControlPlaneNotReady[name], err = r.controlPlaneNotReady(ctx, name); err != nil {
					return o, err
				}
			}
			if ns.State != v1beta1.NodeCordoned {
				continue
			}
			pods, err := r.evictable(ctx, name)
			if err != nil {
				return o, err
			}
			o.PodsToEvict[name] = len(pods)
		}
	}
	return o, nil
}

// attempt reads LabelAttempt; 0 when absent.
func attempt(l map[string]string) int {
	n, err := strconv.Atoi(l[LabelAttempt])
	if err != nil {
		return 0
	}
	return n
}

// isoSize asks the ISO's origin for its size with a HEAD request; 0 when it does not say.
func (r *Reconciler) isoSize(ctx context.Context, isoURL string) int64 {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, isoURL, nil)
	if err != nil {
		return 0
	}
	resp, err := r.http.Do(req)
	if err != nil {
		r.log.Debug("the ISO's size is unknown", "url", redactURL(isoURL), "err", redactErr(err, isoURL))
		return 0
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ContentLength <= 0 {
		return 0
	}
	return resp.ContentLength
}

// redactErr prints err with every copy of rawURL in it redacted.
func redactErr(err error, rawURL string) string {
	return strings.ReplaceAll(err.Error(), rawURL, redactURL(rawURL))
}

// kept reports whether a drain must leave p: the pods of the plan's own Jobs and, in the
// sequencer's namespace, the pods the keep selector matches.
func (r *Reconciler) kept(p *corev1.Pod) bool {
	if p.Namespace != r.namespace {
		return false
	}
	if _, ok := p.Labels[LabelPlan]; ok {
		return true
	}
	return r.keepPods.Matches(labels.Set(p.Labels))
}

// maxWarnings bounds the drain warnings of one kind, so that a large cluster's status stays small.
const maxWarnings = 10

// drainWarnings names, before the plan starts, what will make a drain wait or cost
// availability: PodDisruptionBudgets that allow no disruption now, workloads with a single
// running replica, and pods no controller will recreate.
func (r *Reconciler) drainWarnings(ctx context.Context) ([]string, error) {
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	var pdbs policyv1.PodDisruptionBudgetList
	if err := r.c.List(ctx, &pdbs); err != nil {
		return nil, fmt.Errorf("list pod disruption budgets: %w", err)
	}
	type workload struct{ kind, ns, name string }
	replicas := map[workload][]string{}
	var bare, blocked, single []string
	var live []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if !drainable(p) || r.kept(p) {
			continue
		}
		live = append(live, p)
		owner := metav1.GetControllerOf(p)
		if owner == nil {
			bare = append(bare, fmt.Sprintf("pod %s/%s on node %s has no controller: the drain deletes it for good", p.Namespace, p.Name, p.Spec.NodeName))
			continue
		}
		w := workload{owner.Kind, p.Namespace, owner.Name}
		replicas[w] = append(replicas[w], p.Spec.NodeName)
	}
	for _, b := range pdbs.Items {
		if b.Status.DisruptionsAllowed > 0 || b.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		var nodes []string
		for _, p := range live {
			if p.Namespace == b.Namespace && sel.Matches(labels.Set(p.Labels)) {
				nodes = append(nodes, p.Spec.NodeName)
			}
		}
		if len(nodes) == 0 {
			continue
		}
		slices.Sort(nodes)
		blocked = append(blocked, fmt.Sprintf("PodDisruptionBudget %s/%s allows no disruption: the drain of node %s will wait until it does",
			b.Namespace, b.Name, strings.Join(slices.Compact(nodes), ", ")))
	}
	for w, nodes := range replicas {
		if len(nodes) == 1 {
			single = append(single, fmt.Sprintf("%s %s/%s has one replica, on node %s: it is down while that node is drained", w.kind, w.ns, w.name, nodes[0]))
		}
	}
	var out []string
	for _, list := range [][]string{blocked, single, bare} {
		slices.Sort(list)
		if len(list) > maxWarnings {
			list = append(list[:maxWarnings:maxWarnings], fmt.Sprintf("and %d more like these", len(list)-maxWarnings))
		}
		out = append(out, list...)
	}
	return out, nil
}

// controlPlaneNotReady names the control-plane pods (static pods labelled tier=control-plane)
// on node that are not Ready.
func (r *Reconciler) controlPlaneNotReady(ctx context.Context, node string) ([]string, error) {
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods, client.MatchingFields{podNodeIndex: node}, client.MatchingLabels{"tier": "control-plane"}); err != nil {
		return nil, fmt.Errorf("list control-plane pods of node %s: %w", node, err)
	}
	var out []string
	for _, p := range pods.Items {
		if !podReady(&p) {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// drainable reports whether a drain evicts p, whoever it belongs to: not a mirror pod, not a
// DaemonSet's, not finished.
func drainable(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	if owner := metav1.GetControllerOf(p); owner != nil && owner.Kind == "DaemonSet" {
		return false
	}
	return true
}

func jobState(j *batchv1.Job) JobState {
	st := JobState{Exists: true}
	if t := j.Status.StartTime; t != nil {
		st.Started = t.Time
	}
	if t := j.Status.CompletionTime; t != nil {
		st.Completed = t.Time
	}
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			st.Succeeded = true
		case batchv1.JobFailed:
			st.Failed = true
			st.Message = fmt.Sprintf("job %s/%s failed: %s %s", j.Namespace, j.Name, c.Reason, c.Message)
		}
	}
	return st
}

// stuckReasons are the container waiting reasons that do not clear without a change.
var stuckReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "CrashLoopBackOff": true,
}

// stuck says why a running Job's pod cannot make progress, or returns "".
func (r *Reconciler) stuck(ctx context.Context, j *batchv1.Job) (string, error) {
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods, client.InNamespace(j.Namespace), client.MatchingLabels{batchv1.JobNameLabel: j.Name}); err != nil {
		return "", fmt.Errorf("list pods of job %s/%s: %w", j.Namespace, j.Name, err)
	}
	for _, p := range pods.Items {
		for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			if w := cs.State.Waiting; w != nil && stuckReasons[w.Reason] {
				return fmt.Sprintf("pod %s/%s container %s: %s: %s", p.Namespace, p.Name, cs.Name, w.Reason, w.Message), nil
			}
		}
	}
	return "", nil
}

// orphanAfter is how long a node Job's pod may stay Pending, with a container that was created
// but never started, after its node came back Ready, before it is taken for lost to a reboot.
const orphanAfter = time.Minute

// orphanedPods names the pods of node Job j that a reboot of their node left behind: Pending,
// with a container containerd had created but never started, while the node has been Ready
// again for orphanAfter. The kubelet never fails such a pod, so the Job would not replace it.
func (r *Reconciler) orphanedPods(ctx context.Context, j *batchv1.Job, nodes []corev1.Node, now time.Time) ([]string, error) {
	readySince := map[string]time.Time{}
	for i := range nodes {
		for _, c := range nodes[i].Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				readySince[nodes[i].Name] = c.LastTransitionTime.Time
			}
		}
	}
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods, client.InNamespace(j.Namespace), client.MatchingLabels{batchv1.JobNameLabel: j.Name}); err != nil {
		return nil, fmt.Errorf("list pods of job %s/%s: %w", j.Namespace, j.Name, err)
	}
	var out []string
	for _, p := range pods.Items {
		since, ready := readySince[p.Spec.NodeName]
		if p.Status.Phase != corev1.PodPending || p.DeletionTimestamp != nil || !ready ||
			!since.After(p.CreationTimestamp.Time) || now.Sub(since) < orphanAfter {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; cs.ContainerID != "" && w != nil && w.Reason == "" {
				out = append(out, p.Name)
				break
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// evictable lists the pods of node a drain must evict: every pod but mirror pods, DaemonSet pods,
// pods that have finished, the pods of the plan's Jobs and the sequencer's own pods (kept).
func (r *Reconciler) evictable(ctx context.Context, node string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods, client.MatchingFields{podNodeIndex: node}); err != nil {
		return nil, fmt.Errorf("list pods of node %s: %w", node, err)
	}
	var out []corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; drainable(p) && !r.kept(p) {
			out = append(out, *p)
		}
	}
	return out, nil
}

// apply carries out one action. It returns a message when the action could not finish for a
// reason the plan must wait on (a drain blocked by a PodDisruptionBudget).
func (r *Reconciler) apply(ctx context.Context, plan *v1beta1.UpgradePlan, o Observation, a Action) (string, error) {
	switch a.Kind {
	case ActionCreateClusterJob:
		return "", r.createJob(ctx, plan, "")
	case ActionCreateNodeJob:
		return "", r.createJob(ctx, plan, a.Node)
	case ActionCordon:
		return "", r.setUnschedulable(ctx, a.Node, true)
	case ActionUncordon:
		return "", r.setUnschedulable(ctx, a.Node, false)
	case ActionDrain:
		return r.drain(ctx, a.Node)
	case ActionDeletePod:
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: r.namespace, Name: a.Pod}}
		if err := r.c.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
			return "", fmt.Errorf("delete pod %s/%s: %w", r.namespace, a.Pod, err)
		}
		return "", nil
	case ActionApplySUCPlans:
		return "", r.applySUCPlans(ctx, plan)
	case ActionCleanUp:
		return "", r.cleanUp(ctx, plan)
	case ActionRecordInstalled:
		return "", r.recordInstalled(ctx, plan, o)
	}
	return "", fmt.Errorf("unknown action %q", a.Kind)
}

func (r *Reconciler) upgradeImage(plan *v1beta1.UpgradePlan) string {
	if plan.Spec.Upgrade != nil && *plan.Spec.Upgrade != "" {
		return *plan.Spec.Upgrade
	}
	return r.image
}

// jobName names a plan's Job for an attempt, within the 63 characters a label value may have.
func jobName(plan, node string, attempt int) string {
	name := plan + "-cluster"
	if node != "" {
		name = plan + "-node-" + node
	}
	if attempt > 0 {
		name += "-retry" + strconv.Itoa(attempt)
	}
	if len(name) > 63 {
		name = strings.TrimRight(name[:54], "-.") + "-" + shortHash(name)
	}
	return name
}

// nodeRepoURL is the base URL a node Job reaches its own node's agent at without cluster DNS:
// the cluster IP of the local Service when there is one, else the agent's own URL from its
// RepoNode, else the repo Service's URL.
func (r *Reconciler) nodeRepoURL(ctx context.Context, node string) (string, error) {
	if r.localService != "" {
		var svc corev1.Service
		err := r.c.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: r.localService}, &svc)
		switch {
		case err == nil && svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone && len(svc.Spec.Ports) > 0:
			return "http://" + net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port))), nil
		case err != nil && !apierrors.IsNotFound(err):
			return "", fmt.Errorf("get service %s/%s: %w", r.namespace, r.localService, err)
		}
	}
	var rn v1beta1.RepoNode
	if err := r.c.Get(ctx, client.ObjectKey{Name: node}, &rn); err == nil && rn.Status.Repo.URL != "" {
		return rn.Status.Repo.URL, nil
	}
	return r.repoURL, nil
}

func (r *Reconciler) createJob(ctx context.Context, plan *v1beta1.UpgradePlan, node string) error {
	image := r.upgradeImage(plan)
	if image == "" {
		return errors.New("no upgrade image: set spec.upgrade or the sequencer's default")
	}
	component := "cluster"
	repoURL := r.repoURL
	if node != "" {
		component = "node"
		var err error
		if repoURL, err = r.nodeRepoURL(ctx, node); err != nil {
			return err
		}
	}
	labels := map[string]string{LabelPlan: plan.Name, LabelComponent: component, LabelAttempt: strconv.Itoa(plan.Status.Retries)}
	env := []corev1.EnvVar{
		{Name: "UPGRADE_REPO_URL", Value: repoURL},
		{Name: "UPGRADE_REPO_SERVICE_URL", Value: r.repoURL},
		{Name: "UPGRADE_VERSION", Value: plan.Spec.Version},
		{Name: "UPGRADE_PREVIOUS_VERSION", Value: plan.Status.PreviousVersion},
		{Name: "UPGRADE_STEP", Value: component},
		{Name: "UPGRADE_PLAN", Value: plan.Name},
		{Name: "UPGRADE_ATTEMPT", Value: strconv.Itoa(plan.Status.Retries)},
		{Name: "HARVESTER_UPGRADE_NAME", Value: plan.Name},
	}
	if m := plan.Status.ReleaseMetadata; m != nil {
		env = append(env,
			corev1.EnvVar{Name: "UPGRADE_RELEASE_HARVESTER", Value: m.Harvester},
			corev1.EnvVar{Name: "UPGRADE_RELEASE_HARVESTER_CHART", Value: m.HarvesterChart},
			corev1.EnvVar{Name: "UPGRADE_RELEASE_OS", Value: m.OS},
			corev1.EnvVar{Name: "UPGRADE_RELEASE_KUBERNETES", Value: m.Kubernetes},
			corev1.EnvVar{Name: "UPGRADE_RELEASE_RANCHER", Value: m.Rancher},
			corev1.EnvVar{Name: "UPGRADE_RELEASE_MONITORING_CHART", Value: m.MonitoringChart},
			corev1.EnvVar{Name: "UPGRADE_RELEASE_LOGGING_CHART", Value: m.LoggingChart},
			corev1.EnvVar{Name: "UPGRADE_RELEASE_KUBEVIRT", Value: m.Kubevirt},
		)
	}
	// A node step that reboots its node loses its pod to the reboot and runs again in a new
	// one, which must find its work done (the step's contract): room for that and for one
	// genuine retry.
	backoff := int32(3)
	spec := corev1.PodSpec{
		RestartPolicy:      corev1.RestartPolicyNever,
		ServiceAccountName: r.jobAccount,
		Containers:         []corev1.Container{{Name: "upgrade", Image: image, Env: env}},
	}
	if node != "" {
		labels[LabelNode] = node
		env = append(env, corev1.EnvVar{Name: "UPGRADE_NODE_NAME", Value: node}, corev1.EnvVar{Name: "HARVESTER_UPGRADE_NODE_NAME", Value: node})
		privileged := true
		spec.Containers[0].Env = env
		spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &privileged}
		spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "host", MountPath: "/host"}}
		spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		spec.HostPID = true
		// Pinned to the node by name; it runs on the cordoned node, so it tolerates every taint.
		spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}},
		}}
		spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.namespace, Name: jobName(plan.Name, node, plan.Status.Retries), Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit: &backoff,
			Template:     corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
	if r.jobTimeout > 0 {
		secs := int64(r.jobTimeout / time.Second)
		job.Spec.ActiveDeadlineSeconds = &secs
	}
	if err := controllerutil.SetControllerReference(plan, job, r.c.Scheme()); err != nil {
		return fmt.Errorf("own job %s: %w", job.Name, err)
	}
	if err := r.c.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create job %s/%s: %w", job.Namespace, job.Name, err)
	}
	return nil
}

func (r *Reconciler) setUnschedulable(ctx context.Context, name string, v bool) error {
	var n corev1.Node
	if err := r.c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		return fmt.Errorf("get node %s: %w", name, err)
	}
	if n.Spec.Unschedulable == v {
		return nil
	}
	patch := client.MergeFrom(n.DeepCopy())
	n.Spec.Unschedulable = v
	if err := r.c.Patch(ctx, &n, patch); err != nil {
		return fmt.Errorf("set node %s unschedulable=%t: %w", name, v, err)
	}
	return nil
}

// drain evicts the node's evictable pods through the Eviction API. Evictions refused because of a
// PodDisruptionBudget (429) are not errors: their pods are named in the returned message.
func (r *Reconciler) drain(ctx context.Context, node string) (string, error) {
	pods, err := r.evictable(ctx, node)
	if err != nil {
		return "", err
	}
	var blocked []string
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
		err := r.c.SubResource("eviction").Create(ctx, p, ev)
		switch {
		case err == nil, apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			blocked = append(blocked, p.Namespace+"/"+p.Name)
		default:
			return "", fmt.Errorf("evict pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	if len(blocked) > 0 {
		return fmt.Sprintf("draining node %s: a PodDisruptionBudget blocks the eviction of %s", node, strings.Join(blocked, ", ")), nil
	}
	return "", nil
}

func (r *Reconciler) applySUCPlans(ctx context.Context, plan *v1beta1.UpgradePlan) error {
	conc := 0
	if o := plan.Spec.NodeUpgradeOption; o != nil {
		conc = o.Concurrency
	}
	plans, err := suc.Plans(suc.Options{
		UpgradePlan: plan.Name, Namespace: r.sucNamespace, Image: r.upgradeImage(plan),
		Version: plan.Spec.Version, RepoURL: r.repoURL, Concurrency: conc,
	})
	if err != nil {
		return err
	}
	for _, p := range plans {
		var cur unstructured.Unstructured
		cur.SetGroupVersionKind(suc.PlanGVK)
		err := r.c.Get(ctx, client.ObjectKeyFromObject(p), &cur)
		switch {
		case apierrors.IsNotFound(err):
			if err := r.c.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create plan %s/%s: %w", p.GetNamespace(), p.GetName(), err)
			}
		case err != nil:
			return fmt.Errorf("get plan %s/%s: %w", p.GetNamespace(), p.GetName(), err)
		case !equality.Semantic.DeepEqual(cur.Object["spec"], p.Object["spec"]):
			cur.Object["spec"] = p.Object["spec"]
			if err := r.c.Update(ctx, &cur); err != nil {
				return fmt.Errorf("update plan %s/%s: %w", p.GetNamespace(), p.GetName(), err)
			}
		}
	}
	return nil
}

func (r *Reconciler) cleanUp(ctx context.Context, plan *v1beta1.UpgradePlan) error {
	bg := client.PropagationPolicy(metav1.DeletePropagationBackground)
	if err := r.c.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(r.namespace), client.MatchingLabels{LabelPlan: plan.Name}, bg); err != nil {
		return fmt.Errorf("delete jobs: %w", err)
	}
	if executor(plan) == v1beta1.ExecutorSystemUpgradeController {
		for _, name := range []string{suc.ServerPlanName(plan.Name), suc.AgentPlanName(plan.Name)} {
			var p unstructured.Unstructured
			p.SetGroupVersionKind(suc.PlanGVK)
			p.SetNamespace(r.sucNamespace)
			p.SetName(name)
			if err := r.c.Delete(ctx, &p); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete plan %s/%s: %w", r.sucNamespace, name, err)
			}
		}
	}
	return r.removeCompat(ctx, plan)
}

func (r *Reconciler) recordInstalled(ctx context.Context, plan *v1beta1.UpgradePlan, o Observation) error {
	rel := o.Release
	if rel == nil {
		if m := plan.Status.ReleaseMetadata; m != nil {
			rel = releaseFromMetadata(m)
		}
	}
	want, err := installedConfigMap(r.namespace, plan.Name, plan.Spec.Version, rel)
	if err != nil {
		return err
	}
	var cur corev1.ConfigMap
	err = r.c.Get(ctx, client.ObjectKeyFromObject(want), &cur)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.c.Create(ctx, want); err != nil {
			return fmt.Errorf("create configmap %s/%s: %w", want.Namespace, want.Name, err)
		}
	case err != nil:
		return fmt.Errorf("get configmap %s/%s: %w", want.Namespace, want.Name, err)
	default:
		cur.Data = want.Data
		if err := r.c.Update(ctx, &cur); err != nil {
			return fmt.Errorf("update configmap %s/%s: %w", want.Namespace, want.Name, err)
		}
	}
	return nil
}
