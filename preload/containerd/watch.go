package containerd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/typeurl/v2"

	"github.com/upgrade-repo/upgrade-repo/preload"
)

var _ preload.Watcher = (*Store)(nil)

// Topics of the events WatchRemovals subscribes to.
const (
	// imageDeleteTopic is the topic containerd publishes an image's removal on.
	imageDeleteTopic = "/images/delete"
	// probeTopic carries the event the watch publishes to itself to learn that its subscription
	// is live: containerd subscribes in the background, and events before that are not delivered.
	probeTopic = "/upgrade-repo/watch"
)

// WatchRemovals implements preload.Watcher over containerd's event stream: the removals of
// images of the store's namespace. The empty name is reported once the daemon delivers the
// watch's own probe event, from when on no removal is missed.
func (s *Store) WatchRemovals(ctx context.Context, removed func(name string)) error {
	ctx, cancel := context.WithCancel(s.nsctx(ctx))
	defer cancel()
	filter := fmt.Sprintf(`namespace==%q,topic==%q`, s.ns, imageDeleteTopic)
	probeFilter := fmt.Sprintf(`namespace==%q,topic==%q`, s.ns, probeTopic)
	evs := s.client.EventService()
	ch, errs := evs.Subscribe(ctx, filter, probeFilter)
	probe := strconv.FormatInt(time.Now().UnixNano(), 36)
	// The probe is published again until it comes back: one published before the daemon
	// registered the subscription is lost.
	live := false
	again := time.NewTimer(0)
	defer again.Stop()
	wait := 50 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-again.C:
			if live {
				continue
			}
			if err := evs.Publish(ctx, probeTopic, &eventstypes.ImageUpdate{Name: probe}); err != nil {
				return fmt.Errorf("publish the watch's probe event: %w", classify(err))
			}
			again.Reset(wait)
			wait = min(2*wait, 2*time.Second)
		case err, ok := <-errs:
			if !ok || err == nil {
				err = errors.New("event stream closed")
			}
			return fmt.Errorf("watch image removals: %w", classify(err))
		case env := <-ch:
			v, err := typeurl.UnmarshalAny(env.Event)
			if err != nil {
				s.log.Debug("undecodable event", "topic", env.Topic, "err", err)
				continue
			}
			switch e := v.(type) {
			case *eventstypes.ImageDelete:
				removed(e.Name)
			case *eventstypes.ImageUpdate:
				if env.Topic == probeTopic && e.Name == probe && !live {
					live = true
					removed("")
				}
			}
		}
	}
}
