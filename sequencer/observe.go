package sequencer

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
	"github.com/upgrade-repo/upgrade-repo/isorelease"
	"github.com/upgrade-repo/upgrade-repo/sequencer/repoclient"
	"github.com/upgrade-repo/upgrade-repo/sequencer/suc"
)

// observe reads what Decide needs: the facts every phase reads, then what the plan's phase
// needs besides. It reads the release metadata only in MetadataPopulating, the pods of a node to
// drain only while that node is being drained, and the control-plane pods only in NodeUpgrading
// and NodeUpgraded.
func (r *Reconciler) observe(ctx context.Context, plan *v1beta1.UpgradePlan) (Observation, error) {
	f, err := GatherFacts(ctx, sharedReads{r.c}, r.namespace, plan.Name, plan.Spec.Version)
	if err != nil {
		return Observation{Now: r.now(), Plan: plan}, err
	}
	o := NewObservation(r.now(), plan, f)
	o.UpgradeImage, o.Compat = r.upgradeImage(plan), r.compat.namespace != ""
	if err := r.observePhase(ctx, plan, f.Nodes, &o); err != nil {
		return o, err
	}
	switch plan.Status.Phase {
	case v1beta1.PhaseInitializing, v1beta1.PhaseMetadataPopulating, v1beta1.PhaseNodeUpgrading:
		// For the batches of workers: judged in the first two, followed in the last.
		if o.Disruptions, err = GatherDisruptions(ctx, r.c, r.kept); err != nil {
			return o, err
		}
	}
	if err := r.observeSoak(ctx, plan, &o); err != nil {
		return o, err
	}
	if err := r.observeJobs(ctx, plan, f.Nodes, &o); err != nil {
		return o, err
	}
	if plan.Status.Phase == v1beta1.PhaseNodeUpgrading {
		if err := r.observeNodeUpgrading(ctx, plan, f.Nodes, &o); err != nil {
			return o, err
		}
	}
	if p := plan.Status.Phase; p == v1beta1.PhaseNodeUpgrading || p == v1beta1.PhaseNodeUpgraded {
		if err := r.observeControlPlanes(ctx, plan, f.Nodes, &o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// observePhase reads what one phase alone needs: in Initializing the release inside the ISO and
// the drain warnings, in RepoCreating the repo's ready endpoints, in MetadataPopulating the
// release metadata through the repo; in Initializing too, the control planes' serving
// certificates (of nodes).
func (r *Reconciler) observePhase(ctx context.Context, plan *v1beta1.UpgradePlan, nodes []corev1.Node, o *Observation) error {
	var err error
	switch plan.Status.Phase {
	case v1beta1.PhaseInitializing:
		if o.Version != nil {
			var c *isorelease.Contents
			c, o.EarlyReleaseErr = r.early.read(ctx, r.http, o.Version.Spec.ISOURL)
			if c != nil {
				o.EarlyRelease, o.ISOSize, o.EarlyArchives = c.Release, c.Size, c.Archives
			} else {
				o.ISOSize = r.isoSize(ctx, o.Version.Spec.ISOURL)
			}
		}
		if o.DrainWarnings, err = r.drainWarnings(ctx); err != nil {
			return err
		}
		o.Certificates, o.CertificatesNote = r.certs.read(ctx, nodes)
	case v1beta1.PhaseRepoCreating:
		var slices discoveryv1.EndpointSliceList
		if err := r.c.List(ctx, &slices, client.InNamespace(r.namespace),
			client.MatchingLabels{discoveryv1.LabelServiceName: r.service}); err != nil {
			return fmt.Errorf("list endpoint slices of service %s/%s: %w", r.namespace, r.service, err)
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
	return nil
}

// observeJobs reads the state of the plan's Jobs of its current attempt, and for a running one
// whether its pod is stuck or, for a node Job, left behind by a reboot.
func (r *Reconciler) observeJobs(ctx context.Context, plan *v1beta1.UpgradePlan, nodes []corev1.Node, o *Observation) error {
	var jobs batchv1.JobList
	if err := r.c.List(ctx, &jobs, client.InNamespace(r.namespace), client.MatchingLabels{LabelPlan: plan.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("list jobs: %w", err)
	}
	o.NodeJobs = map[string]JobState{}
	var byName map[string]*corev1.Node
	nodeByName := func(name string) *corev1.Node {
		// Indexed once, on the first Job pod that asks.
		if byName == nil {
			byName = make(map[string]*corev1.Node, len(nodes))
			for i := range nodes {
				byName[nodes[i].Name] = &nodes[i]
			}
		}
		return byName[name]
	}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if attempt(j.Labels) != plan.Status.Retries {
			continue
		}
		st := jobState(j)
		if st.Failed {
			said, err := r.failedSteps(ctx, j)
			if err != nil {
				return err
			}
			switch {
			case said != "":
				// The step's own words first: they say what went wrong; the Job's say how it ended.
				st.Message = said + "; " + st.Message
			case !st.FailedAt.IsZero() && o.Now.Sub(st.FailedAt) < stepWordsWait:
				// The pod's status may not have reached the cache yet: the Job counts as
				// running until it does, or until the wait is over.
				st.Failed = false
			}
		}
		if !st.Succeeded && !st.Failed {
			pods, err := r.jobPods(ctx, j)
			if err != nil {
				return err
			}
			st.Stuck = stuck(pods)
			if j.Labels[LabelComponent] == "node" {
				st.Orphaned = orphanedPods(pods, nodeByName, o.Now)
			}
		}
		switch j.Labels[LabelComponent] {
		case "cluster":
			o.ClusterJob = st
		case "node":
			o.NodeJobs[j.Labels[LabelNode]] = st
		}
	}
	return nil
}

// observeNodeUpgrading reads, in NodeUpgrading, system-upgrade-controller's progress when it
// upgrades the nodes, and the pods left to evict from each node being drained.
func (r *Reconciler) observeNodeUpgrading(ctx context.Context, plan *v1beta1.UpgradePlan, nodes []corev1.Node, o *Observation) error {
	if plan.NodeExecutor() == v1beta1.ExecutorSystemUpgradeController {
		var list unstructured.UnstructuredList
		list.SetGroupVersionKind(suc.PlanListGVK)
		if err := r.c.List(ctx, &list, client.InNamespace(r.sucNamespace), client.MatchingLabels{suc.PlanLabel: plan.Name}); err != nil {
			return fmt.Errorf("list system-upgrade-controller plans: %w", err)
		}
		o.SUC = SUCProgress{Exists: len(list.Items) > 0, Upgraded: suc.Upgraded(plan.Name, list.Items, nodes)}
	}
	o.PodsToEvict = map[string]int{}
	for name, ns := range plan.Status.NodeUpgradeStatuses {
		if ns.State != v1beta1.NodeCordoned {
			continue
		}
		pods, err := r.evictable(ctx, name)
		if err != nil {
			return err
		}
		o.PodsToEvict[name] = len(pods)
	}
	return nil
}

// observeControlPlanes reads the control-plane pods of the control-plane nodes and of the
// nodes rejoining: for the gate before each node and the rejoin of each node in NodeUpgrading,
// for the versions they run at NodeUpgraded.
func (r *Reconciler) observeControlPlanes(ctx context.Context, plan *v1beta1.UpgradePlan, nodes []corev1.Node, o *Observation) error {
	o.ControlPlaneNotReady = map[string][]string{}
	o.ControlPlaneImages = map[string]map[string]string{}
	for i := range nodes {
		n := &nodes[i]
		if !IsControlPlane(n) && plan.Status.NodeUpgradeStatuses[n.Name].State != v1beta1.NodeRejoining {
			continue
		}
		pods, err := r.controlPlanePods(ctx, n.Name)
		if err != nil {
			return err
		}
		for _, cp := range pods {
			if !cp.ready {
				o.ControlPlaneNotReady[n.Name] = append(o.ControlPlaneNotReady[n.Name], cp.name)
			}
			if cp.component != "" && cp.image != "" {
				if o.ControlPlaneImages[n.Name] == nil {
					o.ControlPlaneImages[n.Name] = map[string]string{}
				}
				o.ControlPlaneImages[n.Name][cp.component] = cp.image
			}
		}
	}
	return nil
}

// sharedReads lists from the cache without copying what it lists: the objects are the cache's
// own, which an observation only reads (Decide is pure). On a large cluster, copying every Node,
// RepoNode and Job at each reconcile would be most of the sequencer's garbage. A client that is
// not a cache ignores the option.
type sharedReads struct{ client.Reader }

// List lists with client.UnsafeDisableDeepCopy.
func (s sharedReads) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return s.Reader.List(ctx, list, append(opts, client.UnsafeDisableDeepCopy)...)
}

// attempt reads LabelAttempt; 0 when absent.
func attempt(l map[string]string) int {
	n, err := strconv.Atoi(l[LabelAttempt])
	if err != nil {
		return 0
	}
	return n
}

// earlyReads keeps the last release read from an ISO's URL before its download, so that the
// reconciles of one Initializing phase read it once. The mutex guards the kept read only: the
// read itself, over the network, is made without it.
type earlyReads struct {
	mu  sync.Mutex
	url string
	c   *isorelease.Contents
	err error
	at  time.Time
}

// read returns the release in the ISO at isoURL, read through Range requests (isorelease), or
// why it could not be read. A read, or a failure, is reused for a minute.
func (e *earlyReads) read(ctx context.Context, hc *http.Client, isoURL string) (*isorelease.Contents, error) {
	e.mu.Lock()
	if e.url == isoURL && time.Since(e.at) < time.Minute {
		c, err := e.c, e.err
		e.mu.Unlock()
		return c, err
	}
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	at := time.Now()
	c, err := isorelease.Open(ctx, hc, isoURL, httprange.WithReadTimeouts(10*time.Second,
		backoff.Policy{Initial: 250 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2, Attempts: 3}))
	if err != nil {
		c = nil
	}
	e.mu.Lock()
	e.url, e.at, e.c, e.err = isoURL, at, c, err
	e.mu.Unlock()
	return c, err
}

// isoSize asks the ISO's origin for its size (httprange.Probe: its first byte, not a HEAD, which
// a presigned URL refuses); 0 when it does not say.
func (r *Reconciler) isoSize(ctx context.Context, isoURL string) int64 {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := httprange.Probe(ctx, r.http, isoURL)
	if err != nil {
		r.log.Debug("the ISO's size is unknown", "url", redact.URL(isoURL), "err", err)
		return 0
	}
	return info.Size
}

// controlPlaneComponents are the components whose static pods make a node's control plane, as
// kubeadm and RKE2 name them.
var controlPlaneComponents = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"}

// controlPlanePod is one control-plane pod of a node as observed.
type controlPlanePod struct {
	// name is namespace/name.
	name string
	// component is one of controlPlaneComponents, "" when the pod names none.
	component string
	// image is the image of the component's container (the pod's first when none is named
	// after the component).
	image string
	ready bool
}

// controlPlanePods lists node's control-plane pods, sorted by name: the pods labelled
// tier=control-plane (kubeadm's and RKE2's static pods) and the mirror pods in kube-system named
// <component>-<node>. A pod's component is its component label, or the name it is a mirror pod
// of.
func (r *Reconciler) controlPlanePods(ctx context.Context, node string) ([]controlPlanePod, error) {
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods, client.MatchingFields{podNodeIndex: node}); err != nil {
		return nil, fmt.Errorf("list control-plane pods of node %s: %w", node, err)
	}
	var out []controlPlanePod
	for i := range pods.Items {
		p := &pods.Items[i]
		byName := ""
		if p.Namespace == metav1.NamespaceSystem && strings.HasSuffix(p.Name, "-"+node) {
			if c := strings.TrimSuffix(p.Name, "-"+node); slices.Contains(controlPlaneComponents, c) {
				byName = c
			}
		}
		if p.Labels["tier"] != "control-plane" && byName == "" {
			continue
		}
		cp := controlPlanePod{name: p.Namespace + "/" + p.Name, component: byName, ready: podReady(p)}
		if c := p.Labels["component"]; slices.Contains(controlPlaneComponents, c) {
			cp.component = c
		}
		for j, c := range p.Spec.Containers {
			if j == 0 || c.Name == cp.component {
				cp.image = c.Image
			}
		}
		out = append(out, cp)
	}
	slices.SortFunc(out, func(a, b controlPlanePod) int { return strings.Compare(a.name, b.name) })
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
