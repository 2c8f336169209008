package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// What is fake, and how (see hack/bench-nodes.sh too):
//
//   - the agents (fakeAgents): one RepoNode per node, reported as the real agent reports a node
//     that holds the plan's ISO, serves it and has preloaded its images, rewritten every
//     interval as the real agent's heartbeat;
//   - the node step (fakeSteps): no kube-controller-manager and no kubelet run, so nothing
//     starts a node Job's pod. fakeSteps watches the node Jobs, marks each started when it
//     appears (as the Job controller does), and after the step's time reports the step's last
//     stage through the node's RepoNode (as the real step does through its agent) and marks the
//     Job Complete (as the Job controller does once its pod succeeded);
//   - the nodes: kwok's fake nodes when kwok runs (their heartbeats and leases), else Nodes this
//     program creates Ready and leaves be.

// fakeAgents reports the RepoNode of each node until ctx ends.
type fakeAgents struct {
	c        client.Client
	nodes    []string
	checksum string
	interval time.Duration
	log      *slog.Logger
}

// status is the report of an agent that holds, serves and has preloaded the plan's ISO.
func (a *fakeAgents) status(node string, now time.Time) v1beta1.RepoNodeStatus {
	return v1beta1.RepoNodeStatus{
		ISO:           v1beta1.RepoNodeISO{Checksum: a.checksum, State: v1beta1.ISOReady, BytesDone: 1 << 30, BytesTotal: 1 << 30},
		Repo:          v1beta1.RepoNodeRepo{Ready: true, URL: "http://" + node + ":8080"},
		Preload:       v1beta1.RepoNodePreload{State: v1beta1.PreloadDone, ImagesDone: 10, ImagesTotal: 10},
		HeartbeatTime: metav1.NewTime(now),
	}
}

// create creates every node's RepoNode with its first report, with workers goroutines.
func (a *fakeAgents) create(ctx context.Context, workers int) error {
	return forEach(ctx, a.nodes, workers, func(ctx context.Context, n string) error {
		rn := &v1beta1.RepoNode{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if err := a.c.Create(ctx, rn); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create repo node %s: %w", n, err)
		}
		rn.Status = a.status(n, time.Now())
		if err := a.c.Status().Update(ctx, rn); err != nil {
			return fmt.Errorf("report repo node %s: %w", n, err)
		}
		return nil
	})
}

// run rewrites each report once per interval, spread over it, until ctx ends.
func (a *fakeAgents) run(ctx context.Context) {
	step := a.interval / time.Duration(max(1, len(a.nodes)))
	t := time.NewTicker(step)
	defer t.Stop()
	for i := 0; ; i = (i + 1) % len(a.nodes) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := a.beat(ctx, a.nodes[i], nil); err != nil && ctx.Err() == nil {
			a.log.Warn("heartbeat", "node", a.nodes[i], "err", err)
		}
	}
}

// beat rewrites node's report with a new heartbeat and, when step is not nil, that step report:
// one merge patch of the status, as the agent's write of its report.
func (a *fakeAgents) beat(ctx context.Context, node string, step *v1beta1.RepoNodeStep) error {
	st := map[string]any{"heartbeatTime": metav1.Now()}
	if step != nil {
		st["step"] = step
	}
	b, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return err
	}
	rn := &v1beta1.RepoNode{ObjectMeta: metav1.ObjectMeta{Name: node}}
	return a.c.Status().Patch(ctx, rn, client.RawPatch(types.MergePatchType, b))
}

// fakeSteps plays the Job controller and the node step for the node Jobs of namespace.
type fakeSteps struct {
	c         client.Client
	agents    *fakeAgents
	namespace string
	plan      string
	stepTime  time.Duration
	log       *slog.Logger

	mu      sync.Mutex
	started map[string]bool
}

// run follows the node Jobs until ctx ends.
func (s *fakeSteps) run(ctx context.Context, watchJobs func(ctx context.Context, each func(*batchv1.Job)) error) error {
	s.started = map[string]bool{}
	return watchJobs(ctx, func(j *batchv1.Job) {
		if j.Labels["management.harvesterhci.io/upgrade-component"] != "node" || j.Status.StartTime != nil {
			return
		}
		s.mu.Lock()
		seen := s.started[j.Name]
		s.started[j.Name] = true
		s.mu.Unlock()
		if !seen {
			go s.step(ctx, j.Name, j.Labels["management.harvesterhci.io/node"])
		}
	})
}

// step starts Job name, runs the node's step for stepTime, reports its last stage and completes
// the Job.
func (s *fakeSteps) step(ctx context.Context, name, node string) {
	start := metav1.Now()
	if err := s.setJob(ctx, name, map[string]any{"startTime": start, "active": 1}); err != nil {
		s.log.Error("start job", "job", name, "err", err)
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(s.stepTime):
	}
	if err := s.agents.beat(ctx, node, &v1beta1.RepoNodeStep{Plan: s.plan, Stage: v1beta1.StageKubernetesUpgraded,
		Message: "kubelet upgraded, Ready", Time: metav1.Now()}); err != nil {
		s.log.Error("report the step", "node", node, "err", err)
		return
	}
	done := metav1.Now()
	err := s.setJob(ctx, name, map[string]any{
		"active": 0, "ready": 0, "terminating": 0, "succeeded": 1, "completionTime": done,
		"conditions": []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastProbeTime: done, LastTransitionTime: done},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastProbeTime: done, LastTransitionTime: done},
		},
	})
	if err != nil {
		s.log.Error("complete job", "job", name, "err", err)
	}
}

// setJob merges st into Job name's status, as the Job controller writes it.
func (s *fakeSteps) setJob(ctx context.Context, name string, st map[string]any) error {
	b, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return err
	}
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: name}}
	return s.c.Status().Patch(ctx, j, client.RawPatch(types.MergePatchType, b))
}

// forEach runs f on each item with workers goroutines and returns the first error.
func forEach(ctx context.Context, items []string, workers int, f func(context.Context, string) error) error {
	ch := make(chan string)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range ch {
				if err := f(ctx, it); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
loop:
	for _, it := range items {
		select {
		case ch <- it:
		case err = <-errs:
			break loop
		}
	}
	close(ch)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}
