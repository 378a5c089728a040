package docker

// Long-lived sandboxes (engine.Engine). The container's process 1 is
// airlock's helper (sandbox_helper.go), bind-mounted read-only from the
// host: an idle init that runs no user program and lets the kernel reap
// orphans. Every exec runs under the same helper, which makes it a session
// leader and reports its pid, so that a timeout can kill its whole process
// group through a second exec of the helper; dockerd has no API to signal
// an exec. This works alike under runsc and runc, and needs nothing from
// the image.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/gvisor"
	"github.com/airlock-sandbox/airlock/isolation"
)

// LabelTimeout carries a sandbox's default exec timeout, so that a process
// that opens the sandbox later applies the same policy.
const LabelTimeout = "airlock.timeout"

// helperTarget is where the helper appears inside a sandbox.
const helperTarget = "/.airlock-helper"

// leftoverPoll is how often a running exec is asked whether its program
// has exited while its output stays open.
const leftoverPoll = 100 * time.Millisecond

// killWait bounds the helper's kill of a process group and the end of the
// exec's stream after it.
const killWait = 10 * time.Second

// helperBytes is the helper for the host's architecture. helperAMD64
// (sandbox_helper.go) is generated from testdata/sandbox_helper_amd64.S.
//
//go:generate go run github.com/airlock-sandbox/airlock/internal/asm/asmgen -exec -src testdata/sandbox_helper_amd64.S -var helperAMD64 -o sandbox_helper.go
func helperBytes() ([]byte, error) {
	if runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("%w: long-lived sandboxes on the docker engine need airlock's sandbox init, which is built for amd64 only; this host is %s: use `airlock run`",
			errdefs.ErrNotImplemented, runtime.GOARCH)
	}
	return helperAMD64, nil
}

// helperDir is the host directory the helper is written into: private to
// the user airlock runs as.
func helperDir() (string, error) {
	if os.Geteuid() == 0 {
		return "/run/airlock", nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "airlock"), nil
}

// installHelper writes the helper into helperDir under its content's hash,
// or checks the copy already there, and returns its path. Anything else at
// that path (a link, another owner, other bytes, a writable mode) is
// replaced.
func installHelper(dir string) (string, error) {
	b, err := helperBytes()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("%w: creating %s for the sandbox init: %v", errdefs.ErrUnavailable, dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || st == nil || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("%w: %s must be a directory owned by uid %d and writable by it alone; remove it and retry",
			errdefs.ErrUnavailable, dir, os.Geteuid())
	}
	sum := sha256.Sum256(b)
	path := filepath.Join(dir, "sandbox-init-"+hex.EncodeToString(sum[:8]))
	if helperIntact(path, b) {
		return path, nil
	}
	f, err := os.CreateTemp(dir, ".sandbox-init-*")
	if err != nil {
		return "", fmt.Errorf("%w: writing the sandbox init: %v", errdefs.ErrUnavailable, err)
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(b)
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(f.Name(), 0o555), os.Rename(f.Name(), path)); err != nil {
		return "", fmt.Errorf("%w: writing the sandbox init: %v", errdefs.ErrUnavailable, err)
	}
	return path, nil
}

// helperIntact reports whether path is a regular file of ours, mode 0555,
// holding exactly b.
func helperIntact(path string, b []byte) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o555 || fi.Size() != int64(len(b)) {
		return false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return false
	}
	got := make([]byte, len(b)+1)
	n, _ := io.ReadFull(f, got)
	return n == len(b) && bytes.Equal(got[:n], b)
}

// Create implements engine.Engine.
func (e *Engine) Create(ctx context.Context, s *engine.SandboxSpec) (sb engine.Sandbox, err error) {
	if err := engine.CheckKind(s, false); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, ok := isolation.DockerRuntimes[s.Policy.Isolation]; !ok {
		return nil, fmt.Errorf("%w: isolation %q is not available on the docker engine yet; use --isolation %s",
			errdefs.ErrInvalidArgument, s.Policy.Isolation, isolation.GVisor)
	}
	if s.TmpSource != "" {
		if err := engine.CheckTmpSource(s.TmpSource); err != nil {
			return nil, err
		}
	}
	dir, err := helperDir()
	if err != nil {
		return nil, fmt.Errorf("%w: finding a directory for the sandbox init: %v", errdefs.ErrUnavailable, err)
	}
	helper, err := installHelper(dir)
	if err != nil {
		return nil, err
	}
	facts, err := e.facts(ctx)
	if err != nil {
		return nil, err
	}
	if err := facts.limits(e.cli.DaemonHost()); err != nil {
		return nil, err
	}
	// Every step below undoes itself if a later one fails.
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	bg := context.WithoutCancel(ctx)
	var cg *cgroup.Group
	if facts.cgroupfs && os.Geteuid() == 0 {
		l := s.Policy.Limits
		cg, err = cgroup.New(s.ID, cgroup.Limits{Memory: int64(l.Memory), MilliCPUs: int64(l.CPUs), Pids: hostPids(s.Policy)})
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		}
		undo = append(undo, func() {
			dctx, cancel := context.WithTimeout(bg, cleanupTimeout)
			defer cancel()
			if err := cg.Delete(dctx); err != nil {
				e.log.Warn("deleting cgroup", "sandbox_id", s.ID, "err", err)
			}
		})
	}
	labels := e.labels(s)
	labels[LabelTimeout] = s.Policy.Limits.Timeout.String()
	djob := isolation.DockerJob{
		Image:     s.Image.String(),
		Argv:      []string{helperTarget},
		Env:       s.Env,
		Labels:    labels,
		Binds:     append(engine.Binds(s.Mounts), isolation.Bind{Source: helper, Target: helperTarget, ReadOnly: true}),
		Workdir:   s.Workdir,
		TmpSource: s.TmpSource,
	}
	djob.Runtime, _ = e.runtimeName(s.Policy.Isolation)
	if cg != nil {
		djob.CgroupParent = cg.Path()
	}
	cfg, host, netcfg, err := isolation.DockerConfig(s.Policy, djob)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	if !unprivileged(cfg.User) {
		return nil, fmt.Errorf("%w: a sandbox's user must be a uid:gid other than root's, not %q", errdefs.ErrInvalidArgument, cfg.User)
	}
	// Nothing attaches to the init.
	cfg.AttachStdout, cfg.AttachStderr = false, false
	log := e.log.With("sandbox_id", s.ID, "image_digest", s.Image.String(), "runtime", host.Runtime)

	name := containerName(s.ID)
	remove := func(ref string) {
		rctx, cancel := context.WithTimeout(bg, cleanupTimeout)
		defer cancel()
		if err := e.removeContainer(rctx, ref); err != nil && !errdefs.IsNotFound(err) {
			log.Warn("removing sandbox", "container", ref, "err", err)
		}
	}
	cctx, cancel := context.WithTimeout(bg, e.setupTimeout)
	created, err := e.cli.ContainerCreate(cctx, cfg, host, netcfg, nil, name)
	cancel()
	if err != nil {
		if errors.Is(cctx.Err(), context.DeadlineExceeded) {
			remove(name) // dockerd may create it yet
			return nil, e.tooSlow("creating sandbox")
		}
		return nil, classify("creating sandbox", e.cli.DaemonHost(), err)
	}
	cid := created.ID
	undo = append(undo, func() { remove(cid) })
	if err := createWarnings(created.Warnings); err != nil {
		return nil, err
	}
	if s.Policy.Isolation == isolation.GVisor {
		if dir := facts.sandboxLogDir(cid); dir != "" {
			undo = append(undo, func() { os.RemoveAll(dir) })
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(bg, e.setupTimeout)
	err = e.cli.ContainerStart(sctx, cid, container.StartOptions{})
	cancel()
	if err != nil {
		if errors.Is(sctx.Err(), context.DeadlineExceeded) {
			return nil, e.tooSlow("starting sandbox")
		}
		return nil, classify("starting sandbox", e.cli.DaemonHost(), err)
	}
	sb = &sandbox{e: e, id: s.ID, cid: cid, user: cfg.User, timeout: s.Policy.Limits.Timeout, gvisor: s.Policy.Isolation == isolation.GVisor,
		oomEvents: oomEventsFile(host.CgroupParent, cid)}
	if err := sb.(*sandbox).watch(bg); err != nil {
		return nil, err
	}
	log.Debug("sandbox created", "container", cid)
	return sb, nil
}

// watch opens a pidfd on the container's process, or shares the engine's
// (procWatches). The container must run before and after, with the same
// pid, so the pidfd is not a reused pid's.
func (s *sandbox) watch(ctx context.Context) error {
	before, err := s.inspect(ctx)
	if err != nil {
		return s.check(ctx, "inspecting sandbox", err)
	}
	if !before.Running || before.Pid <= 0 {
		return s.lost(before)
	}
	if w := s.e.procs.get(s.cid, before.Pid); w != nil {
		s.pid, s.proc = before.Pid, w
		return nil
	}
	w, werr := s.e.procs.open(s.cid, before.Pid)
	after, err := s.inspect(ctx)
	switch {
	case err != nil:
		w.close()
		return s.check(ctx, "inspecting sandbox", err)
	case !after.Running || after.Pid != before.Pid || after.StartedAt != before.StartedAt:
		w.close()
		return s.lost(after)
	case errors.Is(werr, errProcessGone):
		// dockerd has not learnt of it yet.
		return engine.Lost("sandbox %q ended from outside airlock: its runtime process %d is gone (killed, or dockerd stopped it); destroy it with `airlock sandbox rm %s`", s.id, before.Pid, s.id)
	case werr != nil:
		return fmt.Errorf("%w: watching the process %d of sandbox %q: %v; the docker engine must run on dockerd's host, in its pid namespace", errdefs.ErrUnavailable, before.Pid, s.id, werr)
	}
	s.pid, s.proc = before.Pid, s.e.procs.keep(s.cid, w)
	return nil
}

// Open implements engine.Engine: it finds the sandbox's container of
// this root by its id label and its name.
func (e *Engine) Open(ctx context.Context, id string) (engine.Sandbox, error) {
	lctx, cancel := context.WithTimeout(ctx, e.setupTimeout)
	defer cancel()
	list, err := e.containersOf(lctx, id)
	if err != nil {
		return nil, classify("finding sandbox", e.cli.DaemonHost(), err)
	}
	if len(list) == 0 {
		return nil, notFound(id)
	}
	if len(list) > 1 {
		return nil, fmt.Errorf("%w: %d containers carry sandbox id %q; remove them with `airlock reap`", errdefs.ErrInternal, len(list), id)
	}
	c, err := e.cli.ContainerInspect(lctx, list[0].ID)
	if errdefs.IsNotFound(err) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, classify("inspecting sandbox", e.cli.DaemonHost(), err)
	}
	if c.Config == nil || c.HostConfig == nil || c.State == nil || c.Config.Labels[LabelTimeout] == "" || !unprivileged(c.Config.User) {
		return nil, fmt.Errorf("%w: container %s of %q is not a long-lived sandbox", errdefs.ErrNotFound, c.ID, id)
	}
	timeout, err := time.ParseDuration(c.Config.Labels[LabelTimeout])
	if err != nil || timeout <= 0 {
		return nil, fmt.Errorf("%w: sandbox %q has a bad %s label %q", errdefs.ErrInternal, id, LabelTimeout, c.Config.Labels[LabelTimeout])
	}
	s := &sandbox{e: e, id: id, cid: c.ID, user: c.Config.User, timeout: timeout,
		gvisor:    c.HostConfig.Runtime == e.gvisor,
		oomEvents: oomEventsFile(c.HostConfig.CgroupParent, c.ID)}
	if !c.State.Running {
		return nil, s.lost(c.State)
	}
	if err := s.watch(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// unprivileged reports whether user is a "uid:gid" of a uid other than
// root's, as the policy sets: an exec must never fall back to the image's
// user.
func unprivileged(user string) bool {
	uid, gid, ok := strings.Cut(user, ":")
	u, uerr := strconv.ParseUint(uid, 10, 32)
	_, gerr := strconv.ParseUint(gid, 10, 32)
	return ok && uerr == nil && gerr == nil && u != 0
}

func notFound(id string) error {
	return fmt.Errorf("%w: no sandbox %q: it was destroyed or never existed (`airlock sandbox ls` lists the live ones)", errdefs.ErrNotFound, id)
}

// sandbox is one live container.
type sandbox struct {
	e       *Engine
	id, cid string
	user    string // the policy's uid:gid, for every exec
	timeout time.Duration
	gvisor  bool
	// pid and proc are the container's process and a pidfd on it, shared
	// with the engine's other handles of the sandbox.
	pid  int
	proc *pidWatch
	// oomEvents is the file counting the container cgroup's OOM kills, or
	// "" where dockerd places the container's cgroup itself.
	oomEvents string

	mu        sync.Mutex
	destroyed bool
	// logs are the gVisor sandbox's log files, once found (cutLog).
	logs []string
}

func (s *sandbox) ID() string { return s.id }

func (s *sandbox) gone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.destroyed
}

// lost is the error for a container that ended without airlock asking.
func (s *sandbox) lost(st *container.State) error {
	how := "it is no longer running"
	if st != nil {
		how = fmt.Sprintf("its container is %s (exit %d)", st.Status, st.ExitCode)
		if st.OOMKilled {
			how += ", killed by the OOM killer"
		}
	}
	return engine.Lost("sandbox %q ended from outside airlock: %s (`docker kill`, dockerd restarting, or its runtime process killed); destroy it with `airlock sandbox rm %s`", s.id, how, s.id)
}

// ended returns an ErrSandboxLost error once the container's process has
// exited.
func (s *sandbox) ended() error {
	if !s.proc.exited() {
		return nil
	}
	if s.gone() {
		return notFound(s.id)
	}
	return engine.Lost("sandbox %q ended from outside airlock: its runtime process %d exited (killed, or dockerd stopped it); destroy it with `airlock sandbox rm %s`", s.id, s.pid, s.id)
}

// check classifies a failed call on the container: destroyed by airlock,
// removed or stopped from outside, or dockerd unreachable.
func (s *sandbox) check(ctx context.Context, what string, err error) error {
	if s.gone() {
		return notFound(s.id)
	}
	if err := s.ended(); err != nil {
		return err
	}
	st, ierr := s.inspect(ctx)
	switch {
	case errdefs.IsNotFound(ierr):
		return engine.Lost("sandbox %q was removed from outside airlock", s.id)
	case ierr != nil:
		return classify(what, s.e.cli.DaemonHost(), err)
	case !st.Running:
		return s.lost(st)
	}
	return classify(what, s.e.cli.DaemonHost(), err)
}

func (s *sandbox) inspect(ctx context.Context) (*container.State, error) {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.e.setupTimeout)
	defer cancel()
	c, err := s.e.cli.ContainerInspect(ictx, s.cid)
	if err != nil {
		return nil, err
	}
	if c.State == nil {
		return nil, fmt.Errorf("%w: dockerd reported no state for sandbox %q", errdefs.ErrInternal, s.id)
	}
	return c.State, nil
}

// Exec implements engine.Sandbox.
func (s *sandbox) Exec(ctx context.Context, p *engine.Process) (engine.Exit, error) {
	if s.gone() {
		return engine.Exit{}, notFound(s.id)
	}
	if err := s.ended(); err != nil {
		return engine.Exit{}, err
	}
	if !unprivileged(s.user) {
		return engine.Exit{}, fmt.Errorf("%w: sandbox %q has user %q; airlock runs nothing as root or as the image's user", errdefs.ErrInvalidArgument, s.id, s.user)
	}
	if ctx.Err() != nil {
		return engine.Exit{Killed: true, Code: -1}, nil
	}
	if len(p.Argv) == 0 || p.Argv[0] == "" {
		return engine.Exit{}, fmt.Errorf("%w: no command given", errdefs.ErrInvalidArgument)
	}
	if p.Workdir != "" && (!path.IsAbs(p.Workdir) || path.Clean(p.Workdir) != p.Workdir) {
		return engine.Exit{}, fmt.Errorf("%w: working directory %q must be an absolute, clean path", errdefs.ErrInvalidArgument, p.Workdir)
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = s.timeout
	}
	exit, err := s.exec(ctx, p, timeout)
	if errors.Is(err, errNotStarted) && p.Stdin == nil && !p.Detach && ctx.Err() == nil {
		// runsc under load now and then fails an exec before its program
		// starts ("OCI runtime exec failed"). Nothing ran, nothing was
		// read for it and nothing of it reached the caller's writers, so
		// it is tried once more. With stdin it is not: the first attempt
		// may have read some.
		time.Sleep(retryPause)
		exit, err = s.exec(ctx, p, timeout)
	}
	s.cutLog(ctx)
	return exit, err
}

// maxSandboxLog bounds a live gVisor sandbox's log. The sandbox logs the
// argv of every exec, up to a few MiB each, which would grow the log
// without bound while the sandbox lives.
const maxSandboxLog = 16 << 20

// cutLog cuts the sandbox's gVisor log once it is past the engine's bound
// (engine.CutGVisorLog): one stat per exec once the log is found. An exec
// never fails for it.
func (s *sandbox) cutLog(ctx context.Context) {
	if !s.gvisor || s.gone() || s.proc.exited() {
		return
	}
	s.mu.Lock()
	logs := s.logs
	s.mu.Unlock()
	if len(logs) == 0 {
		f, err := s.e.facts(ctx)
		dir := f.sandboxLogDir(s.cid)
		if err != nil || dir == "" {
			return
		}
		// Not there (yet), or not readable by this user: nothing to cut.
		logs, _ = filepath.Glob(filepath.Join(dir, "*.boot.txt"))
		s.mu.Lock()
		s.logs = logs
		s.mu.Unlock()
	}
	for _, l := range logs {
		n, err := engine.CutGVisorLog(l, s.e.maxSandboxLog)
		if err != nil {
			s.mu.Lock()
			s.logs = nil // found again next time
			s.mu.Unlock()
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Destroyed meanwhile.
		case err != nil:
			s.e.log.Warn("cutting the sandbox log", "sandbox_id", s.id, "path", l, "err", err)
		case n > 0:
			s.e.log.Debug("cut the sandbox log", "sandbox_id", s.id, "path", l, "bytes", n)
		}
	}
}

// errNotStarted is wrapped when the runtime did not start an exec's
// program: no pid, and dockerd's error held back from the caller.
var errNotStarted = errors.New("the runtime did not start the program")

// retryPause is the wait before an exec the runtime did not start is
// tried again.
var retryPause = 100 * time.Millisecond

// exec runs p once in the sandbox.
func (s *sandbox) exec(ctx context.Context, p *engine.Process, timeout time.Duration) (engine.Exit, error) {
	bg := context.WithoutCancel(ctx)
	opts := container.ExecOptions{
		User:         s.user,
		Privileged:   false,
		Env:          p.Env,
		WorkingDir:   p.Workdir,
		Cmd:          append([]string{helperTarget, "x"}, p.Argv...),
		AttachStdin:  p.Stdin != nil && !p.Detach,
		AttachStdout: !p.Detach,
		AttachStderr: !p.Detach,
	}
	cctx, cancel := context.WithTimeout(bg, s.e.setupTimeout)
	created, err := s.e.cli.ContainerExecCreate(cctx, s.cid, opts)
	cancel()
	if err != nil {
		return engine.Exit{}, s.check(bg, "creating exec", err)
	}
	oomBefore := oomKills(s.oomEvents)
	started := time.Now()
	if p.Detach {
		sctx, cancel := context.WithTimeout(bg, s.e.setupTimeout)
		err := s.e.cli.ContainerExecStart(sctx, created.ID, container.ExecStartOptions{Detach: true})
		cancel()
		if err != nil {
			return engine.Exit{}, s.check(bg, "starting exec", err)
		}
		if err := s.ended(); err != nil {
			return engine.Exit{}, err
		}
		return engine.Exit{Started: started, Finished: started}, nil
	}
	type attachment struct {
		r   types.HijackedResponse
		err error
	}
	a, ok := within(s.e.setupTimeout, func() attachment {
		r, err := s.e.cli.ContainerExecAttach(bg, created.ID, container.ExecAttachOptions{})
		return attachment{r, err}
	}, func(a attachment) {
		if a.err == nil {
			a.r.Close()
		}
	})
	if !ok {
		return engine.Exit{}, s.e.tooSlow("starting exec")
	}
	if a.err != nil {
		return engine.Exit{}, s.check(bg, "starting exec", a.err)
	}
	att := a.r
	defer att.Close()
	stdout := &startGate{w: orDiscard(p.Stdout)}
	stderr := &pidReader{w: p.Stderr, got: make(chan int32, 1), started: stdout.open}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, att.Reader)
		copied <- err
	}()
	if p.Stdin != nil {
		go func() {
			io.Copy(att.Conn, p.Stdin)
			att.CloseWrite()
		}()
	} else {
		att.CloseWrite()
	}

	var exit engine.Exit
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	// Once the program has exited, what it left in its group (holding the
	// output open) is killed, as the end of `airlock run` would; a process
	// meant to stay is started with Detach.
	poll := time.NewTicker(leftoverPoll)
	defer poll.Stop()
	var streamErr error
	leftover, streamDone := false, false
wait:
	for {
		select {
		case streamErr = <-copied:
			streamDone = true
			break wait
		case <-s.proc.ended():
			// The sandbox died under the exec: its stream may never end.
			return engine.Exit{}, s.ended()
		case <-timer.C:
			exit.TimedOut = true
			break wait
		case <-ctx.Done():
			exit.Killed = true
			break wait
		case <-poll.C:
			ictx, cancel := context.WithTimeout(bg, s.e.setupTimeout)
			ins, err := s.e.cli.ContainerExecInspect(ictx, created.ID)
			cancel()
			if err == nil && !ins.Running {
				// Never started: dockerd's error is on its way, then the
				// stream's end.
				leftover = ins.Pid != 0
				break wait
			}
		}
	}
	if (exit.TimedOut || exit.Killed || leftover) && !s.neverStarted(bg, created.ID) {
		if !s.gvisor {
			ictx, cancel := context.WithTimeout(bg, s.e.setupTimeout)
			ins, err := s.e.cli.ContainerExecInspect(ictx, created.ID)
			cancel()
			if err == nil && ins.Running && ins.Pid > 0 {
				killTree(ins.Pid, s.cid)
			}
		}
		pid, err := s.execPid(stderr.got)
		if err == nil && s.gvisor {
			// Before the group goes: a child that called setsid is found
			// by its parent, which the group kill takes.
			s.killGVisorTree(bg, pid)
		}
		if err == nil {
			err = s.killGroup(bg, pid)
		}
		if err != nil {
			if errors.Is(err, engine.ErrSandboxLost) || errdefs.IsNotFound(err) {
				return engine.Exit{}, err
			}
			// A timeout that cannot be enforced ends the sandbox: its
			// processes must not outlive the exec.
			kctx, cancel := context.WithTimeout(bg, cleanupTimeout)
			kerr := s.e.cli.ContainerKill(kctx, s.cid, "KILL")
			cancel()
			return engine.Exit{}, fmt.Errorf("%w; so airlock killed the whole sandbox (%v), and it must be destroyed", err, kerr)
		}
	}
	if !streamDone {
		select {
		case streamErr = <-copied:
		case <-time.After(killWait):
			att.Close()
			<-copied
			return engine.Exit{}, fmt.Errorf("%w: the output of a killed exec in sandbox %q did not end within %v", errdefs.ErrInternal, s.id, killWait)
		}
	}
	exit.Started, exit.Finished = started, time.Now()
	ins, err := s.execEnd(bg, created.ID)
	if err != nil {
		return engine.Exit{}, s.check(bg, "inspecting exec", err)
	}
	if ins.Pid == 0 {
		// dockerd records no pid for an exec the runtime did not start,
		// sets exit code 126, and writes its error where the program's
		// stdout would be (the gate held it back): the runtime failed,
		// not the program, which never ran.
		if err := s.alive(bg); err != nil {
			return engine.Exit{}, err
		}
		return engine.Exit{}, fmt.Errorf("%w: %w (%q in sandbox %q): %q; try again", errdefs.ErrUnavailable, errNotStarted, p.Argv[0], s.id, stdout.heldText())
	}
	if err := stdout.open(); err != nil && streamErr == nil {
		streamErr = err
	}
	exit.Code = ins.ExitCode
	if err := s.ended(); err != nil {
		return engine.Exit{}, err
	}
	// The kernel's OOM kill is a SIGKILL like any other; the container's
	// cgroup counts it (under runc; runsc's sentry kills in its own way).
	exit.OOMKilled = exit.Code == 128+int(syscall.SIGKILL) && s.oomEvents != "" && oomKills(s.oomEvents) > oomBefore
	if streamErr != nil || ins.ExitCode < 0 || (ins.ExitCode >= 128 && !exit.TimedOut && !exit.Killed) {
		// A kill from outside ends the exec by a signal too: only the
		// container's state tells it from the program's own.
		if err := s.alive(bg); err != nil {
			return engine.Exit{}, err
		}
	}
	if streamErr != nil && !errors.Is(streamErr, io.EOF) {
		return engine.Exit{}, classify("reading exec output", s.e.cli.DaemonHost(), streamErr)
	}
	return exit, nil
}

// oomEventsFile is the file that counts OOM kills in container cid's own
// cgroup, under the cgroup parent airlock made (cgroupfs driver), or "".
func oomEventsFile(parent, cid string) string {
	if parent == "" || !path.IsAbs(parent) {
		return ""
	}
	if cgroup.Unified() {
		return filepath.Join("/sys/fs/cgroup", parent, cid, "memory.events")
	}
	return filepath.Join("/sys/fs/cgroup/memory", parent, cid, "memory.oom_control")
}

// oomKills reads the "oom_kill N" line of a memory.events or
// memory.oom_control file; 0 when there is none.
func oomKills(file string) uint64 {
	if file == "" {
		return 0
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// alive returns an ErrSandboxLost error if the container stopped; dockerd
// may learn of a container's end a moment after that of its exec.
// It asks three times, 50 ms apart, watching the container's process
// meanwhile.
func (s *sandbox) alive(ctx context.Context) error {
	for i := 0; ; i++ {
		st, err := s.inspect(ctx)
		if errdefs.IsNotFound(err) {
			if s.gone() {
				return notFound(s.id)
			}
			return engine.Lost("sandbox %q was removed from outside airlock", s.id)
		}
		if err != nil {
			return engine.Lost("dockerd did not answer after an exec in sandbox %q ended abnormally (%v): it stopped or restarted", s.id, err)
		}
		if !st.Running {
			return s.lost(st)
		}
		if i == 2 {
			return nil
		}
		select {
		case <-s.proc.ended():
			return s.ended()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// execEnd waits for dockerd to record the exec's end: its stream can close
// a moment before.
func (s *sandbox) execEnd(ctx context.Context, execID string) (container.ExecInspect, error) {
	deadline := time.Now().Add(killWait)
	for {
		ictx, cancel := context.WithTimeout(ctx, s.e.setupTimeout)
		ins, err := s.e.cli.ContainerExecInspect(ictx, execID)
		cancel()
		if err != nil || !ins.Running {
			return ins, err
		}
		if time.Now().After(deadline) {
			return ins, fmt.Errorf("%w: dockerd still reports exec %s as running %v after its output ended", errdefs.ErrInternal, execID, killWait)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// execPid is the pid the exec's helper reports on got.
func (s *sandbox) execPid(got <-chan int32) (int32, error) {
	select {
	case pid := <-got:
		return pid, nil
	case <-time.After(killWait):
		return 0, fmt.Errorf("%w: the exec in sandbox %q never reported its pid, so airlock cannot kill it; destroy the sandbox", errdefs.ErrInternal, s.id)
	}
}

// runscStates is where dockerd's shims keep runsc's state.
const runscStates = "/run/docker/runtime-*/moby"

// removeContainer force-removes container ref with its anonymous
// volumes; once it is gone, runsc's lock for it goes too.
func (e *Engine) removeContainer(ctx context.Context, ref string) error {
	err := e.cli.ContainerRemove(ctx, ref, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err == nil || errdefs.IsNotFound(err) {
		forgetRunscLock(ref)
	}
	return err
}

// forgetRunscLock removes the lock file runsc leaves in dockerd's shim
// state for container cid when its sandbox was killed rather than
// deleted. Call it once the container is removed; a lock whose state file
// is still there is runsc's to remove.
func forgetRunscLock(cid string) {
	if cid == "" || strings.ContainsAny(cid, "/*?[") {
		return
	}
	dirs, _ := filepath.Glob(runscStates)
	for _, d := range dirs {
		base := filepath.Join(d, cid+"_sandbox:"+cid)
		if _, err := os.Lstat(base + ".state"); errors.Is(err, fs.ErrNotExist) {
			os.Remove(base + ".lock")
		}
	}
}

// killGVisorTree SIGKILLs what is below the exec's process or in its
// group, through the sandbox's control socket, as the oci engine does:
// dockerd shows none of a gVisor sandbox's processes. Where runsc's state
// is not found, the helper's group kill alone is done.
func (s *sandbox) killGVisorTree(ctx context.Context, pid int32) {
	states, _ := filepath.Glob(runscStates)
	for _, st := range states {
		if c, err := gvisor.Find(ctx, st, s.cid); err == nil {
			c.KillTree(ctx, int(pid))
			return
		}
	}
	s.e.log.Debug("no runsc control socket for the container; killing the exec's process group only", "sandbox_id", s.id)
}

// killGroup SIGKILLs the process group of the exec pid, through the
// helper in a second exec.
func (s *sandbox) killGroup(ctx context.Context, pid int32) error {
	var in [4]byte
	binary.NativeEndian.PutUint32(in[:], uint32(pid))
	kctx, cancel := context.WithTimeout(ctx, killWait)
	defer cancel()
	created, err := s.e.cli.ContainerExecCreate(kctx, s.cid, container.ExecOptions{
		User: s.user, Cmd: []string{helperTarget, "k"}, AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return s.check(ctx, "killing exec", err)
	}
	att, err := s.e.cli.ContainerExecAttach(kctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return s.check(ctx, "killing exec", err)
	}
	defer att.Close()
	if _, err := att.Conn.Write(in[:]); err != nil {
		return s.check(ctx, "killing exec", err)
	}
	att.CloseWrite()
	io.Copy(io.Discard, att.Reader)
	ins, err := s.execEnd(kctx, created.ID)
	if err != nil {
		return s.check(ctx, "killing exec", err)
	}
	if ins.ExitCode != 0 {
		if err := s.alive(ctx); err != nil {
			return err
		}
		return fmt.Errorf("%w: killing the timed-out process group %d in sandbox %q failed (helper exit %d); destroy the sandbox", errdefs.ErrInternal, pid, s.id, ins.ExitCode)
	}
	return nil
}

// neverStarted reports whether dockerd says exec execID ended without a
// pid: the runtime did not start it.
func (s *sandbox) neverStarted(ctx context.Context, execID string) bool {
	ictx, cancel := context.WithTimeout(ctx, s.e.setupTimeout)
	defer cancel()
	ins, err := s.e.cli.ContainerExecInspect(ictx, execID)
	return err == nil && !ins.Running && ins.Pid == 0
}

// pidReader passes stderr on, less the 4 bytes of pid the helper writes
// first; started, if set, is called once they have come.
type pidReader struct {
	w       io.Writer
	got     chan int32
	head    []byte
	started func() error
}

func (r *pidReader) Write(b []byte) (int, error) {
	n := len(b)
	if len(r.head) < 4 {
		k := min(4-len(r.head), len(b))
		r.head = append(r.head, b[:k]...)
		b = b[k:]
		if len(r.head) == 4 {
			r.got <- int32(binary.NativeEndian.Uint32(r.head))
			if r.started != nil {
				if err := r.started(); err != nil {
					return 0, err
				}
			}
		}
	}
	if len(b) > 0 && r.w != nil {
		if _, err := r.w.Write(b); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// startGate holds an exec's stdout back until the helper has said it
// runs (its pid, on stderr): until then, what comes on stdout is
// dockerd's error for an exec the runtime did not start, or the start of
// the program's output that overtook the pid on the other stream. More
// than maxGated bytes is the program's: the gate opens.
type startGate struct {
	w      io.Writer
	held   []byte
	opened bool
}

const maxGated = 16 << 10

func (g *startGate) Write(b []byte) (int, error) {
	if !g.opened {
		if len(g.held)+len(b) <= maxGated {
			g.held = append(g.held, b...)
			return len(b), nil
		}
		if err := g.open(); err != nil {
			return 0, err
		}
	}
	return g.w.Write(b)
}

// open passes on what was held, and everything after.
func (g *startGate) open() error {
	if g.opened {
		return nil
	}
	g.opened = true
	b := g.held
	g.held = nil
	if len(b) == 0 {
		return nil
	}
	_, err := g.w.Write(b)
	return err
}

// heldText is what the gate held, for an error message.
func (g *startGate) heldText() string { return strings.TrimSpace(string(g.held)) }

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// Destroy implements engine.Sandbox: the container with its volumes, its
// sandbox log and its cgroup. Concurrent Destroys, from any process, all
// succeed once everything is gone.
func (s *sandbox) Destroy(ctx context.Context) error {
	s.mu.Lock()
	s.destroyed = true
	s.mu.Unlock()
	defer s.e.procs.release(s.cid)
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var errs []error
	for {
		err := s.e.removeContainer(bg, s.cid)
		if err == nil || errdefs.IsNotFound(err) {
			break
		}
		// Another Destroy is removing it: wait for it to be gone.
		if !errdefs.IsConflict(err) || bg.Err() != nil {
			errs = append(errs, classify("removing sandbox", s.e.cli.DaemonHost(), err))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s.gvisor {
		if f, err := s.e.facts(bg); err == nil {
			if dir := f.sandboxLogDir(s.cid); dir != "" {
				os.RemoveAll(dir)
			}
		}
	}
	if err := cgroup.Remove(bg, s.id); err != nil {
		errs = append(errs, fmt.Errorf("removing the cgroup of sandbox %q: %w", s.id, err))
	}
	return errors.Join(errs...)
}

var (
	_ engine.Engine  = (*Engine)(nil)
	_ engine.Sandbox = (*sandbox)(nil)
	_ engine.Task    = (*oneShot)(nil)
)
