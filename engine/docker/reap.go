package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
)

// Leftovers implements engine.Reaper: containers carrying airlock's id
// label. It also removes sandbox logs that no container owns any more.
func (e *Engine) Leftovers(ctx context.Context) ([]string, error) {
	ids, err := e.ListSandboxes(ctx)
	if err == nil {
		e.sweepSandboxLogs(ctx)
	}
	return ids, err
}

// sweepSandboxLogs removes <sandbox-logs>/<container id> directories whose
// container dockerd no longer has. A directory younger than a minute may
// belong to a container being created, and is left.
func (e *Engine) sweepSandboxLogs(ctx context.Context) {
	f, err := e.facts(ctx)
	if err != nil {
		return
	}
	pattern := f.sandboxLogs
	if filepath.Base(filepath.Clean(pattern)) != "%ID%" {
		return // not a layout airlock registered
	}
	dirs, _ := filepath.Glob(strings.ReplaceAll(filepath.Clean(pattern), "%ID%", "*"))
	if len(dirs) == 0 {
		return
	}
	list, err := e.cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return
	}
	known := map[string]bool{}
	for _, c := range list {
		known[c.ID] = true
	}
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && !known[filepath.Base(d)] && time.Since(fi.ModTime()) > time.Minute {
			os.RemoveAll(d)
		}
	}
}

// Reap implements engine.Reaper: force-remove the run's container and its
// parent cgroup.
func (e *Engine) Reap(ctx context.Context, id string) error {
	var errs []error
	list, err := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelID+"="+id))})
	if err != nil {
		errs = append(errs, unavailable(e.cli.DaemonHost(), err))
	}
	var f daemonFacts
	if len(list) > 0 {
		f, _ = e.facts(ctx)
	}
	for _, c := range list {
		if err := e.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
		if dir := f.sandboxLogDir(c.ID); dir != "" {
			os.RemoveAll(dir)
		}
	}
	if err := cgroup.Remove(ctx, id); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
