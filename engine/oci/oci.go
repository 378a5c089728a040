// Package oci runs airlock's sandboxes with no daemon: it unpacks verified
// images from airlock's own store, writes an OCI runtime bundle from
// isolation.OCISpec, runs it with runsc (or runc), and accounts for it in a
// cgroup that airlock owns. A one-shot sandbox (run.go) runs the program as
// the container's process; a long-lived one (sandbox_linux.go) runs
// airlock's idle init and takes programs by exec. Both are made by prepare.
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
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/flock"
	"github.com/airlock-sandbox/airlock/internal/realpath"
	"github.com/airlock-sandbox/airlock/internal/rootonly"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/store"
)

// runtimeEnv is the environment runsc and runc start with: none of
// airlock's own, where a credential route's value may live, and which
// runsc would hand to each sandbox's gofer for the sandbox's life.
var runtimeEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// cleanupTimeout bounds kill, delete and cgroup removal.
const cleanupTimeout = 30 * time.Second

// Engine is the daemonless backend.
type Engine struct {
	root  string
	runsc string
	runc  string
	store *store.Store
	log   *slog.Logger
	// runtimeExec keeps new gVisor sandboxes on `runsc exec`.
	runtimeExec bool
	// agent is the exec agent bound into new gVisor sandboxes.
	agent string
	// egressHosts and egressCA are files the egress proxies read
	// (WithEgressHosts, WithEgressCA).
	egressHosts, egressCA string
	// bg is work calls leave to finish after they return: the removal of
	// resumed sandboxes' used checkpoints. Close waits for it.
	bg sync.WaitGroup
	// detached has that work done by processes of its own instead
	// (WithDetachedCleanup).
	detached bool
}

// Option configures an Engine.
type Option func(*Engine)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(e *Engine) { e.log = l } }

// WithRunsc sets the runsc binary; the default is <root>/tools/runsc.
func WithRunsc(path string) Option { return func(e *Engine) { e.runsc = path } }

// WithRuntimeExec makes the gVisor sandboxes this engine creates take
// every exec through `runsc exec` rather than their control socket: what
// a runsc whose socket does not answer gets, kept testable.
func WithRuntimeExec() Option { return func(e *Engine) { e.runtimeExec = true } }

// WithAgent sets the exec agent bound into new gVisor sandboxes; the
// default is <root>/tools/airlock-agent, and "" binds none (execs then
// start through the control socket).
func WithAgent(path string) Option { return func(e *Engine) { e.agent = path } }

// WithRunc sets the runc binary; the default is runc on PATH.
func WithRunc(path string) Option { return func(e *Engine) { e.runc = path } }

// WithEgressHosts pins names for the egress proxies' resolver: a file in
// the form of /etc/hosts (egress.ParseHosts), read by each proxy when it
// is made. Names not in it go to the host's resolver. The allowlist and
// the address rules apply to a pinned name as to any.
func WithEgressHosts(path string) Option { return func(e *Engine) { e.egressHosts = path } }

// WithEgressCA adds the PEM certificates of a file to the roots the egress
// proxies verify credential routes' hosts against (egress.LoadRoots),
// read by each proxy when it is made: a lab's internal CA.
func WithEgressCA(path string) Option { return func(e *Engine) { e.egressCA = path } }

// WithDetachedCleanup has the work a call leaves after it returns (a
// resumed sandbox's used checkpoint, as large as its memory, to remove)
// done by a process of its own, which Close does not wait for: for a
// caller that exits once the call returns, a CLI command. What such a
// process leaves undone, the sandbox's destroy and the reaper remove.
func WithDetachedCleanup() Option { return func(e *Engine) { e.detached = true } }

// RunscPath is where setup installs airlock's pinned runsc under root.
func RunscPath(root string) string { return filepath.Join(root, "tools", "runsc") }

// New returns an engine over airlock's root directory, made absolute with
// the symlinks of its existing part resolved (realpath.Of), as a runner's
// is: the paths it records and mounts under the root are then the ones
// the kernel reports.
func New(root string, opts ...Option) (*Engine, error) {
	root = realpath.Of(root)
	e := &Engine{root: root, runsc: RunscPath(root), runc: "runc", agent: AgentPath(root), log: slog.New(slog.DiscardHandler)}
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

// runsAsRoot refuses a runtime binary, which airlock runs as root, that a
// user other than root could change (the file, or a directory above it).
func runsAsRoot(bin string) error {
	err := rootonly.Check(bin)
	if re, ok := errors.AsType[*rootonly.Error](err); ok {
		return fmt.Errorf("%w: %s runs every sandbox as root, but %v: %s", errdefs.ErrUnavailable, bin, re, re.Fix())
	}
	if err != nil {
		return fmt.Errorf("%w: checking who can change %s: %v", errdefs.ErrUnavailable, bin, err)
	}
	return nil
}

// Resolve turns the engine name "auto" into the engine airlock uses: oci
// where it is usable (root, and setup's runsc), else docker. Other names
// are returned as they are.
func Resolve(root, name string) string {
	if name != "auto" {
		return name
	}
	if Usable(root) == nil {
		return "oci"
	}
	return "docker"
}

// Check implements engine.Engine.
func (e *Engine) Check(ctx context.Context, s *engine.SandboxSpec) error {
	if err := checkSandboxID(s.ID); err != nil {
		return err
	}
	if err := Usable(e.root); err != nil {
		return err
	}
	if err := runsAsRoot(e.runsc); err != nil {
		return err
	}
	if s.Policy.Isolation == isolation.Seccomp {
		runc, err := exec.LookPath(e.runc)
		if err != nil {
			return fmt.Errorf("%w: seccomp isolation runs runc, which is not installed (%v); run `make setup`", errdefs.ErrUnavailable, err)
		}
		if err := runsAsRoot(runc); err != nil {
			return err
		}
	}
	if !e.store.Has(s.Image) {
		return fmt.Errorf("%w: image %s is not in airlock's store; airlock never pulls, so import it first with `airlock image import PATH` (`airlock image ls` lists what is present)",
			errdefs.ErrNotFound, s.Image)
	}
	if s.Init == nil {
		if _, err := initELF(); err != nil {
			return err
		}
	}
	if s.TmpSource != "" {
		if err := engine.CheckTmpSource(s.TmpSource); err != nil {
			return err
		}
	}
	return nil
}

// prepared is a sandbox's host side before its runtime starts: its image
// tree held, its cgroup with airlock's limits, and a bundle whose root is
// an overlay of its own over the shared tree.
type prepared struct {
	bundle   string
	spec     *specs.Spec
	cg       *cgroup.Group
	native   bool
	hostPids int64
	// imageTree is the image's shared, read-only tree.
	imageTree string
	// release lets go of the image's tree.
	release func()
}

// bootIDFile, in a gVisor sandbox's bundle, holds its boot id
// (isolation.BootIDPath).
const bootIDFile = "boot_id"

// prepare makes what sandbox s needs before its runtime starts, its first
// process running argv, named hostname ("" for the policy's name). It
// returns what it made even on error, for the caller to free.
func (e *Engine) prepare(ctx context.Context, s *engine.SandboxSpec, argv []string, hostname string, extra ...isolation.Bind) (p *prepared, err error) {
	p = &prepared{bundle: e.bundleDir(s.ID), native: s.Policy.Isolation == isolation.Seccomp, release: func() {}}
	l := s.Policy.Limits
	p.hostPids = isolation.GVisorHostPids(l.Pids)
	if p.native {
		p.hostPids = l.Pids
	}
	// Three parts are made side by side: the cgroup, the bundle with its
	// root overlay, and the spec, which needs no more of the other two
	// than their paths. Each goroutine sets fields of p of its own, and
	// prepare returns only once both have ended, whatever the outcome.
	cgMade, rootMade := make(chan error, 1), make(chan error, 1)
	go func() {
		g, err := cgroup.New(s.ID, cgroup.Limits{Memory: int64(l.Memory), MilliCPUs: int64(l.CPUs), Pids: p.hostPids})
		if err != nil {
			err = fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		}
		p.cg = g
		cgMade <- err
	}()
	go func() { rootMade <- e.prepareRoot(ctx, s.Image, p) }()
	rootErr := sync.OnceValue(func() error { return <-rootMade })
	defer func() {
		// The root's failure is the most telling, then the spec's.
		err = cmp.Or(rootErr(), err, <-cgMade)
	}()
	env, workdir, err := e.imageDefaults(s.Image, s.Env, s.Workdir)
	if err != nil {
		return p, err
	}
	rootfs := rootfsOf(p.bundle)
	cgPath := cgroup.PathOf(s.ID)
	if p.native {
		// runc removes the cgroup it runs in: give it a child of airlock's.
		cgPath += "/ctr"
	}
	// Under gVisor the boot id is a file of the sandbox's own, so that
	// sandboxes restored from one snapshot differ there too.
	bootID := ""
	if !p.native {
		bootID = filepath.Join(p.bundle, bootIDFile)
	}
	p.spec, err = isolation.OCISpec(s.Policy, isolation.OCIJob{
		Rootfs:      rootfs,
		Argv:        argv,
		Env:         env,
		Workdir:     workdir,
		Binds:       append(engine.Binds(s.Mounts), extra...),
		TmpSource:   s.TmpSource,
		CgroupsPath: cgPath,
		Network:     e.ociNetwork(s.ID, s.Policy.Egress),
		Hostname:    hostname,
		BootID:      bootID,
		Annotations: map[string]string{"airlock.id": s.ID, "airlock.owner": s.Owner, "airlock.deadline": s.Deadline.UTC().Format(time.RFC3339)},
	})
	if err != nil {
		return p, fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	if p.native {
		// runc sets these limits on its child cgroup; keep them just above
		// airlock's, so that airlock's cgroup, which outlives the run, is
		// the one that trips and counts.
		r := p.spec.Linux.Resources
		raise(r.Memory.Limit, 1<<20)
		raise(r.Memory.Swap, 1<<20)
		raise(r.Pids.Limit, 1)
	}
	b, err := json.Marshal(p.spec)
	if err != nil {
		return p, fmt.Errorf("%w: writing bundle: %v", errdefs.ErrInternal, err)
	}
	// The bundle's tmpfs must be there before the spec is written into it.
	if err := rootErr(); err != nil {
		return p, err
	}
	if bootID != "" {
		if err := os.WriteFile(bootID, isolation.NewBootID(), 0o444); err != nil {
			return p, fmt.Errorf("%w: writing the sandbox's boot id: %v", errdefs.ErrUnavailable, err)
		}
	}
	if err := os.WriteFile(filepath.Join(p.bundle, "config.json"), b, 0o600); err != nil {
		return p, fmt.Errorf("%w: writing bundle: %v", errdefs.ErrUnavailable, err)
	}
	return p, nil
}

// prepareRoot holds image id's tree for p and mounts the bundle, with
// the root overlay over the tree in it.
func (e *Engine) prepareRoot(ctx context.Context, id digest.Digest, p *prepared) error {
	// The sandbox holds its image's tree against `airlock image rm` while
	// it is being made (a one-shot sandbox: for its whole life).
	tree, release, err := e.store.Use(ctx, id)
	if err != nil {
		return fmt.Errorf("%w: unpacking image %s: %v", errdefs.ErrInternal, id, err)
	}
	p.release = release
	// runsc refuses a root path that runs through a symlink.
	if tree, err = filepath.EvalSymlinks(tree); err != nil {
		return fmt.Errorf("%w: unpacking image %s: %v", errdefs.ErrInternal, id, err)
	}
	p.imageTree = tree
	if err := makeBundle(p.bundle); err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	// Both runtimes create mount points, and a missing working directory,
	// in the root they are given: give them an overlay of the sandbox's
	// own, so the shared tree is never written.
	if err := rootOverlay(p.bundle, tree); err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	return nil
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
	if runtime == e.runsc {
		if err := forgetRunsc(dctx, state, name); err != nil {
			log.Warn("runtime delete", "err", err)
		}
	}
}

// forgetRunsc removes what runsc keeps of a container it could not
// delete: killed from outside, or its `runsc run` killed as it began (a
// pool's fill cut short, or airlock killed), after which runsc no longer
// knows the name. Its control socket and its state lock go; so does its
// state file when it does not parse, as a runsc killed while writing it
// leaves it empty, and then lists it for ever and can never delete it. That
// file is removed only under runsc's own lock, so never while a runsc
// writes it. Only for a container nothing runs in. It returns an error
// when a state file that parses is left: runsc's delete of it failed.
func forgetRunsc(ctx context.Context, state, name string) error {
	defer os.Remove(filepath.Join(state, "runsc-"+name+".sock"))
	statePath := filepath.Join(state, name+"_sandbox:"+name+".state")
	lockPath := filepath.Join(state, name+"_sandbox:"+name+".lock")
	if _, err := os.Stat(statePath); errors.Is(err, fs.ErrNotExist) {
		os.Remove(lockPath)
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lk, err := flock.Acquire(lctx, lockPath)
	if err != nil {
		return fmt.Errorf("%w: runsc state of %s is still locked by a runsc: %v", errdefs.ErrUnavailable, name, err)
	}
	defer lk.Release(true)
	b, err := os.ReadFile(statePath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%w: reading runsc state %s: %v", errdefs.ErrInternal, statePath, err)
	case json.Valid(b):
		return fmt.Errorf("%w: runsc could not delete container %s; its state %s is left (see `runsc --root %s delete --force %s`)",
			errdefs.ErrInternal, name, statePath, state, name)
	}
	if err := os.Remove(statePath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: removing runsc's unreadable state %s: %v", errdefs.ErrInternal, statePath, err)
	}
	return nil
}

// imageDefaults takes the image's environment and working directory; the
// caller's values win.
func (e *Engine) imageDefaults(id digest.Digest, jobEnv []string, workdir string) ([]string, string, error) {
	cf, err := e.store.Config(id)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", errdefs.ErrInternal, err)
	}
	env := mergeEnv(cf.Config.Env, jobEnv)
	wd := workdir
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

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// raise adds d to the limit at v, saturating: a checked limit never
// wraps to a negative one.
func raise(v *int64, d int64) { *v += min(d, math.MaxInt64-*v) }

// Close waits for the work calls left to finish after they returned (a
// resumed sandbox's checkpoint being removed). The engine stays usable.
func (e *Engine) Close() { e.bg.Wait() }

// RunsOnStore implements engine.StoreUser: sandboxes run on image trees of
// airlock's store.
func (e *Engine) RunsOnStore() {}

var (
	_ engine.Engine      = (*Engine)(nil)
	_ engine.StoreUser   = (*Engine)(nil)
	_ engine.Pauser      = (*Engine)(nil)
	_ engine.Snapshotter = (*Engine)(nil)
	_ engine.Sandbox     = (*sandbox)(nil)
	_ engine.Server      = (*sandbox)(nil)
	_ engine.Awaiter     = (*sandbox)(nil)
	_ engine.Task        = (*oneShot)(nil)
)

// runscFlags are the flags every runsc run gets, the policy's first; Run
// passes them and receipts record them.
func runscFlags(logs string) []string {
	return append(RunscFlags(), engine.GVisorLogFlags(logs, "run")...)
}

// RunscFlags are the flags the engine gives runsc but its logs: the
// policy's, then this host's (platformFlags). A bench's bare runsc peer
// takes the same.
func RunscFlags() []string {
	return append(isolation.RunscFlags(), platformFlags(runtime.NumCPU())...)
}

// fewCPUs is the most CPUs a host has for the engine to turn off
// systrap's fast path. There the sentry's and the stub's threads spin
// waiting for each other, and take a CPU from the host's own processes
// (the agent's relay, the server, the client waiting for an exec): on a
// 2-CPU host execs and restored first jobs took 15–30% less without it,
// a cold numpy run 10% less (BENCHMARKS.md, "systrap's fast path").
const fewCPUs = 2

// platformFlags are runsc's flags for a host of cpus CPUs; never a
// policy's.
func platformFlags(cpus int) []string {
	if cpus <= fewCPUs {
		return []string{"--systrap-disable-fast-path"}
	}
	return nil
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
