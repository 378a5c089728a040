package docker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/airlock-sandbox/airlock/engine"
)

// watch follows dockerd's kill and die events for one container, so that a
// stop airlock did not ask for (dockerd shutting down, `docker stop` from
// outside) is told apart from the program's own exit.
type watch struct {
	// ours is set before airlock itself kills the container.
	ours atomic.Bool
	done chan struct{} // closed at the die event or when the stream ends

	mu      sync.Mutex
	outside string // signal of a kill airlock did not send
	broken  error  // the stream ended before the die event
}

// watchEvents subscribes from since, so events between the call and the
// daemon registering the subscription are replayed, not missed.
func (e *Engine) watchEvents(ctx context.Context, id string, since time.Time) *watch {
	w := &watch{done: make(chan struct{})}
	msgs, errs := e.cli.Events(ctx, events.ListOptions{
		Since: fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond()),
		Filters: filters.NewArgs(
			filters.Arg("type", string(events.ContainerEventType)),
			filters.Arg("container", id),
			filters.Arg("event", string(events.ActionKill)),
			filters.Arg("event", string(events.ActionDie)),
		),
	})
	go func() {
		defer close(w.done)
		for {
			select {
			case m := <-msgs:
				switch m.Action {
				case events.ActionKill:
					if !w.ours.Load() {
						w.mu.Lock()
						w.outside = m.Actor.Attributes["signal"]
						w.mu.Unlock()
					}
				case events.ActionDie:
					return
				}
			case err := <-errs:
				w.mu.Lock()
				w.broken = err
				w.mu.Unlock()
				return
			}
		}
	}()
	return w
}

// verdict waits up to wait for the die event, then returns an
// engine.ErrSandboxLost error if the container was stopped from outside
// airlock or dockerd went away before the die event.
func (w *watch) verdict(wait time.Duration) error {
	select {
	case <-w.done:
	case <-time.After(wait):
		return nil // no event either way: nothing to say
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.outside != "":
		return engine.Lost("dockerd stopped the sandbox with signal %s while the program ran, and airlock did not ask it to (dockerd shutting down or restarting, or `docker stop`/`docker kill` from outside)", w.outside)
	case w.broken != nil:
		return engine.Lost("the connection to dockerd broke while the program ran (%v): dockerd stopped or restarted", w.broken)
	}
	return nil
}
