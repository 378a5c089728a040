package docker

// One-shot sandboxes: the program is the container's command, attached
// before it starts so that no byte is lost; the container ends with it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/isolation"
)

// oneShot is a container whose command is the program.
type oneShot struct {
	e      *Engine
	id     string // airlock's
	log    *slog.Logger
	policy isolation.Policy
	// bg is for every daemon call: a cancel of the caller's context must
	// not leave a container airlock never learnt the ID of.
	bg       context.Context
	cancelBg context.CancelFunc

	cg          *cgroup.Group // on cgroupfs hosts, airlock's parent cgroup
	cid         string        // the container's, once created
	sandboxLogs string        // the gVisor sandbox's log directory
	w           *watch
	att         *types.HijackedResponse
	waitCh      <-chan container.WaitResponse
	waitErr     <-chan error
	copied      chan error
	notStarted  bool // the caller's context was done before the start
	started     time.Time

	destroyOnce sync.Once
}

// Run implements engine.Engine: it makes, attaches and starts task s. On
// error it frees what it made.
func (e *Engine) Run(ctx context.Context, s *engine.SandboxSpec) (_ engine.Task, err error) {
	if err := engine.CheckKind(s, true); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &oneShot{e: e, id: s.ID, policy: s.Policy, log: e.log.With("sandbox_id", s.ID, "image_digest", s.Image.String())}
	r.bg, r.cancelBg = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			r.Destroy(ctx)
		}
	}()
	// On cgroupfs hosts the container nests in a cgroup airlock owns: it
	// outlives the container, so peaks and limit hits can still be read.
	facts, err := e.facts(ctx)
	if err != nil {
		return nil, err
	}
	if err := facts.limits(e.cli.DaemonHost()); err != nil {
		return nil, err
	}
	if s.Policy.Isolation == isolation.GVisor && facts.sandboxLogs == "" {
		return nil, noSandboxLogs(e.gvisor)
	}
	if facts.cgroupfs && os.Geteuid() == 0 {
		l := s.Policy.Limits
		if r.cg, err = cgroup.New(s.ID, cgroup.Limits{Memory: int64(l.Memory), MilliCPUs: int64(l.CPUs), Pids: hostPids(s.Policy)}); err != nil {
			return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		}
	}
	p := s.Init
	djob := isolation.DockerJob{
		Image:   s.Image.String(),
		Argv:    p.Argv,
		Env:     s.Env,
		Labels:  e.labels(s),
		Stdin:   p.Stdin != nil,
		Binds:   engine.Binds(s.Mounts),
		Workdir: s.Workdir,
	}
	djob.Runtime, _ = e.runtimeName(s.Policy.Isolation)
	if r.cg != nil {
		djob.CgroupParent = r.cg.Path()
	}
	cfg, host, netcfg, err := isolation.DockerConfig(s.Policy, djob)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	r.log = r.log.With("runtime", host.Runtime)

	since := time.Now()
	name := containerName(s.ID)
	cctx, cancelCreate := context.WithTimeout(r.bg, e.setupTimeout)
	created, err := e.cli.ContainerCreate(cctx, cfg, host, netcfg, nil, name)
	cancelCreate()
	if err != nil {
		if errors.Is(cctx.Err(), context.DeadlineExceeded) {
			// dockerd may create it yet: remove it by name.
			r.cid = name
			return nil, e.tooSlow("creating sandbox")
		}
		return nil, classify("creating sandbox", e.cli.DaemonHost(), err)
	}
	r.cid = created.ID
	if err := createWarnings(created.Warnings); err != nil {
		return nil, err // Destroy removes it
	}
	r.log.Debug("created", "container", r.cid)
	r.w = e.watchEvents(r.bg, r.cid, since)
	if s.Policy.Isolation == isolation.GVisor && facts.sandboxLogs != "" {
		r.sandboxLogs = facts.sandboxLogDir(r.cid)
	}

	// The attach and the wait stay open for the whole run, so their bound
	// is on the answer, not their context; a late attach is closed.
	type attachment struct {
		r   types.HijackedResponse
		err error
	}
	a, ok := within(e.setupTimeout, func() attachment {
		r, err := e.cli.ContainerAttach(r.bg, r.cid, container.AttachOptions{
			Stream: true, Stdout: true, Stderr: true, Stdin: p.Stdin != nil,
		})
		return attachment{r, err}
	}, func(a attachment) {
		if a.err == nil {
			a.r.Close()
		}
	})
	if !ok {
		return nil, e.tooSlow("attaching to sandbox")
	}
	if a.err != nil {
		return nil, classify("attaching to sandbox", e.cli.DaemonHost(), a.err)
	}
	r.att = &a.r
	type waiting struct {
		ch   <-chan container.WaitResponse
		errs <-chan error
	}
	wt, ok := within(e.setupTimeout, func() waiting {
		ch, errs := e.cli.ContainerWait(r.bg, r.cid, container.WaitConditionNextExit)
		return waiting{ch, errs}
	}, func(waiting) {})
	if !ok {
		return nil, e.tooSlow("waiting for sandbox")
	}
	r.waitCh, r.waitErr = wt.ch, wt.errs

	r.copied = make(chan error, 1)
	att := r.att
	go func() {
		_, err := stdcopy.StdCopy(p.Stdout, p.Stderr, att.Reader)
		r.copied <- err
	}()
	if p.Stdin != nil {
		go func() {
			io.Copy(att.Conn, p.Stdin)
			att.CloseWrite()
		}()
	}
	if ctx.Err() != nil {
		r.notStarted = true // Wait says it was killed before it started
		return r, nil
	}
	sctx, cancelStart := context.WithTimeout(r.bg, e.setupTimeout)
	err = e.cli.ContainerStart(sctx, r.cid, container.StartOptions{})
	cancelStart()
	if errors.Is(sctx.Err(), context.DeadlineExceeded) && err != nil {
		return nil, e.tooSlow("starting sandbox")
	}
	if err != nil {
		return nil, classify("starting sandbox", e.cli.DaemonHost(), err)
	}
	r.started = time.Now()
	return r, nil
}

func (r *oneShot) ID() string { return r.id }

// kill has dockerd SIGKILL the container, as airlock's own kill.
func (r *oneShot) kill() {
	kctx, cancel := context.WithTimeout(r.bg, cleanupTimeout)
	defer cancel()
	r.w.ours.Store(true)
	if err := r.e.cli.ContainerKill(kctx, r.cid, "KILL"); err != nil && !errdefs.IsNotFound(err) && !errdefs.IsConflict(err) {
		r.log.Warn("killing sandbox", "err", err)
	}
}

// Wait implements engine.Task.
func (r *oneShot) Wait(ctx context.Context) (engine.Exit, error) {
	if r.notStarted {
		return engine.Exit{Killed: true, Code: -1}, nil
	}
	e := r.e
	timer := time.NewTimer(r.policy.Limits.Timeout)
	defer timer.Stop()
	var exit engine.Exit
	var status container.WaitResponse
	select {
	case status = <-r.waitCh:
	case err := <-r.waitErr:
		return engine.Exit{}, engine.Lost("lost the connection to dockerd while the program ran (%v): dockerd stopped or restarted", err)
	case <-timer.C:
		exit.TimedOut = true
		r.kill()
	case <-ctx.Done():
		exit.Killed = true
		r.kill()
	}
	if exit.TimedOut || exit.Killed {
		select {
		case status = <-r.waitCh:
		case err := <-r.waitErr:
			return engine.Exit{}, classify("waiting for killed sandbox", e.cli.DaemonHost(), err)
		case <-time.After(cleanupTimeout):
			return engine.Exit{}, fmt.Errorf("%w: sandbox %q did not exit %v after SIGKILL", errdefs.ErrInternal, r.id, cleanupTimeout)
		}
	}
	finished := time.Now()
	// The stream ends once the container has exited; bound the wait in case
	// the daemon keeps the connection.
	select {
	case err := <-r.copied:
		if err != nil && !errors.Is(err, io.EOF) && !exit.Killed && !exit.TimedOut {
			r.log.Warn("reading output", "err", err)
		}
	case <-time.After(5 * time.Second):
		r.att.Close()
		<-r.copied
	}

	if err := r.w.verdict(5 * time.Second); err != nil {
		return engine.Exit{}, err
	}
	exit.Code = int(status.StatusCode)
	exit.Started, exit.Finished = r.started, finished
	ictx, cancel := context.WithTimeout(r.bg, cleanupTimeout)
	defer cancel()
	st, err := e.cli.ContainerInspect(ictx, r.cid)
	if err != nil {
		return engine.Exit{}, classify("inspecting sandbox", e.cli.DaemonHost(), err)
	}
	if st.State != nil {
		exit.OOMKilled = st.State.OOMKilled
		exit.Started, exit.Finished = runTimes(st.State.StartedAt, st.State.FinishedAt, exit.Started, exit.Finished)
	}
	if status.Error != nil && status.Error.Message != "" {
		r.log.Warn("wait reported", "err", status.Error.Message)
	}
	if r.cg != nil {
		s, err := r.cg.Stats()
		if err != nil {
			return engine.Exit{}, statsLost(err)
		}
		// cgroup v1 counts a refused fork in the forking (container's)
		// cgroup, which dockerd removes; reaching the parent's limit is
		// the trace that stays.
		exit.PidsLimited = s.PidsLimitHits > 0 || s.PidsPeak >= hostPids(r.policy)
		// dockerd sets OOMKilled from an event that can come after the
		// exit; the parent cgroup's counters are there already, on v1
		// without the container's group, which dockerd removes.
		exit.OOMKilled = exit.OOMKilled || engine.OOMKilled(s, exit.Code, int64(r.policy.Limits.Memory), !cgroup.Unified())
		exit.Usage = engine.Usage{CPU: s.CPU, MemoryPeak: s.MemoryPeak, PidsPeak: s.PidsPeak}
	}
	if r.sandboxLogs != "" && !exit.TimedOut && !exit.Killed && !exit.OOMKilled && !exit.PidsLimited && exit.Usage.MemoryPeak < int64(r.policy.Limits.Memory) {
		// The shim reaps the sandbox and reports a kill from the host as
		// exit 137, like the program's own SIGKILL; only the sandbox's log
		// tells them apart.
		if exited, logged := engine.GVisorExited(r.sandboxLogs); logged && !exited {
			return engine.Exit{}, engine.Lost("the gVisor sandbox process died before the program ended: killed from outside airlock, or it crashed")
		}
	}
	r.log.Debug("exited", "code", exit.Code, "oom", exit.OOMKilled, "timed_out", exit.TimedOut, "killed", exit.Killed)
	return exit, nil
}

// Destroy implements engine.Task: the container with its volumes, the
// sandbox's log and airlock's cgroup, on a context of its own.
func (r *oneShot) Destroy(ctx context.Context) error {
	var err error
	r.destroyOnce.Do(func() { err = r.destroy() })
	return err
}

func (r *oneShot) destroy() error {
	defer r.cancelBg()
	var errs []error
	if r.att != nil {
		r.att.Close()
	}
	if r.cid != "" {
		rctx, cancel := context.WithTimeout(r.bg, cleanupTimeout)
		defer cancel()
		if err := r.e.removeContainer(rctx, r.cid); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, classify("removing sandbox", r.e.cli.DaemonHost(), err))
		}
	}
	if r.sandboxLogs != "" {
		os.RemoveAll(r.sandboxLogs)
	}
	if r.cg != nil {
		dctx, cancel := context.WithTimeout(r.bg, cleanupTimeout)
		defer cancel()
		if err := r.cg.Delete(dctx); err != nil {
			errs = append(errs, fmt.Errorf("%w: deleting the cgroup of %q: %v", errdefs.ErrUnavailable, r.id, err))
		}
	}
	return errors.Join(errs...)
}

// runTimes bounds a program's run by dockerd's StartedAt and FinishedAt
// when they make a run, and by this process's started and finished when
// they do not. dockerd's bound the program more closely, but it records a
// start once the runtime has reported it: a program that ends first can
// have a FinishedAt before its StartedAt.
func runTimes(startedAt, finishedAt string, started, finished time.Time) (time.Time, time.Time) {
	start, serr := time.Parse(time.RFC3339Nano, startedAt)
	end, ferr := time.Parse(time.RFC3339Nano, finishedAt)
	if serr != nil || ferr != nil || start.IsZero() || end.Before(start) {
		return started, finished
	}
	return start, end
}
