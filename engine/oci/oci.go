// Package oci runs airlock jobs with no daemon: it unpacks verified images
// from airlock's own store, writes an OCI runtime bundle from
// isolation.OCISpec, runs it with runsc (or runc), and accounts for it in a
// cgroup that airlock owns.
//
// Rules:
//   - The run's cgroup exists, with its limits, before the runtime starts,
//     and is deleted only after every process in it is gone.
//   - Kill means: kill every process in the cgroup (daemons that escaped
//     the runtime's process tree included), then the runtime itself.
//   - The runtime's state, the bundle and the cgroup are removed on a
//     context detached from the caller's.
package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/lifecycle"
	"github.com/airlock-sandbox/airlock/store"
)

// cleanupTimeout bounds kill, delete and cgroup removal.
const cleanupTimeout = 30 * time.Second

// Engine is the daemonless backend.
type Engine struct {
	root  string
	runsc string
	runc  string
	store *store.Store
	log   *slog.Logger
}

// Option configures an Engine.
type Option func(*Engine)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(e *Engine) { e.log = l } }

// WithRunsc sets the runsc binary; the default is <root>/tools/runsc.
func WithRunsc(path string) Option { return func(e *Engine) { e.runsc = path } }

// WithRunc sets the runc binary; the default is runc on PATH.
func WithRunc(path string) Option { return func(e *Engine) { e.runc = path } }

// RunscPath is where setup installs airlock's pinned runsc under root.
func RunscPath(root string) string { return filepath.Join(root, "tools", "runsc") }

// New returns an engine over airlock's root directory.
func New(root string, opts ...Option) (*Engine, error) {
	e := &Engine{root: root, runsc: RunscPath(root), runc: "runc", log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(e)
	}
	st, err := store.Open(filepath.Join(root, "store"))
	if err != nil {
		return nil, fmt.Errorf("%w: opening the image store: %v", errdefs.ErrUnavailable, err)
	}
	e.store = st
	return e, nil
}

// Name implements engine.Engine.
func (e *Engine) Name() string { return "oci" }

// Usable reports whether this engine can run here at all: root, and
// airlock's runsc installed.
func Usable(root string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: the oci engine needs root (it creates cgroups and runs runsc); run as root or use --engine docker", errdefs.ErrUnavailable)
	}
	fi, err := os.Stat(RunscPath(root))
	if err != nil || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%w: runsc is not installed at %s; run `make setup`", errdefs.ErrUnavailable, RunscPath(root))
	}
	return nil
}

// Check implements engine.Engine.
func (e *Engine) Check(ctx context.Context, j *engine.Job) error {
	if err := Usable(e.root); err != nil {
		return err
	}
	if j.Policy.Isolation == isolation.Seccomp {
		if _, err := exec.LookPath(e.runc); err != nil {
			return fmt.Errorf("%w: seccomp isolation runs runc, which is not installed (%v); run `make setup`", errdefs.ErrUnavailable, err)
		}
	}
	if !e.store.Has(j.Image) {
		return fmt.Errorf("%w: image %s is not in airlock's store; airlock never pulls, so import it first with `airlock image import PATH` (`airlock image ls` lists what is present)",
			errdefs.ErrNotFound, j.Image)
	}
	return nil
}

// Run implements engine.Engine.
func (e *Engine) Run(ctx context.Context, j *engine.Job) (engine.Exit, error) {
	if err := ctx.Err(); err != nil {
		return engine.Exit{Killed: true, Code: -1}, nil
	}
	bg := context.WithoutCancel(ctx)
	log := e.log.With("sandbox_id", j.ID, "image_digest", j.Image.String())

	// The run holds its image's tree against `airlock image rm` until it
	// is over.
	rootfs, release, err := e.store.Use(ctx, j.Image)
	if err != nil {
		return engine.Exit{}, fmt.Errorf("%w: unpacking image %s: %v", errdefs.ErrInternal, j.Image, err)
	}
	defer release()
	// runsc refuses a root path that runs through a symlink.
	if rootfs, err = filepath.EvalSymlinks(rootfs); err != nil {
		return engine.Exit{}, fmt.Errorf("%w: unpacking image %s: %v", errdefs.ErrInternal, j.Image, err)
	}
	env, workdir, err := e.imageDefaults(j)
	if err != nil {
		return engine.Exit{}, err
	}

	l := j.Policy.Limits
	native := j.Policy.Isolation == isolation.Seccomp
	hostPids := isolation.GVisorHostPids(l.Pids)
	if native {
		hostPids = l.Pids
	}
	cg, err := cgroup.New(j.ID, cgroup.Limits{Memory: int64(l.Memory), MilliCPUs: int64(l.CPUs), Pids: hostPids})
	if err != nil {
		return engine.Exit{}, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(bg, cleanupTimeout)
		defer cancel()
		if err := cg.Delete(dctx); err != nil {
			log.Warn("deleting cgroup", "err", err)
		}
	}()

	bundle := filepath.Join(e.root, "oci", "bundles", j.ID)
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return engine.Exit{}, fmt.Errorf("%w: creating bundle: %v", errdefs.ErrUnavailable, err)
	}
	defer os.RemoveAll(bundle)
	// Both runtimes create mount points, and a missing working directory,
	// in the root they are given: give them a per-run overlay, so the
	// shared tree is never written.
	if rootfs, err = rootOverlay(bundle, rootfs); err != nil {
		return engine.Exit{}, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	defer unmount(filepath.Join(bundle, "rootfs"), log)
	cgPath := cg.Path()
	if native {
		// runc removes the cgroup it runs in: give it a child of airlock's.
		cgPath += "/ctr"
	}

	spec, err := isolation.OCISpec(j.Policy, isolation.OCIJob{
		Rootfs:      rootfs,
		Argv:        j.Argv,
		Env:         env,
		Workdir:     workdir,
		Binds:       engine.Binds(j.Mounts),
		CgroupsPath: cgPath,
		Annotations: map[string]string{"airlock.id": j.ID, "airlock.owner": j.Owner, "airlock.deadline": j.Deadline.UTC().Format(time.RFC3339)},
	})
	if err != nil {
		return engine.Exit{}, fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	if native {
		// runc sets these limits on its child cgroup; keep them just above
		// airlock's, so that airlock's cgroup, which outlives the run, is
		// the one that trips and counts.
		*spec.Linux.Resources.Memory.Limit += 1 << 20
		*spec.Linux.Resources.Memory.Swap += 1 << 20
		*spec.Linux.Resources.Pids.Limit++
	}
	if err := writeSpec(bundle, spec); err != nil {
		return engine.Exit{}, fmt.Errorf("%w: writing bundle: %v", errdefs.ErrUnavailable, err)
	}
	j.State(lifecycle.Created)

	name := "airlock-" + j.ID
	runtime, state := e.runsc, filepath.Join(e.root, "oci", "runsc")
	runLogs := filepath.Join(bundle, "logs")
	args := append([]string{"--root", state}, runscFlags(runLogs)...)
	if native {
		runtime, state = e.runc, filepath.Join(e.root, "oci", "runc")
		args = []string{"--root", state}
	}
	log = log.With("runtime", filepath.Base(runtime))
	cmd := exec.Command(runtime, append(args, "run", "--bundle", bundle, name)...)
	cmd.Stdin = j.Stdin
	cmd.Stdout, cmd.Stderr = j.Stdout, j.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Once runsc has exited, stop waiting for its pipes: a process that
	// escaped with a copy of them is killed with the cgroup below.
	cmd.WaitDelay = 2 * time.Second
	defer e.delete(bg, runtime, state, name, log)

	j.State(lifecycle.Ready)
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return engine.Exit{}, fmt.Errorf("%w: starting %s: %v; run `make setup` to install it", errdefs.ErrUnavailable, filepath.Base(runtime), err)
	}
	j.State(lifecycle.Running)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(l.Timeout)
	defer timer.Stop()

	var exit engine.Exit
	var waitErr error
	select {
	case waitErr = <-done:
	case <-timer.C:
		exit.TimedOut = true
	case <-ctx.Done():
		exit.Killed = true
	}
	if exit.TimedOut || exit.Killed {
		if waitErr, err = kill(bg, cg, cmd, done, cleanupTimeout); err != nil {
			return engine.Exit{}, err
		}
	}
	exit.Started, exit.Finished = started, time.Now()
	exit.Code = exitCode(cmd.ProcessState)
	if waitErr != nil && cmd.ProcessState == nil {
		return engine.Exit{}, fmt.Errorf("%w: waiting for runsc: %v", errdefs.ErrInternal, waitErr)
	}
	// Whatever the program left running goes now, before anyone reads its
	// output directory.
	kctx, cancel := context.WithTimeout(bg, cleanupTimeout)
	defer cancel()
	if err := cg.KillAll(kctx); err != nil {
		return engine.Exit{}, fmt.Errorf("%w: %v", errdefs.ErrInternal, err)
	}
	st, err := cg.Stats()
	if err != nil {
		// Zero counters would pass an OOM kill or a pids-limit hit for the
		// program's own exit.
		return engine.Exit{}, fmt.Errorf("%w: %v; without the run's cgroup counters airlock cannot tell an OOM kill or the pids limit from the program's own exit", errdefs.ErrInternal, err)
	}
	// A SIGKILL at the memory limit is the OOM killer's, even where the
	// kill was counted in a cgroup runc has since removed.
	exit.OOMKilled = st.OOMKills > 0 || exit.Code == 128+int(syscall.SIGKILL) && (st.MemoryLimitHits > 0 || st.MemoryPeak >= int64(l.Memory))
	// On cgroup v1 a refused fork is counted in the forking cgroup, which
	// for runc is its own child; reaching airlock's limit is what stays.
	exit.PidsLimited = st.PidsLimitHits > 0 || st.PidsPeak >= hostPids
	exit.Usage = engine.Usage{CPU: st.CPU, MemoryPeak: st.MemoryPeak, PidsPeak: st.PidsPeak}
	if !exit.TimedOut && !exit.Killed && !exit.OOMKilled && !exit.PidsLimited && st.MemoryPeak < int64(l.Memory) {
		if err := lost(cmd, native, runLogs); err != nil {
			return engine.Exit{}, err
		}
	}
	log.Debug("exited", "code", exit.Code, "oom", exit.OOMKilled, "pids_limited", exit.PidsLimited)
	return exit, nil
}

// lost says whether the sandbox ended from outside airlock. Both runtimes
// report the program's death by a signal as an exit status (128+N), so a
// runtime process that itself died by a signal was killed by someone else.
// runsc run reports its sandbox killed under it with the sandbox's status;
// only its log tells that apart from the program's own SIGKILL.
func lost(cmd *exec.Cmd, native bool, runLogs string) error {
	name := filepath.Base(cmd.Path)
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return engine.Lost("%s (pid %d) was killed by %s from outside airlock", name, cmd.Process.Pid, unix.SignalName(ws.Signal()))
	}
	if !native {
		if engine.GVisorSandboxKilled(runLogs) {
			return engine.Lost("the gVisor sandbox process died before the program ended: killed from outside airlock, or it crashed")
		}
	}
	return nil
}

// kill ends the sandbox: every process in its cgroup, then runsc run
// itself if it lingers. It returns runsc's wait result.
// It gives up after limit, saying why the kills failed.
func kill(ctx context.Context, cg *cgroup.Group, cmd *exec.Cmd, done <-chan error, limit time.Duration) (error, error) {
	deadline := time.After(limit)
	var cgErr, pgErr error // the last failure of each kind
	for {
		kctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := cg.KillAll(kctx); err != nil {
			cgErr = err
		}
		cancel()
		select {
		case err := <-done:
			return err, nil
		case <-time.After(200 * time.Millisecond):
			// The sandbox may not have joined its cgroup yet; runsc's own
			// process group goes too.
			if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
				pgErr = fmt.Errorf("killing process group %d: %w", cmd.Process.Pid, err)
			}
		case <-deadline:
			why := "every kill was delivered"
			if err := errors.Join(cgErr, pgErr); err != nil {
				why = strings.ReplaceAll(err.Error(), "\n", "; ")
			}
			return nil, fmt.Errorf("%w: sandbox did not exit %v after SIGKILL (%s)", errdefs.ErrInternal, limit, why)
		}
	}
}

// delete removes the runtime's state for the container; a container that
// is already gone is not an error. A runtime that ended by itself has
// removed its state already, and is not asked again (an exec of runsc
// costs about 20 ms).
func (e *Engine) delete(ctx context.Context, runtime, state, name string, log *slog.Logger) {
	if left, _ := filepath.Glob(filepath.Join(state, "*"+name+"*")); len(left) == 0 {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	// runsc reports a container it no longer knows as an error; the
	// cgroup and bundle are removed regardless, so this is only logged.
	if out, err := exec.CommandContext(dctx, runtime, "--root", state, "delete", "--force", name).CombinedOutput(); err != nil {
		log.Debug("runtime delete", "err", err, "output", strings.TrimSpace(string(out)))
	}
}

// imageDefaults takes the image's environment and working directory; the
// caller's values win.
func (e *Engine) imageDefaults(j *engine.Job) ([]string, string, error) {
	img, err := e.store.Image(j.Image)
	if err != nil {
		return nil, "", fmt.Errorf("%w: reading image %s: %v", errdefs.ErrInternal, j.Image, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, "", fmt.Errorf("%w: reading image config %s: %v", errdefs.ErrInternal, j.Image, err)
	}
	env := mergeEnv(cf.Config.Env, j.Env)
	wd := j.Workdir
	if wd == "" {
		wd = cf.Config.WorkingDir
	}
	if wd == "" {
		wd = "/"
	}
	return env, wd, nil
}

// mergeEnv lays over on top of base, key by key, keeping base's order.
func mergeEnv(base, over []string) []string {
	idx := map[string]int{}
	out := make([]string, 0, len(base)+len(over))
	for _, kv := range append(append([]string{}, base...), over...) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

func writeSpec(dir string, spec any) error {
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600)
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

var _ engine.Engine = (*Engine)(nil)

// runscFlags are the flags every runsc run gets, the policy's first; Run
// passes them and receipts record them.
func runscFlags(logs string) []string {
	return append(isolation.RunscFlags(), engine.GVisorLogFlags(logs, "run")...)
}

// Runtime implements engine.Engine.
func (e *Engine) Runtime(ctx context.Context, m isolation.Mode) (engine.Runtime, error) {
	rt := engine.Runtime{Name: "runsc", Flags: []string{}}
	bin := e.runsc
	if m == isolation.Seccomp {
		rt.Name, bin = "runc", e.runc
	} else {
		rt.Flags = runscFlags("<bundle>/logs")
	}
	v, err := engine.BinaryVersion(ctx, bin, filepath.Join(e.root, "cache"))
	if err != nil {
		return rt, fmt.Errorf("%w: cannot read %s's version: %v; run `make setup`", errdefs.ErrUnavailable, rt.Name, err)
	}
	rt.Version = v
	return rt, nil
}
