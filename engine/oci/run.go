package oci

// One-shot sandboxes: the program is the container's process, run
// attached by `runsc run` (or `runc run`); the sandbox ends with it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/isolation"
)

// oneShot is a sandbox whose only process is its program.
type oneShot struct {
	e       *Engine
	id      string
	log     *slog.Logger
	p       *prepared
	limits  isolation.Limits
	runtime string // the runtime binary
	state   string // its state root
	runLogs string // runsc run's log directory
	name    string

	cmd     *exec.Cmd // nil when the context was done before the start
	done    chan error
	reaped  bool // Wait took cmd's end from done
	started time.Time

	// drain, when set, waits for the output to be read once the runtime
	// has ended (a held sandbox's pipes); closers go at destroy.
	drain   func()
	closers []io.Closer

	destroyOnce sync.Once

	// egress is the policy's; px is its proxy, served by this process
	// (egress_linux.go), nil without egress.
	egress isolation.Egress
	px     *proxied
}

// Run implements engine.Engine: it makes and starts task s. On error it
// frees what it made.
func (e *Engine) Run(ctx context.Context, s *engine.SandboxSpec) (_ engine.Task, err error) {
	if err := engine.CheckKind(s, true); err != nil {
		return nil, err
	}
	if err := e.Check(ctx, s); err != nil {
		return nil, err
	}
	r := &oneShot{e: e, id: s.ID, limits: s.Policy.Limits, egress: s.Policy.Egress, name: namePrefix + s.ID,
		log: e.log.With("sandbox_id", s.ID, "image_digest", s.Image.String())}
	if err := ctx.Err(); err != nil {
		return r, nil // Wait says it was killed before it started
	}
	begin := time.Now()
	if err := r.serveEgress(ctx); err != nil {
		return nil, err
	}
	if r.p, err = e.prepare(ctx, s, s.Init.Argv, ""); err != nil {
		r.Destroy(ctx)
		return nil, err
	}
	r.log.Debug("prepared", "took", time.Since(begin).Round(10*time.Microsecond).String())
	cmd := r.command(pipedStdio(s.Init.Stdin, s.Init.Stdout, s.Init.Stderr))
	// Once runsc has exited, stop waiting for its pipes: a process that
	// escaped with a copy of them is killed with the cgroup.
	cmd.WaitDelay = 2 * time.Second
	r.started = time.Now()
	if err := r.start(cmd); err != nil {
		r.Destroy(ctx)
		return nil, err
	}
	return r, nil
}

// command is the runtime's `run` of the prepared bundle, with the given
// stdio: pipes airlock made (pipedStdio, or a held sandbox's own).
func (r *oneShot) command(stdin io.Reader, stdout, stderr io.Writer) *exec.Cmd {
	e := r.e
	r.runtime, r.state = e.runsc, e.runscState()
	r.runLogs = filepath.Join(r.p.bundle, "logs")
	args := append([]string{"--root", r.state}, isolation.RunscNetwork(runscFlags(r.runLogs), r.egress)...)
	if r.p.native {
		r.runtime, r.state = e.runc, e.runcState()
		args = []string{"--root", r.state}
	}
	r.log = r.log.With("runtime", filepath.Base(r.runtime))
	cmd := exec.Command(r.runtime, append(args, "run", "--bundle", r.p.bundle, r.name)...)
	cmd.Env = runtimeEnv
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// serveEgress makes the sandbox's namespaces and serves its proxy, for a
// policy with egress.
func (r *oneShot) serveEgress(ctx context.Context) error {
	if !r.egress.On() {
		return nil
	}
	px, err := r.e.serveEgress(ctx, r.id, r.egress)
	r.px = px
	return err
}

// start starts cmd and watches for its end.
func (r *oneShot) start(cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%w: starting %s: %v; run `make setup` to install it", errdefs.ErrUnavailable, filepath.Base(r.runtime), err)
	}
	r.cmd, r.done = cmd, make(chan error, 1)
	go func() { r.done <- cmd.Wait() }()
	return nil
}

func (r *oneShot) ID() string { return r.id }

// runscSandboxGone is what `runsc run` exits with when its sandbox was
// killed under it and it has no status of the program's.
const runscSandboxGone = 128

// Wait implements engine.Task.
func (r *oneShot) Wait(ctx context.Context) (engine.Exit, error) {
	if r.cmd == nil {
		return engine.Exit{Killed: true, Code: -1}, nil
	}
	bg := context.WithoutCancel(ctx)
	timer := time.NewTimer(r.limits.Timeout)
	defer timer.Stop()
	var exit engine.Exit
	var waitErr, err error
	select {
	case waitErr = <-r.done:
	case <-timer.C:
		exit.TimedOut = true
	case <-ctx.Done():
		exit.Killed = true
	}
	if exit.TimedOut || exit.Killed {
		if waitErr, err = kill(bg, r.p.cg, r.cmd, r.done, cleanupTimeout); err != nil {
			return engine.Exit{}, err
		}
	}
	r.reaped = true
	exit.Started, exit.Finished = r.started, time.Now()
	defer func() { r.log.Debug("counted", "took", time.Since(exit.Finished).Round(10*time.Microsecond).String()) }()
	exit.Code = exitCode(r.cmd.ProcessState)
	if (exit.TimedOut || exit.Killed) && exit.Code == runscSandboxGone {
		// The kill reached the sandbox before runsc itself, which then
		// reports the sandbox gone rather than the program's status: the
		// program died of airlock's SIGKILL all the same.
		exit.Code = 128 + int(syscall.SIGKILL)
	}
	if waitErr != nil && r.cmd.ProcessState == nil {
		return engine.Exit{}, fmt.Errorf("%w: waiting for %s: %v", errdefs.ErrInternal, filepath.Base(r.runtime), waitErr)
	}
	// Whatever the program left running goes now, before anyone reads its
	// output directory.
	kctx, cancel := context.WithTimeout(bg, cleanupTimeout)
	defer cancel()
	if err := r.p.cg.KillAll(kctx); err != nil {
		return engine.Exit{}, fmt.Errorf("%w: %v", errdefs.ErrInternal, err)
	}
	if r.drain != nil {
		r.drain()
	}
	st, err := r.p.cg.Stats()
	if err != nil {
		// Zero counters would pass an OOM kill or a pids-limit hit for the
		// program's own exit.
		return engine.Exit{}, fmt.Errorf("%w: %v; without the run's cgroup counters airlock cannot tell an OOM kill or the pids limit from the program's own exit", errdefs.ErrInternal, err)
	}
	l := r.limits
	exit.OOMKilled = engine.OOMKilled(st, exit.Code, int64(l.Memory), r.p.native && !cgroup.Unified())
	// On cgroup v1 a refused fork is counted in the forking cgroup, which
	// for runc is its own child; reaching airlock's limit is what stays.
	exit.PidsLimited = st.PidsLimitHits > 0 || st.PidsPeak >= r.p.hostPids
	exit.Usage = engine.Usage{CPU: st.CPU, MemoryPeak: st.MemoryPeak, PidsPeak: st.PidsPeak}
	if r.px != nil {
		// Nothing of the sandbox is left to use its proxy: stopping it
		// now closes every connection, so the totals count them all. Its
		// own failure is the destroy's.
		t, _ := r.px.halt()
		exit.Egress = &t
	}
	if !exit.TimedOut && !exit.Killed && !exit.OOMKilled && !exit.PidsLimited && st.MemoryPeak < int64(l.Memory) {
		if err := lost(r.cmd, r.p.native, r.runLogs); err != nil {
			return engine.Exit{}, err
		}
	}
	r.log.Debug("exited", "code", exit.Code, "oom", exit.OOMKilled, "pids_limited", exit.PidsLimited)
	return exit, nil
}

// Destroy implements engine.Task: the program's processes, the
// runtime's state, the root overlay, the bundle and the cgroup, on a
// context of its own. A destroy before Wait kills the program first.
func (r *oneShot) Destroy(ctx context.Context) error {
	var err error
	r.destroyOnce.Do(func() { err = r.destroy(context.WithoutCancel(ctx)) })
	return err
}

func (r *oneShot) destroy(bg context.Context) (err error) {
	defer func() {
		for _, c := range r.closers {
			c.Close()
		}
	}()
	if r.px != nil {
		// After the sandbox: its proxy lives as long as it does.
		defer func() { err = errors.Join(err, r.px.close()) }()
	}
	if r.p == nil {
		return nil
	}
	defer r.p.release()
	if r.cmd != nil {
		if !r.reaped {
			if _, err := kill(bg, r.p.cg, r.cmd, r.done, cleanupTimeout); err != nil {
				return err
			}
		}
		r.e.delete(bg, r.runtime, r.state, r.name, r.log)
	}
	// The bundle and the cgroup go side by side.
	bundleGone := make(chan struct{})
	go func() {
		defer close(bundleGone)
		if err := removeBundle(r.p.bundle); err != nil {
			r.log.Warn("removing bundle", "err", err)
		}
	}()
	defer func() { <-bundleGone }()
	if r.p.cg != nil {
		dctx, cancel := context.WithTimeout(bg, cleanupTimeout)
		defer cancel()
		if err := r.p.cg.Delete(dctx); err != nil {
			return fmt.Errorf("%w: deleting the cgroup of %q: %v", errdefs.ErrUnavailable, r.id, err)
		}
	}
	return nil
}
