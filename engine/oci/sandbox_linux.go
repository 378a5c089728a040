package oci

// Long-lived sandboxes: the container's process is airlock's idle init,
// programs enter it with `runsc exec` / `runc exec`, and everything needed
// to reconnect lives in the bundle (sandbox.json, config.json) and the
// runtime's root, so that any airlock process can Open it by id.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/flock"
	"github.com/airlock-sandbox/airlock/internal/gvisor"
	"github.com/airlock-sandbox/airlock/internal/proc"
	"github.com/airlock-sandbox/airlock/internal/proctree"
	"github.com/airlock-sandbox/airlock/isolation"
)

// stateFile, in the bundle, is what Open needs besides config.json. It is
// written last by Create and removed first by Destroy: its presence is
// what makes a sandbox exist.
const stateFile = "sandbox.json"

// sandboxState is the sandbox as Open finds it.
type sandboxState struct {
	ID    string         `json:"id"`
	Image digest.Digest  `json:"image"`
	Mode  isolation.Mode `json:"isolation"`
	// Pid and Start (its start time in clock ticks since boot) name the
	// runtime's sandbox process (runsc's sandbox, runc's init) so that its
	// death is told apart from pid reuse.
	Pid   int    `json:"pid"`
	Start uint64 `json:"start"`
	// Timeout is the policy's, for processes that give none.
	Timeout time.Duration `json:"timeout"`
	// Control is a gVisor sandbox's control socket, where execs start
	// without a runsc process; empty where the runtime's exec is used.
	Control string `json:"control,omitempty"`
	// Agent says the exec agent is bound in the sandbox (agent_linux.go).
	Agent bool `json:"agent,omitempty"`
	// Egress is the policy's egress, which the supervisor's proxy serves
	// (egress_linux.go); nil without.
	Egress *egressState `json:"egress,omitempty"`
	// Paused says the sandbox is checkpointed (pause_linux.go): no
	// process of it runs, and Pid, Start and Control are empty.
	Paused bool `json:"paused,omitempty"`
	// Resumed is the mark of the checkpoint the sandbox was last resumed
	// from (pause_linux.go): while that checkpoint is still there, a
	// resume cut short as it removed it, the sandbox runs as resumed.
	Resumed string `json:"resumed,omitempty"`
	// Policy is policyDigest of the sandbox's policy, which a snapshot of
	// it records (snapshot_linux.go).
	Policy string `json:"policy_sha256,omitempty"`
	// Snapshot names the snapshot the sandbox was restored from; empty
	// for one that booted.
	Snapshot string `json:"snapshot,omitempty"`
	// BootID says the sandbox's boot id is a file of its own, bound over
	// the sentry's (isolation.BootIDPath), which a snapshot of it records.
	BootID bool `json:"boot_id,omitempty"`
}

var sandboxIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

func checkSandboxID(id string) error {
	if !sandboxIDPattern.MatchString(id) {
		return fmt.Errorf("%w: sandbox id %q must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", errdefs.ErrInvalidArgument, id)
	}
	return nil
}

func (e *Engine) bundleDir(id string) string { return filepath.Join(e.root, "oci", "bundles", id) }

func (e *Engine) lockPath(id string) string { return filepath.Join(e.root, "oci", "locks", id+".lock") }

// lock serialises Create and Destroy of one id across processes.
func (e *Engine) lock(ctx context.Context, id string) (*flock.Lock, error) {
	if err := os.MkdirAll(filepath.Dir(e.lockPath(id)), 0o700); err != nil {
		return nil, fmt.Errorf("%w: creating the lock directory: %v", errdefs.ErrUnavailable, err)
	}
	l, err := flock.Acquire(ctx, e.lockPath(id))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	return l, nil
}

// runtimeFor returns the runtime binary, its state root and its global
// flags for a mode.
func (e *Engine) runtimeFor(m isolation.Mode, bundle string) (bin, state string, args []string) {
	if m == isolation.Seccomp {
		state = e.runcState()
		return e.runc, state, []string{"--root", state}
	}
	state = e.runscState()
	// Only runsc run's log is kept, for its errors: the sandbox's own
	// (boot) grows by about 6 KiB per exec, for as long as the sandbox
	// lives, and loss is told by its process, not its log.
	flags := runscFlags(filepath.Join(bundle, "logs"))
	return e.runsc, state, append([]string{"--root", state}, flags...)
}

// Create implements engine.Engine.
func (e *Engine) Create(ctx context.Context, s *engine.SandboxSpec) (engine.Sandbox, error) {
	return e.create(ctx, s, "")
}

// create makes long-lived sandbox s: booted, or, with snap, restored from
// that snapshot (snapshot_linux.go), which must fit s.
func (e *Engine) create(ctx context.Context, s *engine.SandboxSpec, snap string) (_ engine.Sandbox, err error) {
	if err := engine.CheckKind(s, false); err != nil {
		return nil, err
	}
	if err := e.Check(ctx, s); err != nil {
		return nil, err
	}
	lap := stopwatch()
	lk, err := e.lock(ctx, s.ID)
	if err != nil {
		return nil, err
	}
	defer lk.Release(true)
	bundle := e.bundleDir(s.ID)
	if _, err := os.Lstat(bundle); err == nil {
		return nil, fmt.Errorf("%w: sandbox %q exists (or was not freed: `airlock reap`)", errdefs.ErrAlreadyExists, s.ID)
	}
	bg := context.WithoutCancel(ctx)
	defer func() {
		if err != nil {
			rctx, cancel := context.WithTimeout(bg, cleanupTimeout)
			defer cancel()
			if rerr := e.reap(rctx, s.ID); rerr != nil {
				err = fmt.Errorf("%w (and freeing what was made: %v)", err, rerr)
			}
		}
	}()
	elf, err := initELF()
	if err != nil {
		return nil, err
	}
	// The init is written into the bundle prepare makes, and bound from
	// there; prepare's spec already names it.
	initSrc := filepath.Join(bundle, "init")
	// prepare holds the image's tree while the sandbox is made; from the
	// start the sandbox's supervisor holds it too, for the sandbox's life
	// (runner.Supervise).
	binds := []isolation.Bind{{Source: initSrc, Target: initPath, ReadOnly: true}}
	withAgent := false
	if s.Policy.Isolation == isolation.GVisor && !e.runtimeExec {
		var src string
		if src, withAgent = e.agentBind(); withAgent {
			binds = append(binds, isolation.Bind{Source: src, Target: agentPath, ReadOnly: true})
		}
	}
	if snap != "" {
		if err := e.checkSnapshot(ctx, snap, s, withAgent); err != nil {
			return nil, err
		}
		lap("snapshot check")
	}
	if s.Policy.Egress.On() {
		// The credentials are read here too, so that one that cannot be
		// is refused at create; the supervisor's proxy reads them again.
		if _, err := e.newProxy(s.ID, s.Policy.Egress); err != nil {
			return nil, err
		}
		if _, err := e.makeNet(ctx, s.ID); err != nil {
			return nil, err
		}
	}
	// A sandbox restored from a snapshot is named its own: the policy's
	// name is its clones' too (engine.Snapshotter).
	hostname := ""
	if snap != "" {
		hostname = isolation.RestoredHostname(s.Policy.Hostname, s.ID)
	}
	p, err := e.prepare(ctx, s, []string{initPath}, hostname, binds...)
	defer p.release()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(initSrc, elf, 0o555); err != nil {
		return nil, fmt.Errorf("%w: writing the sandbox's init: %v", errdefs.ErrUnavailable, err)
	}
	lap("prepare")
	native, spec, l := p.native, p.spec, s.Policy.Limits

	bin, state, args := e.runtimeFor(s.Policy.Isolation, bundle)
	args = isolation.RunscNetwork(args, s.Policy.Egress)
	name := namePrefix + s.ID
	if native {
		args = append(args, "--log", filepath.Join(bundle, "runc.log"))
	}
	// The container's stdio is /dev/null: a host file or pipe held by its
	// init would be reachable through /proc/1/fd. The sandbox outlives
	// this process: its own session, no parent-death signal.
	pidFile := filepath.Join(bundle, "create.pid")
	verb := []string{"run"}
	if snap != "" {
		// The snapshot's processes in place of a new init: its mounts are
		// this sandbox's, at the same targets (runsc checks them).
		verb = []string{"restore", "--background", "--image-path=" + e.snapshotDir(snap)}
		// runsc restore's own log too, for its errors (runtimeLog).
		if i := slices.Index(args, "--debug-command=run"); i >= 0 {
			args[i] = "--debug-command=run,restore"
		}
	}
	cmd := exec.Command(bin, append(append(args, verb...), "--detach", "--pid-file", pidFile, "--bundle", bundle, name)...)
	cmd.Env = runtimeEnv
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// The runtime holds the sandbox's lock until it has made the sandbox,
	// as runsc does at a pause or a resume: should this process die, a
	// reap waits for it to end before it frees what it made. Neither
	// passes it on: runsc sets what it inherits close-on-exec, and runc's
	// init does so for all but the --preserve-fds it is given (none).
	cmd.ExtraFiles = []*os.File{lk.File()}
	if err := cmd.Run(); err != nil {
		if snap != "" {
			if rerr := restoreRefusal(bundle, snap); rerr != nil {
				e.log.Debug("restore refused", "sandbox_id", s.ID, "snapshot", snap, "err", err, "runtime_log", runtimeLog(bundle))
				return nil, rerr
			}
		}
		return nil, fmt.Errorf("%w: starting sandbox %q with %s %s: %v%s", errdefs.ErrUnavailable, s.ID, filepath.Base(bin), verb[0], err, runtimeLog(bundle))
	}
	lap(filepath.Base(bin) + " " + verb[0])
	// The pid file spares asking the runtime for its state (an exec).
	pid, err := readPid(pidFile)
	if err != nil {
		pid, err = e.statePid(bg, bin, state, name)
	}
	if err != nil {
		return nil, err
	}
	start, ok := procStart(pid)
	if !ok {
		return nil, engine.Lost("sandbox %q ended as it started", s.ID)
	}
	st := sandboxState{ID: s.ID, Image: s.Image, Mode: s.Policy.Isolation, Pid: pid, Start: start, Timeout: l.Timeout, Egress: egressStateOf(s.Policy.Egress),
		Policy: policyDigest(s.Policy), Snapshot: snap, BootID: !native}
	if !native && !e.runtimeExec {
		// Asked a few times: without it every exec takes runsc exec, and
		// a detached one would not outlive a pause (pause_linux.go).
		c, err := gvisor.Find(bg, state, name)
		for try := 1; try < 5 && err != nil; try++ {
			time.Sleep(200 * time.Millisecond)
			c, err = gvisor.Find(bg, state, name)
		}
		if err == nil {
			st.Control, st.Agent = c.Socket, withAgent
		} else {
			e.log.Warn("gVisor control socket unusable; execs use runsc exec", "sandbox", name, "err", err)
		}
	}
	lap("pid and control")
	b, _ := json.Marshal(st)
	if err := atomicfile.WriteFile(filepath.Join(bundle, stateFile), b, 0o600); err != nil {
		return nil, fmt.Errorf("%w: writing sandbox state: %v", errdefs.ErrUnavailable, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: creating sandbox %q: %v", errdefs.ErrAborted, s.ID, err)
	}
	if st.Egress != nil {
		// The supervisor serves the proxy once the state file is there.
		if err := e.awaitProxy(ctx, s.ID); err != nil {
			return nil, err
		}
	}
	e.log.Debug("sandbox created", "sandbox_id", s.ID, "runtime", filepath.Base(bin), "pid", pid, "snapshot", snap, "steps", lap("state"))
	return &sandbox{e: e, st: st, process: *spec.Process, bundle: bundle}, nil
}

// runtimeLog is the tail of what the runtime logged in the bundle, for an
// error message.
func runtimeLog(bundle string) string {
	logs, _ := filepath.Glob(filepath.Join(bundle, "logs", "*.run.txt"))
	restores, _ := filepath.Glob(filepath.Join(bundle, "logs", "*.restore.txt"))
	logs = append(logs, restores...)
	logs = append(logs, filepath.Join(bundle, "runc.log"))
	var tail []string
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 3 {
			lines = lines[len(lines)-3:]
		}
		tail = append(tail, lines...)
	}
	if len(tail) == 0 {
		return ""
	}
	return " (runtime log: " + strings.Join(tail, "; ") + ")"
}

// statePid asks the runtime for the container's host pid: runsc's
// sandbox process, runc's init.
func (e *Engine) statePid(ctx context.Context, bin, state, name string) (int, error) {
	out, err := exec.CommandContext(ctx, bin, "--root", state, "state", name).Output()
	if err != nil {
		return 0, fmt.Errorf("%w: reading the state of %q: %v", errdefs.ErrUnavailable, name, err)
	}
	var st struct {
		Pid    int    `json:"pid"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Pid <= 0 {
		return 0, fmt.Errorf("%w: reading the state of %q: %q", errdefs.ErrUnavailable, name, out)
	}
	return st.Pid, nil
}

// procStart reads a running process's start time; false when it is gone
// or has exited (a zombie: see internal/proc).
func procStart(pid int) (uint64, bool) {
	st, err := proc.ReadStat(pid)
	if err != nil || !st.Alive() {
		return 0, false
	}
	return st.StartTime, true
}

// Open implements engine.Engine. A sandbox that was lost from outside
// opens, so that it can be destroyed; its Exec fails with ErrSandboxLost.
func (e *Engine) Open(ctx context.Context, id string) (engine.Sandbox, error) {
	if err := checkSandboxID(id); err != nil {
		return nil, err
	}
	bundle := e.bundleDir(id)
	b, err := os.ReadFile(filepath.Join(bundle, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no sandbox %q: it was destroyed or never made", errdefs.ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: reading sandbox %q: %v", errdefs.ErrUnavailable, id, err)
	}
	var st sandboxState
	if err := json.Unmarshal(b, &st); err != nil || st.ID != id {
		return nil, fmt.Errorf("%w: sandbox %q has a corrupt state file; remove it with `airlock reap`", errdefs.ErrDataLoss, id)
	}
	var spec specs.Spec
	b, err = os.ReadFile(filepath.Join(bundle, "config.json"))
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	if err != nil || spec.Process == nil {
		return nil, fmt.Errorf("%w: sandbox %q has a corrupt bundle (%v); remove it with `airlock reap`", errdefs.ErrDataLoss, id, err)
	}
	return &sandbox{e: e, st: st, process: *spec.Process, bundle: bundle}, nil
}

// sandbox is one live sandbox of this engine.
type sandbox struct {
	e       *Engine
	st      sandboxState
	process specs.Process // the init's: every exec is derived from it
	bundle  string
}

func (s *sandbox) ID() string { return s.st.ID }

func (s *sandbox) name() string { return namePrefix + s.st.ID }

// alive fails with ErrSandboxLost once the runtime's sandbox process is
// gone, and with ErrNotFound once the sandbox was destroyed.
func (s *sandbox) alive() error {
	if _, err := os.Stat(filepath.Join(s.bundle, stateFile)); err != nil {
		return fmt.Errorf("%w: sandbox %q was destroyed", errdefs.ErrNotFound, s.st.ID)
	}
	if s.st.Paused {
		return fmt.Errorf("%w: sandbox %q is paused; resume it first (`airlock sandbox resume %s`)", errdefs.ErrFailedPrecondition, s.st.ID, s.st.ID)
	}
	if start, ok := procStart(s.st.Pid); !ok || start != s.st.Start {
		return engine.Lost("the sandbox process of %q (pid %d) is gone: killed from outside airlock, or it crashed", s.st.ID, s.st.Pid)
	}
	return nil
}

// execProcess derives an exec's process from the init's, so that nothing
// widens: same user, no capabilities, no new privileges, same rlimits.
func (s *sandbox) execProcess(p *engine.Process) (*specs.Process, error) {
	var bad []string
	if len(p.Argv) == 0 || p.Argv[0] == "" {
		bad = append(bad, "no command given")
	}
	for _, a := range p.Argv {
		if strings.ContainsRune(a, 0) {
			bad = append(bad, fmt.Sprintf("argument %q contains a NUL byte", a))
		}
	}
	for _, kv := range p.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsRune(kv, 0) {
			bad = append(bad, fmt.Sprintf("environment entry %q is not K=V", kv))
		}
	}
	if p.Workdir != "" && (!filepath.IsAbs(p.Workdir) || filepath.Clean(p.Workdir) != p.Workdir) {
		bad = append(bad, fmt.Sprintf("workdir %q must be an absolute, clean path", p.Workdir))
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%w: %s", errdefs.ErrInvalidArgument, strings.Join(bad, "; "))
	}
	pr := s.process
	pr.Args = p.Argv
	pr.Env = mergeEnv(s.process.Env, p.Env)
	if p.Workdir != "" {
		pr.Cwd = p.Workdir
	}
	return &pr, nil
}

// Exec implements engine.Sandbox.
func (s *sandbox) Exec(ctx context.Context, p *engine.Process) (engine.Exit, error) {
	if err := s.alive(); err != nil {
		return engine.Exit{}, err
	}
	pr, err := s.execProcess(p)
	if err != nil {
		return engine.Exit{}, err
	}
	if err := ctx.Err(); err != nil {
		return engine.Exit{Killed: true, Code: -1}, nil
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = s.st.Timeout
	}
	ooms, pidsHits := oomKills(s.st.ID), pidsLimitHits(s.st.ID)
	var exit engine.Exit
	spawned := false
	if p.Detach && s.st.Agent && s.st.Control != "" && noCapabilities(pr) {
		// Through the spawner, so that it outlives a pause.
		exit, spawned, err = s.execSpawn(ctx, pr)
		if spawned {
			return exit, err
		}
	}
	if s.st.Control != "" && !p.Detach && noCapabilities(pr) {
		exit, err = s.execControl(ctx, p, pr, timeout)
	} else {
		exit, err = s.execRuntime(ctx, p, pr, timeout)
	}
	if err != nil {
		return engine.Exit{}, s.lostAtLimit(err, ooms, pidsHits)
	}
	if exit.Code != 0 {
		err := s.alive()
		if err == nil && s.st.Mode != isolation.Seccomp && oomKills(s.st.ID) > ooms {
			// Under gVisor the OOM killer takes the whole sandbox, and
			// `runsc exec` can see its end (its control socket closing,
			// exit 128) before the sandbox process is gone.
			err = s.goneWithin(oomGoneWithin)
		}
		if err != nil {
			return engine.Exit{}, s.lostAtLimit(err, ooms, pidsHits)
		}
		// A SIGKILL counted by the memory cgroup is the OOM killer's (a
		// concurrent exec's kill -9 may be taken for one).
		exit.OOMKilled = exit.Code == 128+int(syscall.SIGKILL) && oomKills(s.st.ID) > ooms
	}
	if p.Detach && exit.Code != 0 {
		bin, _, _ := s.e.runtimeFor(s.st.Mode, s.bundle)
		return engine.Exit{}, fmt.Errorf("%w: starting %q detached in sandbox %q: %s exec exited %d%s", errdefs.ErrUnknown, p.Argv[0], s.st.ID, filepath.Base(bin), exit.Code, runtimeLog(s.bundle))
	}
	return exit, nil
}

// oomGoneWithin is how long an exec that ended beside an OOM kill waits
// for a gVisor sandbox to go, before it reads the exit as the program's.
const oomGoneWithin = 2 * time.Second

// goneWithin polls alive for up to d: the error that says the sandbox is
// gone, or nil while it lives.
func (s *sandbox) goneWithin(d time.Duration) error {
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if err := s.alive(); err != nil || time.Now().After(deadline) {
			return err
		}
	}
}

// noCapabilities reports whether p has no capability in any set, the only
// process the control path starts (it sends empty sets).
func noCapabilities(p *specs.Process) bool {
	c := p.Capabilities
	return c == nil || len(c.Bounding)+len(c.Effective)+len(c.Permitted)+len(c.Inheritable)+len(c.Ambient) == 0
}

// execRuntime runs an exec through the runtime's own exec command.
func (s *sandbox) execRuntime(ctx context.Context, p *engine.Process, pr *specs.Process, timeout time.Duration) (engine.Exit, error) {
	b, _ := json.Marshal(pr)
	tmp, err := os.MkdirTemp(s.bundle, "exec-")
	if err != nil {
		if aerr := s.alive(); aerr != nil {
			return engine.Exit{}, aerr // destroyed meanwhile
		}
		return engine.Exit{}, fmt.Errorf("%w: preparing exec: %v", errdefs.ErrUnavailable, err)
	}
	defer os.RemoveAll(tmp)
	procFile, pidFile := filepath.Join(tmp, "process.json"), filepath.Join(tmp, "pid")
	if err := os.WriteFile(procFile, b, 0o600); err != nil {
		return engine.Exit{}, fmt.Errorf("%w: preparing exec: %v", errdefs.ErrUnavailable, err)
	}
	native := s.st.Mode == isolation.Seccomp
	bin, _, args := s.e.runtimeFor(s.st.Mode, s.bundle)
	args = append(args, "exec", "--process", procFile)
	if native {
		args = append(args, "--pid-file", pidFile)
	} else {
		args = append(args, "--internal-pid-file", pidFile)
	}
	if p.Detach {
		args = append(args, "--detach")
	}
	cmd := exec.Command(bin, append(args, s.name())...)
	cmd.Env = runtimeEnv
	// The runtime writes why it could not start the program to the
	// program's stderr: its last bytes tell a missing program from
	// another refusal.
	var said tail
	var fds *stdio
	if !p.Detach {
		q := *p
		if sameWriter(q.Stdout, q.Stderr) {
			q.Stdout = said.tee(q.Stdout)
			q.Stderr = q.Stdout
		} else {
			q.Stderr = said.tee(q.Stderr)
		}
		if fds, err = newStdio(&q); err != nil {
			return engine.Exit{}, fmt.Errorf("%w: preparing exec: %v", errdefs.ErrUnavailable, err)
		}
		defer fds.close()
		cmd.Stdin, cmd.Stdout, cmd.Stderr = fds.child[0], fds.child[1], fds.child[2]
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	started := time.Now()
	err = cmd.Start()
	if fds != nil {
		fds.closeChild()
	}
	if err != nil {
		return engine.Exit{}, fmt.Errorf("%w: starting %s: %v; run `make setup` to install it", errdefs.ErrUnavailable, filepath.Base(bin), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	exit, waitErr, err := await(ctx, done, timeout, func(kctx context.Context) (error, error) {
		return s.killExec(kctx, cmd, pidFile, done)
	})
	if err != nil {
		return engine.Exit{}, err
	}
	exit.Started, exit.Finished = started, time.Now()
	if fds != nil {
		fds.drain(outputGrace, nil)
	}
	exit.Code = exitCode(cmd.ProcessState)
	if waitErr != nil && cmd.ProcessState == nil {
		return engine.Exit{}, fmt.Errorf("%w: waiting for %s exec: %v", errdefs.ErrInternal, filepath.Base(bin), waitErr)
	}
	if !p.Detach && exit.Code == startFailed[native] && !exit.TimedOut && !exit.Killed && !written(pidFile) {
		// The runtime writes the pid file once the program runs: without
		// it, the code is the runtime's refusal, told as the control path
		// tells it.
		exit.Code = 126
		if said.notFound() {
			exit.Code = 127
		}
		if p.Stderr != nil {
			fmt.Fprintf(p.Stderr, "airlock: cannot start %q in the sandbox\n", pr.Args[0])
		}
	}
	return exit, nil
}

// startFailed is the runtime's exec code when it could not start the
// program: runsc's (false) and runc's (true).
var startFailed = map[bool]int{false: 128, true: 255}

// written reports whether the runtime wrote its pid file.
func written(pidFile string) bool {
	fi, err := os.Stat(pidFile)
	return err == nil && fi.Size() > 0
}

// await waits for an exec's end on done, up to timeout and while ctx
// lasts; past either, kill ends the exec and returns what done then gave.
func await[T any](ctx context.Context, done <-chan T, timeout time.Duration, kill func(context.Context) (T, error)) (engine.Exit, T, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var exit engine.Exit
	select {
	case v := <-done:
		return exit, v, nil
	case <-timer.C:
		exit.TimedOut = true
	case <-ctx.Done():
		exit.Killed = true
	}
	v, err := kill(context.WithoutCancel(ctx))
	return exit, v, err
}

// outputGrace is how long an exec's output is still read after its
// process ended, for what it left running with the same stdout.
const outputGrace = 2 * time.Second

// execControl runs an exec through the gVisor sandbox's control socket.
func (s *sandbox) execControl(ctx context.Context, p *engine.Process, pr *specs.Process, timeout time.Duration) (engine.Exit, error) {
	c := s.control()
	fds, err := newStdio(p)
	if err != nil {
		return engine.Exit{}, fmt.Errorf("%w: preparing exec: %v", errdefs.ErrUnavailable, err)
	}
	defer fds.close()
	started := time.Now()
	pid, ax, err := s.startAgent(ctx, pr, fds.child, p.Stdin != nil)
	var more func() // what drain asks of the relay
	if errors.Is(err, errNoAgent) {
		pid, err = c.Start(ctx, pr, fds.child)
	} else if err == nil {
		defer ax.release() // once waited for: the agent may reap it
		more = ax.drain
	}
	fds.closeChild()
	if err != nil && ctx.Err() != nil && !errors.Is(err, errdefs.ErrDataLoss) {
		// Cancelled before the program was known to run: killed, as a
		// cancel after its start is.
		return engine.Exit{Killed: true, Started: started, Finished: time.Now()}, nil
	}
	if err != nil {
		var refused *gvisor.RefusedError
		if ho := (*handOverError)(nil); errors.As(err, &ho) {
			return engine.Exit{}, err // the agent answered: the sandbox is up
		}
		if !errors.As(err, &refused) {
			if aerr := s.goneWithin(2 * time.Second); aerr != nil {
				return engine.Exit{}, aerr
			}
			if errors.Is(err, errdefs.ErrDataLoss) {
				return engine.Exit{}, err
			}
			return engine.Exit{}, fmt.Errorf("%w: starting %q in sandbox %q: %v", errdefs.ErrUnavailable, pr.Args[0], s.st.ID, err)
		}
		if aerr := s.alive(); aerr != nil {
			return engine.Exit{}, aerr // destroyed meanwhile
		}
		// The sandbox would not start the program: as with runsc exec,
		// the reason is the program's stderr, and the code a shell's.
		code := 126
		if strings.Contains(refused.Msg, "no such file or directory") {
			code = 127
		}
		fds.failed(fmt.Sprintf("airlock: cannot start %q in the sandbox: %s\n", pr.Args[0], refused.Msg))
		return engine.Exit{Code: code, Started: started, Finished: time.Now()}, nil
	}

	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	type waited struct {
		code int
		err  error
	}
	done := make(chan waited, 1)
	go func() {
		code, err := c.Wait(wctx, pid)
		done <- waited{code, err}
	}()
	exit, w, err := await(ctx, done, timeout, func(kctx context.Context) (waited, error) {
		return killUntil(s.st.ID, done, func(int) { s.killTree(kctx, int(pid)) })
	})
	if err != nil {
		return engine.Exit{}, err
	}
	exit.Started, exit.Finished = started, time.Now()
	fds.drain(outputGrace, more)
	if w.err != nil {
		// The socket closes as the sandbox process dies, a moment before
		// the process is seen gone.
		if aerr := s.goneWithin(2 * time.Second); aerr != nil {
			return engine.Exit{}, aerr
		}
		if ax != nil {
			// Once the agent is gone, the sandbox's init reaps what it
			// started, and may do so before the sentry is asked.
			return engine.Exit{}, fmt.Errorf("%w: the exit status of %q in sandbox %q was lost: the exec agent that started it ended first, killed by a process of the sandbox or with it (%v)", errdefs.ErrDataLoss, pr.Args[0], s.st.ID, w.err)
		}
		return engine.Exit{}, fmt.Errorf("%w: waiting for %q in sandbox %q: %v", errdefs.ErrInternal, pr.Args[0], s.st.ID, w.err)
	}
	exit.Code = w.code
	return exit, nil
}

// control is the sandbox's control client.
func (s *sandbox) control() gvisor.Control {
	return gvisor.Control{Socket: s.st.Control, CID: s.name()}
}

// killExec kills an exec's process and everything it started, then its
// runtime exec process. Both runtimes make the exec's process the leader
// of a new session and process group inside the sandbox; what is in its
// group, its session (where the host sees them: runc) or below it in the
// process tree is killed. It returns the runtime's wait result.
func (s *sandbox) killExec(ctx context.Context, cmd *exec.Cmd, pidFile string, done <-chan error) (error, error) {
	return killUntil(s.st.ID, done, func(round int) {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				s.killTree(ctx, pid)
			}
		}
		if round > 0 {
			// Not started yet, or its runtime lingers.
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
}

// killUntil calls kill (with its round, from 0) now and every 200 ms
// until done gives the exec's end, and fails once cleanupTimeout passes
// without one.
func killUntil[T any](id string, done <-chan T, kill func(round int)) (T, error) {
	deadline := time.After(cleanupTimeout)
	for round := 0; ; round++ {
		kill(round)
		select {
		case v := <-done:
			return v, nil
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			var zero T
			return zero, fmt.Errorf("%w: exec in sandbox %q did not end %v after SIGKILL", errdefs.ErrInternal, id, cleanupTimeout)
		}
	}
}

// killTree kills pid's process group, session and descendants. The tree is
// read before anything is killed, so that no child is orphaned to init
// (and out of reach) by the kill of its parent first.
func (s *sandbox) killTree(ctx context.Context, pid int) {
	kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if s.st.Mode == isolation.Seccomp {
		// Only the sandbox's own processes, by its cgroup: a pid in the
		// pid file may have been reused on the host by now.
		mine := cgroupPids(s.st.ID)
		for _, p := range proctree.Of(hostProcs(mine), pid) {
			if mine[p] {
				killInCgroup(p, s.st.ID)
			}
		}
		return
	}
	if s.st.Control != "" && s.control().KillTree(kctx, pid) == nil {
		return
	}
	bin, _, args := s.e.runtimeFor(s.st.Mode, s.bundle)
	victims := proctree.Of(s.sandboxProcs(kctx), pid)
	kill := func(flag string, p int) {
		exec.CommandContext(kctx, bin, append(args, "kill", flag, strconv.Itoa(p), s.name(), "KILL")...).Run()
	}
	kill("--pgid", pid)
	for _, p := range victims {
		if p != pid {
			kill("--pid", p)
		}
	}
}

// sandboxProcs lists a gVisor sandbox's processes, by its own pids, from
// runsc ps's table (its json holds pids alone): UID PID PPID C ...
func (s *sandbox) sandboxProcs(ctx context.Context) []proctree.Proc {
	bin, _, args := s.e.runtimeFor(s.st.Mode, s.bundle)
	out, err := exec.CommandContext(ctx, bin, append(args, "ps", s.name())...).Output()
	if err != nil {
		return nil
	}
	var procs []proctree.Proc
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 {
			continue
		}
		pid, err1 := strconv.Atoi(f[1])
		ppid, err2 := strconv.Atoi(f[2])
		if err1 == nil && err2 == nil {
			procs = append(procs, proctree.Proc{Pid: pid, Ppid: ppid, Sid: -1, Pgid: -1})
		}
	}
	return procs
}

// cgroupPids lists the host pids in sandbox id's cgroup and below it, as
// the pids hierarchy (v1) or the unified one (v2) holds them.
// killInCgroup sends SIGKILL to pid through a pidfd, once the process
// the pidfd holds is seen in sandbox id's cgroup: a pid read from the
// cgroup whose process ended since, and reused by the host, is never hit.
func killInCgroup(pid int, id string) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if inCgroup(pid, id) {
		unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
}

// inCgroup reports whether pid is in sandbox id's cgroup (or one below
// it), in any hierarchy.
func inCgroup(pid int, id string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	dir := cgroup.PathOf(id)
	for _, line := range strings.Split(string(b), "\n") {
		// hierarchy-ID:controllers:path
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && (f[2] == dir || strings.HasPrefix(f[2], dir+"/")) {
			return true
		}
	}
	return false
}

func cgroupPids(id string) map[int]bool {
	pids := map[int]bool{}
	for _, dir := range []string{filepath.Join("/sys/fs/cgroup/pids", cgroup.Parent, id), filepath.Join("/sys/fs/cgroup", cgroup.Parent, id)} {
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids[pid] = true
				}
			}
			return nil
		})
	}
	return pids
}

// lostAtLimit says why sandbox s was lost (err) during an exec, when its
// cgroup counted an OOM kill or a refused fork since the exec began (ooms
// and pidsHits were the counts then): under gVisor the limits count the
// sentry's own memory, threads and processes, and the sandbox ends with
// it. Any other err is returned as it is.
func (s *sandbox) lostAtLimit(err error, ooms, pidsHits uint64) error {
	if !errors.Is(err, engine.ErrSandboxLost) {
		return err
	}
	switch {
	case oomKills(s.st.ID) > ooms:
		return engine.Lost("sandbox %q reached its memory limit and the host's OOM killer ended it (under gVisor the limit is the whole sandbox's, and the OOM killer takes the sandbox)", s.st.ID)
	case pidsLimitHits(s.st.ID) > pidsHits:
		return engine.Lost("sandbox %q ended after reaching its pids limit (under gVisor the limit counts the sentry's own threads and processes, and the sandbox ends when it can start no more)", s.st.ID)
	}
	return err
}

// pidsLimitHits counts the forks refused at sandbox id's pids limit.
func pidsLimitHits(id string) uint64 {
	return cgroupCount("/sys/fs/cgroup", id, "pids", "pids.events", "pids.events", "max")
}

// oomKills counts the OOM kills in sandbox id's memory cgroup and below:
// v1 counts a kill in the victim's own group, v2 in memory.events up the
// tree (but under memory_localevents).
func oomKills(id string) uint64 {
	return cgroupCount("/sys/fs/cgroup", id, "memory", "memory.oom_control", "memory.events", "oom_kill")
}

// cgroupCount sums key's counts in sandbox id's cgroup files under the
// cgroup mount base: each named v1 in its group of the v1 hierarchy hier
// and below, and v2 in its unified group. A v2 group's own file counts
// its subtree, unless the hierarchy is mounted with memory_localevents;
// the subtree's v2+".local" files, where the kernel has them, count it
// either way.
func cgroupCount(base, id, hier, v1, v2, key string) uint64 {
	count := func(path string) uint64 {
		var n uint64
		b, _ := os.ReadFile(path)
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, key+" "); ok {
				c, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				n += c
			}
		}
		return n
	}
	sum := func(dir, name string) (n uint64, found bool) {
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.Name() == name {
				n, found = n+count(path), true
			}
			return nil
		})
		return n, found
	}
	n, _ := sum(filepath.Join(base, hier, cgroup.Parent, id), v1)
	if local, ok := sum(filepath.Join(base, cgroup.Parent, id), v2+".local"); ok {
		return n + local
	}
	return n + count(filepath.Join(base, cgroup.Parent, id, v2))
}

// hostProcs lists the host's processes among pids, zombies included: a
// zombie's pid is still taken, and its parent link still counts.
func hostProcs(pids map[int]bool) []proctree.Proc {
	var out []proctree.Proc
	for pid := range pids {
		st, err := proc.ReadStat(pid)
		if err != nil {
			continue
		}
		out = append(out, proctree.Proc{Pid: pid, Ppid: st.Ppid, Sid: st.Session, Pgid: st.Pgrp})
	}
	return out
}

// Destroy implements engine.Sandbox.
func (s *sandbox) Destroy(ctx context.Context) error {
	return s.e.destroy(ctx, s.st.ID)
}

// destroy frees sandbox id: its state file first (so that it no longer
// opens), then everything Reap frees. Concurrent destroys take turns.
func (e *Engine) destroy(ctx context.Context, id string) error {
	bg := context.WithoutCancel(ctx)
	lk, err := e.lock(bg, id)
	if err != nil {
		return err
	}
	defer lk.Release(true)
	if err := os.Remove(filepath.Join(e.bundleDir(id), stateFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: destroying sandbox %q: %v", errdefs.ErrUnavailable, id, err)
	}
	rctx, cancel := context.WithTimeout(bg, cleanupTimeout)
	defer cancel()
	if err := e.reap(rctx, id); err != nil {
		return fmt.Errorf("%w: destroying sandbox %q: %v", errdefs.ErrUnavailable, id, err)
	}
	return nil
}
