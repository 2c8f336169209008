package sequencer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// RBAC of compatibility mode: a Role in the product namespace (harvester-system stands for
// --compat-namespace; see the RBAC comment in reconciler.go), which the chart renders only with
// compat.enabled.
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;delete,namespace=harvester-system
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;delete,namespace=harvester-system

// Compatibility mode: the product's own upgrade scripts (Harvester's package/upgrade/lib.sh)
// hard-code their repo as http://upgrade-repo-<upgrade>.harvester-system/harvester-iso (port 80)
// and, since v1.7, first wait for a Deployment upgrade-repo-<upgrade> in harvester-system to be
// Available. With WithCompat the sequencer publishes, for each plan while its repo is in use
// (RepoCreated up to CleaningUp), the names those scripts look for, and neither a second server
// nor a second copy of the ISO:
//
//   - a Service CompatName(plan) of type ExternalName in the product namespace whose DNS name is
//     an alias (CNAME) of the agents' Service, SERVICE.NAMESPACE.svc.<cluster domain>. Cluster
//     DNS answers the alias with the agents' Service's cluster IP, the client connects to its
//     port 80 as it would to the product's own repo, and kube-proxy balances over the Ready
//     agents exactly as for the agents' Service: nothing to keep in step when agent pods come
//     and go (nodes reboot during NodeUpgrading). A selector cannot do it (a Service selects
//     pods of its own namespace only), and a selector-less Service whose EndpointSlice the
//     sequencer copied from the agents' Service would be stale whenever the sequencer is not
//     running, which is exactly when its node is drained and rebooted;
//   - a Deployment CompatName(plan) in the same namespace with zero replicas. The deployment
//     controller reports a Deployment Available once its available replicas reach its replicas
//     less its maximum unavailable, 0 >= 0 here, so `kubectl wait --for=condition=Available` and
//     `kubectl rollout status` return at once, and no pod ever runs: its template names an image
//     in the reserved .invalid domain, and the sequencer sets replicas back to 0 if they change.
//     It is created only once the agents serve the ISO behind their Service, so Available means
//     the repo is ready; the scripts then poll harvester-release.yaml through the Service anyway.
//
// Both belong to the plan (an owner reference, so deleting the plan deletes them) and are
// deleted in CleaningUp; a Failed plan keeps them, as it keeps its ISO, for a retry. An object
// of that name the sequencer did not create is never changed: the plan is Degraded instead.

// CompatPrefix starts the names of the objects of compatibility mode: CompatPrefix + plan name.
const CompatPrefix = "upgrade-repo-"

// CompatImage is the image of the compatibility Deployment's pod template, which never runs: a
// name in the .invalid domain (RFC 2606), which no registry resolves.
const CompatImage = "upgrade-repo.invalid/no-server:never"

// compatComponent is the LabelComponent value of the compatibility objects.
const compatComponent = "repo-compat"

// compatConfig is the configuration of compatibility mode; the zero value turns it off.
type compatConfig struct {
	namespace string
	domain    string
}

// WithCompat turns on compatibility mode (see CompatName) in namespace ns, the product's
// namespace such as harvester-system; "" (the default) leaves it off. The sequencer then needs
// to get, list, watch, create, update and delete Services and apps/v1 Deployments in ns.
func WithCompat(ns string) Option { return func(r *Reconciler) { r.compat.namespace = ns } }

// WithClusterDomain sets the cluster's DNS domain ("cluster.local" by default), into which the
// compatibility Service's alias points.
func WithClusterDomain(domain string) Option { return func(r *Reconciler) { r.compat.domain = domain } }

// CompatName is the name of a plan's compatibility Service and Deployment: the name the
// product's scripts derive from the upgrade's name.
func CompatName(plan string) string { return CompatPrefix + plan }

// compatPublished reports whether a plan in phase p has its compatibility objects: from
// RepoCreated (the agents serve the ISO behind their Service) until CleaningUp.
func compatPublished(p v1beta1.Phase) bool {
	step := slices.IndexFunc(Steps, func(s Step) bool { return s.Running == p || s.Done == p })
	repo := slices.IndexFunc(Steps, func(s Step) bool { return s.Done == v1beta1.PhaseRepoCreated })
	cleanUp := slices.IndexFunc(Steps, func(s Step) bool { return s.Running == v1beta1.PhaseCleaningUp })
	return (step == repo && p == v1beta1.PhaseRepoCreated) || (step > repo && step < cleanUp)
}

// compatNameProblem says why plan cannot name its compatibility objects (CompatName must be a
// DNS label: no dots, at most 63 characters with the prefix), or returns "".
func compatNameProblem(plan string) string {
	name := CompatName(plan)
	if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
		return fmt.Sprintf("compatibility mode: plan %s cannot name a Service %s (rename the plan): %s", plan, name, strings.Join(errs, "; "))
	}
	return ""
}

// syncCompat publishes the plan's compatibility objects when compatibility mode is on and the
// plan, in phase p, is using its repo. Removing them is part of cleanUp.
func (r *Reconciler) syncCompat(ctx context.Context, plan *v1beta1.UpgradePlan, p v1beta1.Phase) error {
	if r.compat.namespace == "" {
		return nil
	}
	// Decide refuses a plan whose name cannot name a Service (compatNameProblem) in every
	// phase; this guards against publishing under such a name all the same.
	if msg := compatNameProblem(plan.Name); msg != "" {
		return errors.New(msg)
	}
	if !compatPublished(p) {
		return nil
	}
	svc, dep := r.compatObjects(plan)
	for _, o := range []client.Object{svc, dep} {
		if err := controllerutil.SetControllerReference(plan, o, r.c.Scheme()); err != nil {
			return fmt.Errorf("compatibility mode: own %s: %w", o.GetName(), err)
		}
	}
	var curSvc corev1.Service
	if err := r.ensureCompat(ctx, plan, "service", svc, &curSvc, func() bool {
		if curSvc.Spec.Type == svc.Spec.Type && curSvc.Spec.ExternalName == svc.Spec.ExternalName &&
			equality.Semantic.DeepDerivative(svc.Spec.Ports, curSvc.Spec.Ports) {
			return false
		}
		curSvc.Spec.Type, curSvc.Spec.ExternalName, curSvc.Spec.Ports = svc.Spec.Type, svc.Spec.ExternalName, svc.Spec.Ports
		curSvc.Spec.ClusterIP, curSvc.Spec.ClusterIPs, curSvc.Spec.Selector = "", nil, nil
		return true
	}); err != nil {
		return err
	}
	var curDep appsv1.Deployment
	return r.ensureCompat(ctx, plan, "deployment", dep, &curDep, func() bool {
		if curDep.Spec.Replicas != nil && *curDep.Spec.Replicas == 0 &&
			equality.Semantic.DeepDerivative(dep.Spec.Template, curDep.Spec.Template) {
			return false
		}
		curDep.Spec.Replicas, curDep.Spec.Template = dep.Spec.Replicas, dep.Spec.Template
		return true
	})
}

// compatObjects returns the plan's compatibility Service and Deployment as they should be.
func (r *Reconciler) compatObjects(plan *v1beta1.UpgradePlan) (*corev1.Service, *appsv1.Deployment) {
	domain := r.compat.domain
	if domain == "" {
		domain = "cluster.local"
	}
	target := fmt.Sprintf("%s.%s.svc.%s", r.service, r.namespace, domain)
	labels := map[string]string{LabelPlan: plan.Name, LabelComponent: compatComponent}
	meta := metav1.ObjectMeta{
		Namespace: r.compat.namespace, Name: CompatName(plan.Name), Labels: labels,
		Annotations: map[string]string{
			"management.harvesterhci.io/repo": fmt.Sprintf("served by the upgrade-repo agents behind the Service %s/%s; "+
				"published under the names the product's upgrade scripts expect", r.namespace, r.service),
		},
	}
	svc := &corev1.Service{ObjectMeta: *meta.DeepCopy(), Spec: corev1.ServiceSpec{
		Type:         corev1.ServiceTypeExternalName,
		ExternalName: target,
		// Informational for an ExternalName Service: clients connect to the agents' Service on
		// the port they ask for, 80.
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
	}}
	zero := int32(0)
	no := false
	dep := &appsv1.Deployment{ObjectMeta: *meta.DeepCopy(), Spec: appsv1.DeploymentSpec{
		Replicas: &zero,
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken: &no,
				EnableServiceLinks:           &no,
				Containers:                   []corev1.Container{{Name: "repo", Image: CompatImage}},
			},
		},
	}}
	return svc, dep
}

// ensureCompat creates want, or, when an object of its name exists, checks that the plan owns it
// and, when update (which edits cur) reports a change, updates it.
func (r *Reconciler) ensureCompat(ctx context.Context, plan *v1beta1.UpgradePlan, kind string, want, cur client.Object, update func() bool) error {
	err := r.c.Get(ctx, client.ObjectKeyFromObject(want), cur)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.c.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("compatibility mode: create %s %s/%s: %w", kind, want.GetNamespace(), want.GetName(), err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("compatibility mode: get %s %s/%s: %w", kind, want.GetNamespace(), want.GetName(), err)
	}
	if !ownedBy(cur, plan) {
		return fmt.Errorf("compatibility mode: %w: %s %s/%s", errNotOurs, kind, cur.GetNamespace(), cur.GetName())
	}
	if !update() {
		return nil
	}
	if err := r.c.Update(ctx, cur); err != nil {
		return fmt.Errorf("compatibility mode: update %s %s/%s: %w", kind, cur.GetNamespace(), cur.GetName(), err)
	}
	return nil
}

// errNotOurs is the error of an object in the way that the plan does not own.
var errNotOurs = errors.New("an object of that name exists and does not belong to the plan")

// ownedBy reports whether the plan is o's controller.
func ownedBy(o client.Object, plan *v1beta1.UpgradePlan) bool {
	ref := metav1.GetControllerOf(o)
	return ref != nil && ref.UID == plan.UID && ref.Kind == "UpgradePlan" && ref.Name == plan.Name
}

// removeCompat deletes the plan's compatibility objects, those it owns only.
func (r *Reconciler) removeCompat(ctx context.Context, plan *v1beta1.UpgradePlan) error {
	if r.compat.namespace == "" {
		return nil
	}
	key := client.ObjectKey{Namespace: r.compat.namespace, Name: CompatName(plan.Name)}
	for kind, o := range map[string]client.Object{"service": &corev1.Service{}, "deployment": &appsv1.Deployment{}} {
		err := r.c.Get(ctx, key, o)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("compatibility mode: get %s %s: %w", kind, key, err)
		case !ownedBy(o, plan):
			continue
		}
		uid := o.GetUID()
		err = r.c.Delete(ctx, o, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("compatibility mode: delete %s %s: %w", kind, key, err)
		}
	}
	return nil
}
