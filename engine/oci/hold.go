package oci

// Held sandboxes, for a warm pool: a one-shot sandbox started by `runsc
// run` (or `runc run`) before its program is known, its first process
// airlock's trampoline, its stdio pipes held by airlock. Start writes the
// program's frame to the trampoline's stdin and, from there on, the
// sandbox is an ordinary one-shot sandbox (run.go): same wait, same kill,
// same OOM and loss detection, same destroy.

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/isolation"
)

// holdTimeout bounds a held sandbox's boot, up to its trampoline's ready
// byte.
const holdTimeout = 60 * time.Second

type held struct {
	r *oneShot
	// stdin is the trampoline's stdin; stdout and stderr are the read
	// ends of the container's output.
	stdin, stdout, stderr *os.File
	env                   []string // the image's and the spec's
	workdir               string
	rootfs                string // the image's tree, for PATH lookups

	// pid and pidStart name the runtime's sandbox process (runsc's
	// sandbox, runc's init), so that Start can tell it died while held.
	pid      int
	pidStart uint64

	mu      sync.Mutex
	started bool
}

// Hold implements engine.Holder.
func (e *Engine) Hold(ctx context.Context, s *engine.SandboxSpec) (_ engine.Held, err error) {
	if s.Init != nil {
		return nil, fmt.Errorf("%w: a held sandbox gets its program from Start, not from its spec", errdefs.ErrInvalidArgument)
	}
	if err := e.Check(ctx, s); err != nil {
		return nil, err
	}
	elf, err := trampolineELF()
	if err != nil {
		return nil, err
	}
	r := &oneShot{e: e, id: s.ID, limits: s.Policy.Limits, egress: s.Policy.Egress, name: namePrefix + s.ID,
		log: e.log.With("sandbox_id", s.ID, "image_digest", s.Image.String())}
	h := &held{r: r}
	defer func() {
		if err != nil {
			h.Destroy(context.WithoutCancel(ctx))
		}
	}()
	if err := r.serveEgress(ctx); err != nil {
		return nil, err
	}
	src := filepath.Join(e.bundleDir(s.ID), "start")
	if r.p, err = e.prepare(ctx, s, []string{trampolinePath}, "", isolation.Bind{Source: src, Target: trampolinePath, ReadOnly: true}); err != nil {
		return nil, err
	}
	if err := os.WriteFile(src, elf, 0o555); err != nil {
		return nil, fmt.Errorf("%w: writing the sandbox's trampoline: %v", errdefs.ErrUnavailable, err)
	}
	h.env, h.workdir = r.p.spec.Process.Env, r.p.spec.Process.Cwd
	h.rootfs = r.p.imageTree
	var in, out, errw *os.File
	if in, h.stdin, err = os.Pipe(); err == nil {
		if h.stdout, out, err = os.Pipe(); err == nil {
			h.stderr, errw, err = os.Pipe()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: making the sandbox's pipes: %v", errdefs.ErrUnavailable, err)
	}
	defer in.Close()
	defer out.Close()
	defer errw.Close()
	r.closers = []io.Closer{h.stdin, h.stdout, h.stderr}

	if err := r.start(r.command(in, out, errw)); err != nil {
		return nil, err
	}

	// The one byte the trampoline writes says the sandbox is up. It runs
	// no user code yet, so what it writes is airlock's; anything else is
	// a failure to boot.
	ready := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := io.ReadFull(h.stdout, b[:])
		if err == nil && b[0] != trampolineReady {
			err = fmt.Errorf("the trampoline wrote %q", b[0])
		}
		ready <- err
	}()
	hctx, cancel := context.WithTimeout(ctx, holdTimeout)
	defer cancel()
	select {
	case err := <-ready:
		if err != nil {
			return nil, fmt.Errorf("%w: starting held sandbox %q: %v%s", errdefs.ErrUnavailable, s.ID, err, h.runtimeErr())
		}
	case <-hctx.Done():
		return nil, fmt.Errorf("%w: held sandbox %q did not start within %v: %v", errdefs.ErrUnavailable, s.ID, holdTimeout, hctx.Err())
	}
	if h.pid, err = e.statePid(hctx, r.runtime, r.state, r.name); err != nil {
		return nil, err
	}
	var ok bool
	if h.pidStart, ok = procStart(h.pid); !ok {
		return nil, engine.Lost("held sandbox %q ended as it started", s.ID)
	}
	return h, nil
}

// runtimeErr is what the runtime wrote to the container's stderr before
// the trampoline ran, for an error message.
func (h *held) runtimeErr() string {
	h.stderr.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	b, _ := io.ReadAll(io.LimitReader(h.stderr, 4096))
	if s := strings.TrimSpace(string(b)); s != "" {
		return " (" + s + ")"
	}
	return runtimeLog(h.r.p.bundle)
}

func (h *held) ID() string { return h.r.id }

// Start implements engine.Held.
func (h *held) Start(ctx context.Context, p *engine.Process) (engine.Task, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started {
		return nil, fmt.Errorf("%w: held sandbox %q has been started already; a held sandbox runs one program", errdefs.ErrFailedPrecondition, h.r.id)
	}
	if start, ok := procStart(h.pid); !ok || start != h.pidStart {
		return nil, engine.Lost("held sandbox %q ended before it was used: killed from outside airlock, or it crashed", h.r.id)
	}
	frame, err := h.frame(p)
	if err != nil {
		return nil, err
	}
	h.started = true
	r := h.r
	if p.Timeout > 0 {
		r.limits.Timeout = p.Timeout
	}
	// From here the sandbox runs the program: whatever goes wrong, it is
	// a one-shot sandbox to destroy.
	h.stdin.SetWriteDeadline(time.Now().Add(10 * time.Second))
	r.started = time.Now()
	if _, err := h.stdin.Write(frame); err != nil {
		return r, fmt.Errorf("%w: handing the program to held sandbox %q: %v", errdefs.ErrUnavailable, r.id, err)
	}
	h.stdin.SetWriteDeadline(time.Time{})
	var wg sync.WaitGroup
	pump := func(dst io.Writer, src io.Reader) {
		defer wg.Done()
		if dst == nil {
			dst = io.Discard
		}
		io.Copy(dst, src)
	}
	wg.Add(2)
	go pump(p.Stdout, h.stdout)
	go pump(p.Stderr, h.stderr)
	if p.Stdin != nil {
		go func() {
			io.Copy(h.stdin, p.Stdin)
			h.stdin.Close()
		}()
	} else {
		h.stdin.Close()
	}
	// Once the runtime has ended, the output is read to its end, or for
	// at most as long as exec.Cmd's WaitDelay in a cold run.
	r.drain = func() {
		copied := make(chan struct{})
		go func() { wg.Wait(); close(copied) }()
		select {
		case <-copied:
		case <-time.After(2 * time.Second):
			h.stdout.Close()
			h.stderr.Close()
			<-copied
		}
	}
	return r, nil
}

// Check implements engine.Held.
func (h *held) Check(p *engine.Process) error {
	_, err := h.frame(p)
	return err
}

// frame is p's frame for the trampoline.
func (h *held) frame(p *engine.Process) ([]byte, error) {
	if len(p.Argv) == 0 || p.Argv[0] == "" {
		return nil, fmt.Errorf("%w: no command given", errdefs.ErrInvalidArgument)
	}
	env := mergeEnv(h.env, p.Env)
	prog, err := lookPath(h.rootfs, p.Argv[0], env)
	if err != nil {
		return nil, err
	}
	cwd := h.workdir
	if p.Workdir != "" {
		cwd = p.Workdir
	}
	return frameOf(prog, p.Argv, env, cwd)
}

// Destroy implements engine.Held.
func (h *held) Destroy(ctx context.Context) error { return h.r.Destroy(ctx) }

// lookPath finds name as runsc and runc do: a name with a slash is taken
// as it is; another is looked up in the PATH of env, in the image's tree.
// The tree is opened beneath its root, so the image's links stay inside.
func lookPath(tree, name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	dirs := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			dirs = v
		}
	}
	root, err := os.OpenRoot(tree)
	if err != nil {
		return "", fmt.Errorf("%w: opening the image's tree: %v", errdefs.ErrInternal, err)
	}
	defer root.Close()
	for _, d := range strings.Split(dirs, ":") {
		if !path.IsAbs(d) {
			continue
		}
		p := path.Join(d, name)
		rel := strings.TrimPrefix(p, "/")
		fi, err := root.Stat(rel)
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
		// A link that leaves the tree on the host (an absolute target)
		// resolves inside the sandbox: the sandbox's exec decides.
		if err != nil {
			if li, lerr := root.Lstat(rel); lerr == nil && li.Mode()&fs.ModeSymlink != 0 {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%w: executable %q is not in the image's PATH (%s)", errdefs.ErrNotFound, name, dirs)
}

var _ engine.Holder = (*Engine)(nil)
