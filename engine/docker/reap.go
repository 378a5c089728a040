package docker

import (
	"context"
	"errors"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
)

// Leftovers implements engine.Reaper: containers carrying airlock's id label.
func (e *Engine) Leftovers(ctx context.Context) ([]string, error) {
	return e.ListSandboxes(ctx)
}

// Reap implements engine.Reaper: force-remove the run's container and its
// parent cgroup.
func (e *Engine) Reap(ctx context.Context, id string) error {
	var errs []error
	list, err := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelID+"="+id))})
	if err != nil {
		errs = append(errs, unavailable(e.cli.DaemonHost(), err))
	}
	for _, c := range list {
		if err := e.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if err := cgroup.Remove(ctx, id); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
