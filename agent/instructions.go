package agent

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/sequencer/report"
)

// instructions holds what the UpgradePlans ask of this node, as last read, and wakes those
// waiting on a change. It is safe for concurrent use.
type instructions struct {
	mu      sync.Mutex
	in      report.Instruction
	known   bool
	changed chan struct{}
}

func newInstructions() *instructions { return &instructions{changed: make(chan struct{})} }

// set records in as what the plans ask now.
func (b *instructions) set(in report.Instruction) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.known && reflect.DeepEqual(b.in, in) {
		return
	}
	b.in, b.known = in, true
	close(b.changed)
	b.changed = make(chan struct{})
}

// current returns the last instruction read and whether one was.
func (b *instructions) current() (report.Instruction, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.in, b.known
}

// changes returns a channel closed at the next change of instruction.
func (b *instructions) changes() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// wait returns the first instruction read (the current one included) that satisfies ok, or
// ctx's error.
func (b *instructions) wait(ctx context.Context, ok func(report.Instruction) bool) (report.Instruction, error) {
	for {
		b.mu.Lock()
		in, known, ch := b.in, b.known, b.changed
		b.mu.Unlock()
		if known && ok(in) {
			return in, nil
		}
		select {
		case <-ctx.Done():
			return report.Instruction{}, ctx.Err()
		case <-ch:
		}
	}
}

// listThenWatch is a ListWatch that asks the reflector for a list followed by a watch, not for a
// watch that streams the initial list (watch-list): the list and the watch go through
// controller-runtime's client, which does not promise the bookmark that the streaming form ends
// with (its fake, for one, never sends it).
type listThenWatch struct{ *toolscache.ListWatch }

// IsWatchListSemanticsUnSupported tells the reflector to list, then watch.
func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

// watchPlans keeps b up to date with what the UpgradePlans ask of node, until ctx ends: an
// informer over the UpgradePlans alone (one list, then one watch, re-listed only when the watch
// breaks) wakes it on every change, so that an instruction reaches the agent as soon as the API
// server tells it. Nothing is set before the first complete list: an agent that cannot read
// the plans keeps what it holds rather than taking "no plan" for an answer.
func watchPlans(ctx context.Context, c client.WithWatch, node string, b *instructions) {
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			var l v1beta1.UpgradePlanList
			if err := c.List(ctx, &l, &client.ListOptions{Raw: &opts}); err != nil {
				return nil, fmt.Errorf("list upgrade plans: %w", err)
			}
			return &l, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, &v1beta1.UpgradePlanList{}, &client.ListOptions{Raw: &opts})
		},
	}
	inf := toolscache.NewSharedIndexInformerWithOptions(listThenWatch{lw}, &v1beta1.UpgradePlan{}, toolscache.SharedIndexInformerOptions{})
	kick := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    poke,
		UpdateFunc: func(_, o any) { poke(o) },
		DeleteFunc: poke,
	}); err != nil {
		return // only when the informer has stopped already
	}
	go inf.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	for {
		var plans []v1beta1.UpgradePlan
		for _, o := range inf.GetStore().List() {
			if p, ok := o.(*v1beta1.UpgradePlan); ok {
				plans = append(plans, *p)
			}
		}
		b.set(report.Decide(plans, node))
		select {
		case <-ctx.Done():
			return
		case <-kick:
		}
	}
}
