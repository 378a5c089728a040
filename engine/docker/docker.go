// Package docker runs airlock jobs through the Docker Engine API.
//
// The container is created from isolation.DockerConfig and nothing else; the
// engine adds only labels. Every container it creates is removed on a
// detached context, whatever happens to the caller's.
package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

// Labels airlock puts on every container it creates.
const (
	LabelID       = "airlock.id"
	LabelOwner    = "airlock.owner"
	LabelDeadline = "airlock.deadline"
	// labelNamespace is airlock's; an image may carry no label in it.
	labelNamespace = "airlock."
)

// cleanupTimeout bounds kill, wait and remove once the run is over.
const cleanupTimeout = 30 * time.Second

// setupTimeout bounds each call that sets a sandbox up: create, attach,
// start. A dockerd that does not answer in time fails the run.
const setupTimeout = 30 * time.Second

// Engine is the Docker backend.
type Engine struct {
	cli  *client.Client
	host string
	log  *slog.Logger
	// daemon is what Check last learnt of dockerd; a batch runs Checks
	// and runs concurrently on one Engine.
	daemon atomic.Pointer[daemonFacts]
	// setupTimeout is setupTimeout; tests shorten it.
	setupTimeout time.Duration
}

// daemonFacts are what a run needs to know of dockerd.
type daemonFacts struct {
	// cgroupfs is set when dockerd uses the cgroupfs driver, so a cgroup
	// path airlock creates can be the container's parent.
	cgroupfs bool
	// sandboxLogs is the --debug-log pattern registered with airlock's
	// runsc ("<root>/sandbox-logs/%ID%/"), or "" when there is none.
	sandboxLogs string
}

// learn keeps what runs need to know from dockerd's info.
func (e *Engine) learn(info system.Info) daemonFacts {
	f := &daemonFacts{
		cgroupfs:    info.CgroupDriver == "cgroupfs",
		sandboxLogs: logPattern(info.Runtimes[isolation.DockerRuntimes[isolation.GVisor]].Args),
	}
	e.daemon.Store(f)
	return *f
}

// facts returns what was learnt last, asking dockerd only if nothing was
// (the reaper runs no Check).
func (e *Engine) facts(ctx context.Context) (daemonFacts, error) {
	if f := e.daemon.Load(); f != nil {
		return *f, nil
	}
	info, err := e.cli.Info(ctx)
	if err != nil {
		return daemonFacts{}, unavailable(e.cli.DaemonHost(), err)
	}
	return e.learn(info), nil
}

// sandboxLogDir is where container cid's sandbox writes its log, or "".
func (f daemonFacts) sandboxLogDir(cid string) string {
	if f.sandboxLogs == "" {
		return ""
	}
	return strings.ReplaceAll(f.sandboxLogs, "%ID%", cid)
}

// Option configures an Engine.
type Option func(*Engine)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(e *Engine) { e.log = l } }

// WithHost sets the daemon address, such as unix:///run/docker.sock. The
// default follows DOCKER_HOST, then the standard socket.
func WithHost(host string) Option { return func(e *Engine) { e.host = host } }

// New returns an engine. It does not contact the daemon.
func New(opts ...Option) (*Engine, error) {
	e := &Engine{log: slog.New(slog.DiscardHandler), setupTimeout: setupTimeout}
	for _, o := range opts {
		o(e)
	}
	copts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if e.host != "" {
		copts = append(copts, client.WithHost(e.host))
	}
	cli, err := client.NewClientWithOpts(copts...)
	if err != nil {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("configuring the docker client: %v; check DOCKER_HOST", err))
	}
	e.cli = cli
	return e, nil
}

// Close releases the client.
func (e *Engine) Close() error { return e.cli.Close() }

// Name implements engine.Engine.
func (e *Engine) Name() string { return "docker" }

// Ping checks that dockerd answers.
func (e *Engine) Ping(ctx context.Context) error {
	if _, err := e.cli.Ping(ctx); err != nil {
		return unavailable(e.cli.DaemonHost(), err)
	}
	return nil
}

func unavailable(host string, err error) error {
	return fmt.Errorf("%w: cannot reach dockerd at %s (%v); start it with `make setup`, or check DOCKER_HOST",
		errdefs.ErrUnavailable, host, err)
}

// Check implements engine.Engine: dockerd answers, the isolation mode's
// runtime is registered, and the image is present under exactly its ID.
func (e *Engine) Check(ctx context.Context, j *engine.Job) error {
	rt, ok := isolation.DockerRuntimes[j.Policy.Isolation]
	if !ok {
		return fmt.Errorf("%w: isolation %q is not available on the docker engine yet; use --isolation %s",
			errdefs.ErrInvalidArgument, j.Policy.Isolation, isolation.GVisor)
	}
	info, err := e.cli.Info(ctx)
	if err != nil {
		return unavailable(e.cli.DaemonHost(), err)
	}
	e.learn(info)
	r, ok := info.Runtimes[rt]
	if !ok {
		return fmt.Errorf("%w: dockerd has no runtime %q, so it cannot run %s isolation; register airlock's runsc with `make setup` (or `airlock host install-runtime`) and retry",
			errdefs.ErrUnavailable, rt, j.Policy.Isolation)
	}
	if j.Policy.Isolation == isolation.GVisor {
		if missing := MissingRunscArgs(r.Args); len(missing) > 0 {
			// runsc ignores the spec's seccomp profile without --oci-seccomp:
			// running anyway would silently drop a layer.
			return fmt.Errorf("%w: dockerd's runtime %q lacks %s, so it would not apply airlock's policy in full; re-register it with `make setup` (or `airlock host install-runtime`), then SIGHUP dockerd",
				errdefs.ErrUnavailable, rt, strings.Join(missing, " and "))
		}
		if logPattern(r.Args) == "" {
			return noSandboxLogs(rt)
		}
	}
	img, err := e.inspectImage(ctx, j.Image.String())
	if err != nil {
		return err
	}
	if img.Config == nil {
		return nil
	}
	return checkImageConfig(j.Image.String(), img.Config.Volumes, img.Config.Labels)
}

func (e *Engine) checkImage(ctx context.Context, id string) error {
	_, err := e.inspectImage(ctx, id)
	return err
}

func (e *Engine) inspectImage(ctx context.Context, id string) (image.InspectResponse, error) {
	img, err := e.cli.ImageInspect(ctx, id)
	if errdefs.IsNotFound(err) {
		return img, fmt.Errorf("%w: image %s is not in dockerd; airlock never pulls, so import it first with `airlock image import PATH` (`airlock image ls` lists what is present)",
			errdefs.ErrNotFound, id)
	}
	if err != nil {
		return img, unavailable(e.cli.DaemonHost(), err)
	}
	if img.ID != id {
		return img, fmt.Errorf("%w: dockerd resolved %s to image %s; refusing to run anything but the pinned ID", errdefs.ErrNotFound, id, img.ID)
	}
	return img, nil
}

// checkImageConfig refuses what dockerd would act on in an image's config
// that the container's own config cannot override. The image ID is the
// config's digest, so what is checked here is what dockerd merges.
//   - VOLUME: dockerd creates a writable volume on the host's disk for each
//     path, outside the tmpfs and output caps, and keeps it after the run.
//   - Labels in airlock's namespace: reserved for what airlock sets, which
//     the reaper and `airlock ps` read.
func checkImageConfig(id string, volumes map[string]struct{}, labels map[string]string) error {
	if len(volumes) > 0 {
		paths := slices.Sorted(maps.Keys(volumes))
		return fmt.Errorf("%w: image %s declares VOLUME %s; dockerd would back each with a writable volume on the host's disk, outside airlock's limits, so airlock refuses it: rebuild the image without VOLUME (the oci engine ignores VOLUME, and keeps those paths read-only)",
			errdefs.ErrInvalidArgument, id, strings.Join(paths, " "))
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if strings.HasPrefix(k, labelNamespace) {
			return fmt.Errorf("%w: image %s carries label %q in airlock's own namespace %q; rebuild the image without it",
				errdefs.ErrInvalidArgument, id, k, labelNamespace)
		}
	}
	return nil
}

// MissingRunscArgs lists the runsc flags airlock's policy depends on
// (isolation.RunscFlags) that a registered runtime lacks.
func MissingRunscArgs(args []string) []string { return isolation.MissingRunscFlags(args) }

// logPattern finds the per-sandbox --debug-log pattern among runsc's
// registered arguments.
func logPattern(args []string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--debug-log="); ok && strings.Contains(v, "%ID%") {
			return v
		}
	}
	return ""
}

// HasImage reports whether dockerd holds the image with exactly this ID.
func (e *Engine) HasImage(ctx context.Context, id string) (bool, error) {
	err := e.checkImage(ctx, id)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// Run implements engine.Engine.
func (e *Engine) Run(ctx context.Context, j *engine.Job) (engine.Exit, error) {
	if err := ctx.Err(); err != nil {
		return engine.Exit{}, err
	}
	// On cgroupfs hosts the container nests in a cgroup airlock owns: it
	// outlives the container, so peaks and limit hits can still be read.
	var cg *cgroup.Group
	facts, err := e.facts(ctx)
	if err != nil {
		return engine.Exit{}, err
	}
	if j.Policy.Isolation == isolation.GVisor && facts.sandboxLogs == "" {
		return engine.Exit{}, noSandboxLogs(isolation.DockerRuntimes[isolation.GVisor])
	}
	if facts.cgroupfs && os.Geteuid() == 0 {
		l := j.Policy.Limits
		var err error
		cg, err = cgroup.New(j.ID, cgroup.Limits{Memory: int64(l.Memory), MilliCPUs: int64(l.CPUs), Pids: hostPids(j.Policy)})
		if err != nil {
			return engine.Exit{}, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			if err := cg.Delete(dctx); err != nil {
				e.log.Warn("deleting cgroup", "sandbox_id", j.ID, "err", err)
			}
		}()
	}
	labels := map[string]string{
		LabelID:       j.ID,
		LabelOwner:    j.Owner,
		LabelDeadline: j.Deadline.UTC().Format(time.RFC3339),
	}
	djob := isolation.DockerJob{
		Image:   j.Image.String(),
		Argv:    j.Argv,
		Env:     j.Env,
		Labels:  labels,
		Stdin:   j.Stdin != nil,
		Binds:   engine.Binds(j.Mounts),
		Workdir: j.Workdir,
	}
	if cg != nil {
		djob.CgroupParent = cg.Path()
	}
	cfg, host, netcfg, err := isolation.DockerConfig(j.Policy, djob)
	if err != nil {
		return engine.Exit{}, fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	log := e.log.With("sandbox_id", j.ID, "image_digest", j.Image.String(), "runtime", host.Runtime)

	// Daemon calls run on a context detached from the caller's: a cancel
	// that lands mid-create must not leave a container airlock never learnt
	// the ID of. The caller's context only decides when to kill.
	bg, cancelBg := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBg()
	since := time.Now()
	name := "airlock-" + j.ID
	cctx, cancelCreate := context.WithTimeout(bg, e.setupTimeout)
	created, err := e.cli.ContainerCreate(cctx, cfg, host, netcfg, nil, name)
	cancelCreate()
	if err != nil {
		if errors.Is(cctx.Err(), context.DeadlineExceeded) {
			// dockerd may create it yet: remove it by name.
			rctx, cancel := context.WithTimeout(bg, cleanupTimeout)
			defer cancel()
			if rerr := e.cli.ContainerRemove(rctx, name, container.RemoveOptions{Force: true, RemoveVolumes: true}); rerr != nil && !errdefs.IsNotFound(rerr) {
				log.Warn("removing sandbox", "container", name, "err", rerr)
			}
			return engine.Exit{}, e.tooSlow("creating sandbox")
		}
		return engine.Exit{}, classify("creating sandbox", e.cli.DaemonHost(), err)
	}
	id := created.ID
	log.Debug("created", "container", id)
	j.State(lifecycle.Created)
	w := e.watchEvents(bg, id, since)
	var sandboxLogs string
	if j.Policy.Isolation == isolation.GVisor && facts.sandboxLogs != "" {
		sandboxLogs = facts.sandboxLogDir(id)
		defer os.RemoveAll(sandboxLogs)
	}

	// From here on every path removes the container.
	defer func() {
		rctx, cancel := context.WithTimeout(bg, cleanupTimeout)
		defer cancel()
		if err := e.cli.ContainerRemove(rctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !errdefs.IsNotFound(err) {
			log.Warn("removing sandbox", "container", id, "err", err)
		}
	}()

	// The attach and the wait stay open for the whole run, so their bound
	// is on the answer, not their context; a late attach is closed.
	type attachment struct {
		r   types.HijackedResponse
		err error
	}
	a, ok := within(e.setupTimeout, func() attachment {
		r, err := e.cli.ContainerAttach(bg, id, container.AttachOptions{
			Stream: true, Stdout: true, Stderr: true, Stdin: j.Stdin != nil,
		})
		return attachment{r, err}
	}, func(a attachment) {
		if a.err == nil {
			a.r.Close()
		}
	})
	if !ok {
		return engine.Exit{}, e.tooSlow("attaching to sandbox")
	}
	if a.err != nil {
		return engine.Exit{}, classify("attaching to sandbox", e.cli.DaemonHost(), a.err)
	}
	att := a.r
	defer att.Close()
	type waiting struct {
		ch   <-chan container.WaitResponse
		errs <-chan error
	}
	wt, ok := within(e.setupTimeout, func() waiting {
		ch, errs := e.cli.ContainerWait(bg, id, container.WaitConditionNextExit)
		return waiting{ch, errs}
	}, func(waiting) {})
	if !ok {
		return engine.Exit{}, e.tooSlow("waiting for sandbox")
	}
	waitCh, waitErr := wt.ch, wt.errs

	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(j.Stdout, j.Stderr, att.Reader)
		copied <- err
	}()
	if j.Stdin != nil {
		go func() {
			io.Copy(att.Conn, j.Stdin)
			att.CloseWrite()
		}()
	}

	if err := ctx.Err(); err != nil {
		return engine.Exit{Killed: true, Code: -1}, nil
	}
	j.State(lifecycle.Ready)
	sctx, cancelStart := context.WithTimeout(bg, e.setupTimeout)
	err = e.cli.ContainerStart(sctx, id, container.StartOptions{})
	cancelStart()
	if errors.Is(sctx.Err(), context.DeadlineExceeded) && err != nil {
		return engine.Exit{}, e.tooSlow("starting sandbox")
	}
	if err != nil {
		return engine.Exit{}, classify("starting sandbox", e.cli.DaemonHost(), err)
	}
	j.State(lifecycle.Running)
	started := time.Now()
	timer := time.NewTimer(j.Policy.Limits.Timeout)
	defer timer.Stop()

	var exit engine.Exit
	kill := func() {
		kctx, cancel := context.WithTimeout(bg, cleanupTimeout)
		defer cancel()
		w.ours.Store(true)
		if err := e.cli.ContainerKill(kctx, id, "KILL"); err != nil && !errdefs.IsNotFound(err) && !errdefs.IsConflict(err) {
			log.Warn("killing sandbox", "err", err)
		}
	}
	var status container.WaitResponse
	select {
	case status = <-waitCh:
	case err := <-waitErr:
		return engine.Exit{}, engine.Lost("lost the connection to dockerd while the program ran (%v): dockerd stopped or restarted", err)
	case <-timer.C:
		exit.TimedOut = true
		kill()
	case <-ctx.Done():
		exit.Killed = true
		kill()
	}
	if exit.TimedOut || exit.Killed {
		select {
		case status = <-waitCh:
		case err := <-waitErr:
			return engine.Exit{}, classify("waiting for killed sandbox", e.cli.DaemonHost(), err)
		case <-time.After(cleanupTimeout):
			return engine.Exit{}, fmt.Errorf("%w: sandbox %q did not exit %v after SIGKILL", errdefs.ErrInternal, j.ID, cleanupTimeout)
		}
	}
	finished := time.Now()
	// The stream ends once the container has exited; bound the wait in case
	// the daemon keeps the connection.
	select {
	case err := <-copied:
		if err != nil && !errors.Is(err, io.EOF) && !exit.Killed && !exit.TimedOut {
			log.Warn("reading output", "err", err)
		}
	case <-time.After(5 * time.Second):
		att.Close()
		<-copied
	}

	if err := w.verdict(5 * time.Second); err != nil {
		return engine.Exit{}, err
	}
	exit.Code = int(status.StatusCode)
	exit.Started, exit.Finished = started, finished
	ictx, cancel := context.WithTimeout(bg, cleanupTimeout)
	defer cancel()
	st, err := e.cli.ContainerInspect(ictx, id)
	if err != nil {
		return engine.Exit{}, classify("inspecting sandbox", e.cli.DaemonHost(), err)
	}
	if st.State != nil {
		exit.OOMKilled = st.State.OOMKilled
		if t, err := time.Parse(time.RFC3339Nano, st.State.StartedAt); err == nil && !t.IsZero() {
			exit.Started = t
		}
		if t, err := time.Parse(time.RFC3339Nano, st.State.FinishedAt); err == nil && !t.IsZero() {
			exit.Finished = t
		}
	}
	if status.Error != nil && status.Error.Message != "" {
		log.Warn("wait reported", "err", status.Error.Message)
	}
	if cg != nil {
		s, err := cg.Stats()
		if err != nil {
			return engine.Exit{}, statsLost(err)
		}
		// cgroup v1 counts a refused fork in the forking (container's)
		// cgroup, which dockerd removes; reaching the parent's limit is
		// the trace that stays.
		exit.PidsLimited = s.PidsLimitHits > 0 || s.PidsPeak >= hostPids(j.Policy)
		exit.Usage = engine.Usage{CPU: s.CPU, MemoryPeak: s.MemoryPeak, PidsPeak: s.PidsPeak}
	}
	if sandboxLogs != "" && !exit.TimedOut && !exit.Killed && !exit.OOMKilled && !exit.PidsLimited && exit.Usage.MemoryPeak < int64(j.Policy.Limits.Memory) {
		// The shim reaps the sandbox and reports a kill from the host as
		// exit 137, like the program's own SIGKILL; only the sandbox's log
		// tells them apart.
		if exited, logged := engine.GVisorExited(sandboxLogs); logged && !exited {
			return engine.Exit{}, engine.Lost("the gVisor sandbox process died before the program ended: killed from outside airlock, or it crashed")
		}
	}
	log.Debug("exited", "code", exit.Code, "oom", exit.OOMKilled, "timed_out", exit.TimedOut, "killed", exit.Killed)
	return exit, nil
}

// statsLost is the error for a run whose cgroup could not be read: without
// its counters a pids-limit hit or an OOM kill would pass for the program's
// own exit.
func statsLost(err error) error {
	return fmt.Errorf("%w: %v; without the run's cgroup counters airlock cannot tell an OOM kill or the pids limit from the program's own exit", errdefs.ErrInternal, err)
}

// within returns call's answer, or false once d has passed; an answer that
// comes later goes to late.
func within[T any](d time.Duration, call func() T, late func(T)) (T, bool) {
	ch := make(chan T, 1)
	go func() { ch <- call() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, true
	case <-t.C:
		go func() { late(<-ch) }()
		var zero T
		return zero, false
	}
}

// tooSlow says dockerd did not answer a setup call in time.
func (e *Engine) tooSlow(what string) error {
	return fmt.Errorf("%s: %w: dockerd at %s did not answer within %v; check that it is healthy (`docker info`, its log) or restart it with `make setup`",
		what, errdefs.ErrUnavailable, e.cli.DaemonHost(), e.setupTimeout)
}

// noSandboxLogs refuses a gVisor run on a runtime registered without a
// per-sandbox --debug-log: only that log tells a sandbox killed from
// outside from the program's own SIGKILL.
func noSandboxLogs(rt string) error {
	return fmt.Errorf("%w: dockerd's runtime %q has no per-sandbox --debug-log (…/%%ID%%/), so airlock could not tell a sandbox killed from outside from the program's own exit; re-register it with `make setup` (or `airlock host install-runtime`), then SIGHUP dockerd",
		errdefs.ErrUnavailable, rt)
}

// classify maps a daemon error onto airlock's error classes and says what to do.
func classify(what, host string, err error) error {
	switch {
	case client.IsErrConnectionFailed(err):
		return unavailable(host, err)
	case errdefs.IsNotFound(err):
		return fmt.Errorf("%s: %w: %v", what, errdefs.ErrNotFound, err)
	case errdefs.IsInvalidArgument(err):
		return fmt.Errorf("%s: %w: %v", what, errdefs.ErrInvalidArgument, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w: %v; the dockerd log has the details, and `make setup` re-checks the runtime", what, errdefs.ErrInternal, err)
}

// ListSandboxes returns the IDs of containers airlock created, running or not.
func (e *Engine) ListSandboxes(ctx context.Context) ([]string, error) {
	list, err := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelID))})
	if err != nil {
		return nil, unavailable(e.cli.DaemonHost(), err)
	}
	ids := make([]string, 0, len(list))
	for _, c := range list {
		ids = append(ids, c.Labels[LabelID])
	}
	return ids, nil
}

// Version returns the daemon's version and negotiated API version.
func (e *Engine) Version(ctx context.Context) (string, error) {
	v, err := e.cli.ServerVersion(ctx)
	if err != nil {
		return "", unavailable(e.cli.DaemonHost(), err)
	}
	return v.Version + " (API " + e.cli.ClientVersion() + ")", nil
}

var _ engine.Engine = (*Engine)(nil)

// hostPids is the host task limit for the policy's runtime.
func hostPids(p isolation.Policy) int64 {
	if p.Isolation == isolation.GVisor {
		return isolation.GVisorHostPids(p.Limits.Pids)
	}
	return p.Limits.Pids
}

// Runtime implements engine.Engine: the binary and flags dockerd has
// registered for the mode, and dockerd's own version.
func (e *Engine) Runtime(ctx context.Context, m isolation.Mode) (engine.Runtime, error) {
	rt := engine.Runtime{Name: isolation.DockerRuntimes[m], Flags: []string{}}
	info, err := e.cli.Info(ctx)
	if err != nil {
		return rt, unavailable(e.cli.DaemonHost(), err)
	}
	path := rt.Name
	if r, ok := info.Runtimes[rt.Name]; ok {
		if r.Path != "" {
			path = r.Path
		}
		rt.Flags = append(rt.Flags, r.Args...)
	}
	v, err := engine.BinaryVersion(ctx, path, "")
	if err != nil {
		return rt, fmt.Errorf("%w: cannot read the version of dockerd's runtime %q: %v; run `make setup`", errdefs.ErrUnavailable, rt.Name, err)
	}
	rt.Version = v + ", via dockerd " + info.ServerVersion
	return rt, nil
}
