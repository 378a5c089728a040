//go:build e2e

package oci

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/enginetest"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/imagetest"
	"github.com/airlock-sandbox/airlock/internal/proctree"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/seccomp"
	"github.com/airlock-sandbox/airlock/store"
)

// sysRoot is setup's root, whose store and runsc the tests share.
func sysRoot() string {
	if r := os.Getenv("AIRLOCK_ROOT"); r != "" {
		return r
	}
	return "/var/lib/airlock"
}

// testRoot is an engine root of the test's own over setup's store and
// tools, holding a busybox image.
func testRoot(t *testing.T) (string, digest.Digest) {
	t.Helper()
	if err := Usable(sysRoot()); err != nil {
		t.Fatalf("the oci engine cannot run here: %v", err)
	}
	root := t.TempDir()
	// runsc keeps a mounted network namespace in its root.
	t.Cleanup(func() { syscall.Unmount(filepath.Join(root, "oci", "runsc", "null-netns"), syscall.MNT_DETACH) })
	for _, d := range []string{"store", "tools"} {
		if err := os.Symlink(filepath.Join(sysRoot(), d), filepath.Join(root, d)); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	if err := imagetest.BusyboxLayout(dir); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(root, "store"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := st.Put(context.Background(), img, "airlock-test/busybox:sandbox")
	if err != nil {
		t.Fatal(err)
	}
	return root, id
}

func TestSandboxConformance(t *testing.T) {
	root, image := testRoot(t)
	for _, c := range []struct {
		name string
		mode isolation.Mode
		opts []Option
	}{
		// Execs through the agent, as a supervised sandbox takes them.
		{"gvisor", isolation.GVisor, nil},
		{"seccomp", isolation.Seccomp, nil},
		// Execs through the control socket: no agent installed, or none
		// served.
		{"gvisor-control", isolation.GVisor, []Option{WithAgent("")}},
		// The fallback of a runsc whose control socket does not answer.
		{"gvisor-runsc-exec", isolation.GVisor, []Option{WithRuntimeExec()}},
	} {
		mode := c.mode
		newEngine := func(t *testing.T) *Engine {
			e, err := New(root, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
		t.Run(c.name, func(t *testing.T) {
			p := isolation.Default()
			p.Isolation = mode
			p.Seccomp = profile(t, mode)
			p.Limits.Memory = 128 << 20 // for OutOfMemory's sake
			e := newEngine(t)
			bin, state, args := e.runtimeFor(mode, "")
			if mode == isolation.GVisor {
				args = []string{"--root", state} // bare: no flags of airlock's
			}
			enginetest.Sandboxes(t, func(t *testing.T) engine.Engine { return newEngine(t) }, image, enginetest.Harness{
				Policy: p,
				KillSandbox: func(t *testing.T, id string) {
					pid, err := e.statePid(context.Background(), bin, state, namePrefix+id)
					if err != nil {
						t.Fatal(err)
					}
					if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
						t.Fatal(err)
					}
					// The kill has landed once the process is dead or a zombie.
					for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
						if _, alive := procStart(pid); !alive {
							break
						}
						if time.Now().After(deadline) {
							t.Fatalf("pid %d outlived SIGKILL by 10s", pid)
						}
					}
				},
				Leftovers: func(t *testing.T, id string) []string { return leftovers(t, e, id) },
				Started:   serveAgent,
				BareExec: func(id string) *exec.Cmd {
					return exec.Command(bin, append(args, "exec", namePrefix+id, "true")...)
				},
			})
		})
	}
}

// serveAgent runs sb's exec agent as its supervisor would, until the
// test ends, and waits for its socket. A sandbox with no agent bound
// is left as it is.
func serveAgent(t *testing.T, sb engine.Sandbox) {
	s := sb.(*sandbox)
	if !s.st.Agent {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	wctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if !s.Served(wctx) {
		t.Fatalf("no agent socket in %s after 10s", s.bundle)
	}
}

// agentSandbox is a gVisor sandbox whose execs its agent forks.
func agentSandbox(t *testing.T, id string) engine.Sandbox {
	t.Helper()
	root, image := testRoot(t)
	sb := gvisorSandbox(t, root, image, id)
	if !sb.(*sandbox).st.Agent {
		t.Fatalf("no agent bound; is %s installed (`make setup`)?", AgentPath(root))
	}
	serveAgent(t, sb)
	return sb
}

// profile is airlock's default seccomp profile for mode, as the runner
// loads it.
func profile(t *testing.T, mode isolation.Mode) *isolation.SeccompProfile {
	p, err := seccomp.Load("default")
	if err == nil && mode == isolation.GVisor {
		p, err = seccomp.ForGVisor(p)
	}
	if err == nil {
		err = seccomp.Validate(p)
	}
	if err != nil {
		t.Fatal(err)
	}
	return &isolation.SeccompProfile{JSON: p.Bytes(), Spec: p.Spec(), SHA256: p.SHA256()}
}

// leftovers lists what the host still holds for sandbox id: runtime
// containers, cgroups, mounts, the bundle and its lock.
func leftovers(t *testing.T, e *Engine, id string) []string {
	var left []string
	for _, rt := range e.runtimes() {
		out, _ := exec.Command(rt.bin, "--root", rt.state, "list", "--format", "json").Output()
		var cs []struct {
			ID string `json:"id"`
		}
		json.Unmarshal(out, &cs)
		for _, c := range cs {
			if c.ID == namePrefix+id {
				left = append(left, filepath.Base(rt.bin)+" container "+c.ID)
			}
		}
		if m, _ := filepath.Glob(filepath.Join(rt.state, "*"+id+"*")); len(m) > 0 {
			left = append(left, m...)
		}
	}
	if slices.Contains(cgroup.IDs(), id) {
		left = append(left, "cgroup "+id)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		if strings.Contains(l, e.bundleDir(id)) {
			left = append(left, "mount "+l)
		}
	}
	used, _ := filepath.Glob(filepath.Join(e.checkpointsDir(), usedPrefix+id+"-*"))
	for _, p := range append([]string{e.bundleDir(id), e.lockPath(id), e.checkpointDir(id)}, used...) {
		if _, err := os.Lstat(p); err == nil {
			left = append(left, p)
		}
	}
	return left
}

// sandboxHelperEnv asks the test binary to act as a creating process:
// root, image, id and mode, separated by commas, and optionally the
// runtime binary for that mode.
const sandboxHelperEnv = "AIRLOCK_SANDBOX_HELPER"

// TestSandboxHelper is not a test: run by TestSandboxOutlivesCreator as
// a separate process, it creates a sandbox, starts a detached process in
// it, says so, and waits to be killed.
func TestSandboxHelper(t *testing.T) {
	arg := os.Getenv(sandboxHelperEnv)
	if arg == "" {
		return
	}
	f := strings.Split(arg, ",")
	var opts []Option
	if len(f) > 4 {
		with := WithRunsc
		if isolation.Mode(f[3]) == isolation.Seccomp {
			with = WithRunc
		}
		opts = append(opts, with(f[4]))
	}
	e, err := New(f[0], opts...)
	if err != nil {
		t.Fatal(err)
	}
	p := isolation.Default()
	p.Isolation = isolation.Mode(f[3])
	p.Seccomp = profile(t, p.Isolation)
	ctx := context.Background()
	sb, err := e.Create(ctx, &engine.SandboxSpec{ID: f[2], Image: digest.Digest(f[1]), Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, &engine.Process{Argv: []string{"sleep", "1001"}, Detach: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, &engine.Process{Argv: []string{"sh", "-c", "echo mine > /tmp/mark"}}); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("created\n")
	select {}
}

// A sandbox outlives the process that created it, even SIGKILLed, and
// another process opens it by id alone.
func TestSandboxOutlivesCreator(t *testing.T) {
	root, image := testRoot(t)
	for _, mode := range []isolation.Mode{isolation.GVisor, isolation.Seccomp} {
		t.Run(string(mode), func(t *testing.T) {
			id := "outlives-" + string(mode)
			cmd := exec.Command(os.Args[0], "-test.run=^TestSandboxHelper$", "-test.v")
			cmd.Env = append(os.Environ(), sandboxHelperEnv+"="+strings.Join([]string{root, image.String(), id, string(mode)}, ","))
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			// The kill takes the creator's whole process group, as a
			// terminal's ^C or a supervisor would.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			e, err := New(root)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := e.destroy(context.Background(), id); err != nil {
					t.Error(err)
				}
				if left := leftovers(t, e, id); len(left) > 0 {
					t.Errorf("left: %v", left)
				}
			}()
			sc := bufio.NewScanner(out)
			var said []string
			for sc.Scan() && sc.Text() != "created" {
				said = append(said, sc.Text())
			}
			if sc.Text() != "created" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("helper: %q", said)
			}
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait()

			sb, err := e.Open(context.Background(), id)
			if err != nil {
				t.Fatalf("Open after the creator was killed: %v", err)
			}
			var stdout strings.Builder
			x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"sh", "-c", "cat /tmp/mark; ps -o args"}, Stdout: &stdout, Timeout: 10 * time.Second})
			if err != nil || x.Code != 0 {
				t.Fatalf("Exec after the creator was killed: %+v, %v", x, err)
			}
			if !strings.HasPrefix(stdout.String(), "mine\n") || !strings.Contains(stdout.String(), "sleep 1001") {
				t.Fatalf("the sandbox lost its state or its detached process with its creator:\n%s", stdout.String())
			}
		})
	}
}

// A sandbox whose airlock process died without destroying it is found and
// freed by the reaper.
func TestSandboxReaped(t *testing.T) {
	root, image := testRoot(t)
	for _, mode := range []isolation.Mode{isolation.GVisor, isolation.Seccomp} {
		t.Run(string(mode), func(t *testing.T) {
			e, err := New(root)
			if err != nil {
				t.Fatal(err)
			}
			p := isolation.Default()
			p.Isolation = mode
			p.Seccomp = profile(t, mode)
			id := "reaped-" + string(mode)
			sb, err := e.Create(context.Background(), &engine.SandboxSpec{ID: id, Image: image, Policy: p})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"sleep", "1002"}, Detach: true}); err != nil {
				t.Fatal(err)
			}
			ids, err := e.Leftovers(context.Background())
			if err != nil || !slices.Contains(ids, id) {
				t.Fatalf("Leftovers: %v, %v; want %s among them", ids, err, id)
			}
			if err := e.Reap(context.Background(), id); err != nil {
				t.Fatalf("Reap: %v", err)
			}
			if left := leftovers(t, e, id); len(left) > 0 {
				t.Fatalf("reaped, but left: %v", left)
			}
			if _, err := e.Open(context.Background(), id); !errdefs.IsNotFound(err) {
				t.Fatalf("Open of a reaped sandbox: %v; want not found", err)
			}
		})
	}
}

// A runtime making a sandbox holds the sandbox's lock, so a reap after
// its airlock process was killed waits for it to end, then frees what it
// made. The runtime is the real one behind a script that holds up its run
// and marks when it has ended.
func TestReapWaitsForRuntime(t *testing.T) {
	root, image := testRoot(t)
	for _, mode := range []isolation.Mode{isolation.GVisor, isolation.Seccomp} {
		t.Run(string(mode), func(t *testing.T) {
			e, err := New(root)
			if err != nil {
				t.Fatal(err)
			}
			real := e.runsc
			if mode == isolation.Seccomp {
				if real, err = exec.LookPath(e.runc); err != nil {
					t.Fatal(err)
				}
			}
			dir := t.TempDir()
			mark := filepath.Join(dir, "mark")
			wrapper := filepath.Join(dir, "runtime")
			script := fmt.Sprintf(`#!/bin/sh
case " $* " in
*" run "*) : >%[1]s.started; sleep 2; %[2]s "$@"; rc=$?; : >%[1]s.ended; exit $rc ;;
esac
exec %[2]s "$@"
`, mark, real)
			if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			id := "reapwaits-" + string(mode)
			cmd := exec.Command(os.Args[0], "-test.run=^TestSandboxHelper$", "-test.v")
			cmd.Env = append(os.Environ(), sandboxHelperEnv+"="+strings.Join([]string{root, image.String(), id, string(mode), wrapper}, ","))
			cmd.Stderr = os.Stderr
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			for {
				if _, err := os.Stat(mark + ".started"); err == nil {
					break
				}
				select {
				case err := <-exited:
					t.Fatalf("the creator ended before its runtime ran: %v", err)
				case <-time.After(20 * time.Millisecond):
				}
			}
			// The creator dies mid-create; the runtime, in its own
			// session, goes on.
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			if err := e.Reap(context.Background(), id); err != nil {
				t.Fatalf("Reap: %v", err)
			}
			if _, err := os.Stat(mark + ".ended"); err != nil {
				t.Fatalf("Reap returned while the runtime was still making the sandbox: %v", err)
			}
			if left := leftovers(t, e, id); len(left) > 0 {
				t.Fatalf("reaped, but left: %v", left)
			}
		})
	}
}

// setup's runsc starts with its seccomp programs precompiled: the
// sentry's and the gofer's logs say so, for the configuration the engine
// starts them in. The runsc is the installed one behind a script that
// turns on its debug logs for the sandbox and the gofer.
func TestSandboxSeccompPrecompiled(t *testing.T) {
	root, image := testRoot(t)
	e, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(t.TempDir(), "runsc")
	script := fmt.Sprintf(`#!/bin/sh
n=$#
for a do
	case $a in
	--debug-command=*) set -- "$@" --debug "$a,boot,gofer" ;;
	*) set -- "$@" "$a" ;;
	esac
done
shift $n
exec %s "$@"
`, e.runsc)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if e, err = New(root, WithRunsc(wrapper)); err != nil {
		t.Fatal(err)
	}
	p := isolation.Default()
	p.Seccomp = profile(t, p.Isolation)
	const id = "precompiled"
	sb, err := e.Create(context.Background(), &engine.SandboxSpec{ID: id, Image: image, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.destroy(context.Background(), id); err != nil {
			t.Error(err)
		}
	}()
	if x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"true"}, Timeout: 10 * time.Second}); err != nil || x.Code != 0 {
		t.Fatalf("Exec: %+v, %v", x, err)
	}
	for _, proc := range []string{"boot", "gofer"} {
		logs, _ := filepath.Glob(filepath.Join(e.bundleDir(id), "logs", "*."+proc+".txt"))
		if len(logs) != 1 {
			t.Fatalf("%s logs: %v; want one", proc, logs)
		}
		b, err := os.ReadFile(logs[0])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("Loaded precompiled seccomp instructions")) || bytes.Contains(b, []byte("No precompiled program found")) {
			t.Errorf("runsc's %s process built its seccomp program at its start: %s's runsc was not built with its programs precompiled (rerun `make setup`)", proc, sysRoot())
		}
	}
}

// Any image works, the default Debian one included: its Python writes a
// module in one exec and imports it in the next, and a detached server on
// loopback answers a later exec.
func TestSandboxDefaultImage(t *testing.T) {
	root, _ := testRoot(t)
	_, ref, err := images.OpenIndex(filepath.Join(sysRoot(), "images")).Default()
	if err != nil {
		t.Fatalf("no default image (`make setup` builds it): %v", err)
	}
	for _, mode := range []isolation.Mode{isolation.GVisor, isolation.Seccomp} {
		t.Run(string(mode), func(t *testing.T) {
			e, err := New(root)
			if err != nil {
				t.Fatal(err)
			}
			p := isolation.Default()
			p.Isolation = mode
			p.Seccomp = profile(t, mode)
			ctx := context.Background()
			sb, err := e.Create(ctx, &engine.SandboxSpec{ID: "default-" + string(mode), Image: ref.ID, Policy: p, Env: []string{"PYTHONPATH=/tmp"}})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := sb.Destroy(ctx); err != nil {
					t.Error(err)
				}
				if left := leftovers(t, e, sb.ID()); len(left) > 0 {
					t.Errorf("left: %v", left)
				}
			}()
			py := func(code string) string {
				var out, errb strings.Builder
				x, err := sb.Exec(ctx, &engine.Process{Argv: []string{"python3", "-c", code}, Stdout: &out, Stderr: &errb, Timeout: 30 * time.Second})
				if err != nil || x.Code != 0 {
					t.Fatalf("python3 -c %q: %+v, %v: %s", code, x, err, errb.String())
				}
				return out.String()
			}
			py("open('/tmp/mod.py', 'w').write('X = 42\\n')")
			if got := py("import mod; print(mod.X)"); got != "42\n" {
				t.Fatalf("import of the module written before: %q", got)
			}
			py("open('/tmp/index.html', 'w').write('from the server')")
			if _, err := sb.Exec(ctx, &engine.Process{Argv: []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/tmp"}, Detach: true}); err != nil {
				t.Fatal(err)
			}
			got := py(`
import time, urllib.request
for _ in range(100):
    try:
        print(urllib.request.urlopen("http://127.0.0.1:8000/index.html", timeout=2).read().decode()); break
    except OSError:
        time.sleep(0.1)
`)
			if got != "from the server\n" {
				t.Fatalf("the detached server answered %q", got)
			}
		})
	}
}

// gvisorSandbox creates a gVisor sandbox under the default profile, which
// is destroyed, and checked freed, when the test ends.
func gvisorSandbox(t *testing.T, root string, image digest.Digest, id string, opts ...Option) engine.Sandbox {
	t.Helper()
	e, err := New(root, opts...)
	if err != nil {
		t.Fatal(err)
	}
	p := isolation.Default()
	p.Seccomp = profile(t, isolation.GVisor)
	sb, err := e.Create(context.Background(), &engine.SandboxSpec{ID: id, Image: image, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Error(err)
		}
		if left := leftovers(t, e, id); len(left) > 0 {
			t.Errorf("left: %v", left)
		}
	})
	return sb
}

// A gVisor sandbox's execs go through its control socket, with the
// identity and limits runsc exec would give them; a program that cannot
// start gets a shell's code and the sandbox's reason on its stderr.
func TestSandboxControlExec(t *testing.T) {
	root, image := testRoot(t)
	p := isolation.Default()
	p.Seccomp = profile(t, isolation.GVisor)
	sb := gvisorSandbox(t, root, image, "control")
	if c := sb.(*sandbox).st.Control; c == "" {
		t.Fatal("no control socket recorded: execs fall back to runsc exec")
	}
	var out, errb strings.Builder
	x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"sh", "-c", "id -u; grep -E '^(Cap(Eff|Prm|Bnd)|NoNewPrivs|Seccomp):' /proc/self/status; echo oops >&2; exit 7"}, Stdout: &out, Stderr: &errb, Timeout: 10 * time.Second})
	if err != nil || x.Code != 7 {
		t.Fatalf("exec: %+v, %v (stderr %q)", x, err, errb.String())
	}
	for _, want := range []string{"65534\n", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("exec's identity: want %q in\n%s", want, out.String())
		}
	}
	if errb.String() != "oops\n" {
		t.Errorf("stderr %q", errb.String())
	}
	errb.Reset()
	x, err = sb.Exec(context.Background(), &engine.Process{Argv: []string{"no-such-program"}, Stderr: &errb, Timeout: 10 * time.Second})
	if err != nil || x.Code != 127 || !strings.Contains(errb.String(), `cannot start "no-such-program"`) {
		t.Fatalf("missing program: %+v, %v, stderr %q", x, err, errb.String())
	}
	// WithRuntimeExec keeps a sandbox on runsc exec.
	re, err := New(root, WithRuntimeExec())
	if err != nil {
		t.Fatal(err)
	}
	rsb, err := re.Create(context.Background(), &engine.SandboxSpec{ID: "control-off", Image: image, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	if c := rsb.(*sandbox).st.Control; c != "" {
		t.Errorf("WithRuntimeExec: control socket %q recorded", c)
	}
	if err := rsb.Destroy(context.Background()); err != nil {
		t.Error(err)
	}
	// One writer for both streams gets one descriptor: the order holds.
	var both strings.Builder
	x, err = sb.Exec(context.Background(), &engine.Process{Argv: []string{"sh", "-c", "echo 1; echo 2 >&2; echo 3"}, Stdout: &both, Stderr: &both, Timeout: 10 * time.Second})
	if err != nil || x.Code != 0 || both.String() != "1\n2\n3\n" {
		t.Fatalf("joined streams: %+v, %v, %q", x, err, both.String())
	}
}

// TestSandboxAgentExec: execs forked by the agent run as the control
// socket's do, the agent is started again once killed or once it breaks
// the protocol, and only the sentry's exit status counts.
// An exec that waits for Served goes through the agent even when it was
// made before its supervisor served it, as a pool's prime is; Served says
// false until then.
func TestSandboxAgentServed(t *testing.T) {
	root, image := testRoot(t)
	sb := gvisorSandbox(t, root, image, "served")
	w := sb.(engine.Awaiter)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if w.Served(ctx) {
		t.Fatal("Served before anything serves the agent")
	}
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		served <- sb.(engine.Server).Serve(sctx)
	}()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !w.Served(ctx) {
		t.Fatal("not Served once the supervisor serves the agent")
	}
	var out strings.Builder
	x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"sh", "-c", `tr '\0' ' ' </proc/$PPID/cmdline`}, Stdout: &out, Timeout: 20 * time.Second})
	if err != nil || x.Code != 0 || out.String() != agentPath+" " {
		t.Fatalf("exec once Served: %+v, %v, parent %q; want the agent's child", x, err, out.String())
	}
}

func TestSandboxAgentExec(t *testing.T) {
	sb := agentSandbox(t, "agent")
	run := func(stdin io.Reader, script string) (engine.Exit, string, string) {
		t.Helper()
		var out, errb strings.Builder
		x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"sh", "-c", script}, Stdin: stdin, Stdout: &out, Stderr: &errb, Timeout: 20 * time.Second})
		if err != nil {
			t.Fatalf("exec %q: %v", script, err)
		}
		return x, out.String(), errb.String()
	}
	parent := `tr '\0' ' ' </proc/$PPID/cmdline; echo`
	x, out, errs := run(nil, parent+"; id -u; grep -E '^(Cap(Eff|Prm|Bnd)|NoNewPrivs|Seccomp):' /proc/self/status; test -p /dev/stdin || echo stdin-not-a-pipe; echo oops >&2; exit 7")
	if x.Code != 7 || errs != "oops\n" {
		t.Fatalf("exec: %+v, stderr %q", x, errs)
	}
	for _, want := range []string{agentPath + " \n", "65534\n", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(out, want) {
			t.Errorf("exec through the agent: want %q in\n%s", want, out)
		}
	}
	// No stdin: /dev/null, not a pipe.
	if !strings.Contains(out, "stdin-not-a-pipe") {
		t.Errorf("an exec with no stdin got a pipe:\n%s", out)
	}

	// Stdin of several frames arrives whole and in order.
	in := make([]byte, 300<<10)
	rand.Read(in)
	sum := sha256.Sum256(in)
	if x, out, _ := run(bytes.NewReader(in), "test -p /dev/stdin && sha256sum"); x.Code != 0 || !strings.HasPrefix(out, hex.EncodeToString(sum[:])) {
		t.Fatalf("stdin through the agent: %+v, %q", x, out)
	}
	var errb strings.Builder
	x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"no-such-program"}, Stderr: &errb, Timeout: 10 * time.Second})
	if err != nil || x.Code != 127 || !strings.Contains(errb.String(), `cannot start "no-such-program"`) {
		t.Fatalf("missing program: %+v, %v, stderr %q", x, err, errb.String())
	}

	// The exit status is the sentry's, whatever the agent is made to say:
	// an exec that kills its agent exits 5, or, where the sandbox's init
	// reaped it before the sentry was asked, its status is reported lost.
	// The next exec gets a new agent.
	agentPid := func() string {
		t.Helper()
		_, out, _ := run(nil, parent+"; echo $PPID")
		pid, ok := strings.CutPrefix(out, agentPath+" \n")
		if !ok {
			t.Fatalf("an exec's parent is %q, not the agent", out)
		}
		return strings.TrimSpace(pid)
	}
	// gone waits until the sentry no longer lists pid: a SIGKILL lands
	// when the agent next enters the sentry, not at once.
	gone := func(pid string) {
		t.Helper()
		c := sb.(*sandbox).control()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			ps, err := c.Processes(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(ps, func(p proctree.Proc) bool { return strconv.Itoa(p.Pid) == pid }) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("agent %s still listed 10s after it was killed", pid)
			}
		}
	}
	first := agentPid()
	x, err = sb.Exec(context.Background(), &engine.Process{Argv: []string{"sh", "-c", "kill -9 $PPID; exit 5"}, Timeout: 10 * time.Second})
	if !(err == nil && x.Code == 5) && !errdefs.IsDataLoss(err) {
		t.Fatalf("an exec that killed its agent: %+v, %v", x, err)
	}
	gone(first)
	second := agentPid()
	if second == first {
		t.Fatalf("the killed agent (pid %s) still takes execs", first)
	}
	// Frames forged on the agent's stdout break the protocol: the relay
	// kills the agent, and the next exec gets a new one.
	if x, _, _ := run(nil, "printf 'Zforged' >/proc/$PPID/fd/1; sleep 1; exit 6"); x.Code != 6 {
		t.Fatalf("an exec that forged a frame: %+v", x)
	}
	gone(second)
	if third := agentPid(); third == second {
		t.Fatalf("the agent that broke the protocol (pid %s) still takes execs", second)
	}
}

// A client that stops reading an exec's output stalls that exec alone:
// another exec of the sandbox runs meanwhile, and the stalled one's
// output arrives whole once its client reads again.
func TestSandboxAgentStalledClient(t *testing.T) {
	sb := agentSandbox(t, "stalled")
	const size = 4 << 20 // many windows and pipes' worth
	pr, pw := io.Pipe()
	stalled := make(chan error, 1)
	go func() {
		x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"head", "-c", strconv.Itoa(size), "/dev/zero"}, Stdout: pw, Timeout: 2 * time.Minute})
		if err == nil && x.Code != 0 {
			err = fmt.Errorf("exit %d", x.Code)
		}
		pw.CloseWithError(err)
		stalled <- err
	}()
	// Let the stalled exec fill its window and pipes.
	if _, err := io.ReadFull(pr, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	other := make(chan error, 1)
	go func() {
		var out strings.Builder
		x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"echo", "other"}, Stdout: &out, Timeout: time.Minute})
		if err == nil && (x.Code != 0 || out.String() != "other\n") {
			err = fmt.Errorf("exit %d, stdout %q", x.Code, out.String())
		}
		other <- err
	}()
	select {
	case err := <-other:
		if err != nil {
			t.Fatalf("the other exec: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the other exec did not end in 30s while one client stopped reading: its output waits behind the stalled one's")
	}
	n, err := io.Copy(io.Discard, pr)
	if err != nil || n != size-1 {
		t.Fatalf("the stalled exec's output: %d bytes, %v; want %d", n+1, err, size)
	}
	if err := <-stalled; err != nil {
		t.Fatal(err)
	}
}

// What an exec wrote before it exited reaches its client even when the
// agent relays it only after the output grace (here: the exec stops its
// agent for longer than that, as a loaded machine may keep it from
// running), and a process it left holding its stdout delays it by no
// more than the grace and a drain.
func TestSandboxAgentOutputDrained(t *testing.T) {
	sb := agentSandbox(t, "drained")
	run := func(script string) (engine.Exit, string, error) {
		t.Helper()
		var out strings.Builder
		x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &out, Timeout: time.Minute})
		return x, out.String(), err
	}
	// The agent must have said it started the exec before it is stopped
	// (TestSandboxAgentStopped): the exec waits a little, and a stop that
	// came first anyway is tried again.
	slow := `P=$PPID; sleep 0.5; (sleep 4; kill -CONT $P) </dev/null >/dev/null 2>&1 & ` +
		`echo before; kill -STOP $P; head -c 10000 /dev/zero | tr '\0' x; echo; echo after`
	for try := 1; ; try++ {
		x, out, err := run(slow)
		if errors.Is(err, errdefs.ErrDataLoss) && try < 3 {
			t.Logf("try %d: %v", try, err)
			continue
		}
		want := "before\n" + strings.Repeat("x", 10000) + "\nafter\n"
		if err != nil || x.Code != 0 || out != want {
			t.Fatalf("an exec relayed after the grace: %+v, %v, %d bytes of output (%q…); want all %d", x, err, len(out), out[:min(len(out), 40)], len(want))
		}
		break
	}
	x, out, err := run("echo a; sleep 600 & echo b")
	if err != nil || x.Code != 0 || out != "a\nb\n" {
		t.Fatalf("an exec that left its stdout held: %+v, %v, %q", x, err, out)
	}
}

// An exec cancelled before the relay's answer came is killed, as one
// cancelled after its start is: its program is not left running unseen.
func TestSandboxAgentCancelledAtStart(t *testing.T) {
	sb := agentSandbox(t, "cancelled")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	x, err := sb.Exec(ctx, &engine.Process{Argv: []string{"sleep", "607"}, Timeout: time.Minute})
	if err != nil || !x.Killed {
		t.Fatalf("an exec cancelled at its start: %+v, %v; want killed", x, err)
	}
	var out strings.Builder
	if _, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"ps", "-eo", "args"}, Stdout: &out, Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "sleep 607") {
		t.Fatalf("the cancelled exec's program runs on:\n%s", out.String())
	}
}

// A client that vanishes after the relay's answer without having waited
// for its exec (its airlock process killed) has the exec's program and
// its group killed, as a cancelled exec's are; one that waited leaves
// what its program left in the background alone, as ever.
func TestSandboxAgentClientVanished(t *testing.T) {
	sb := agentSandbox(t, "vanished")
	s := sb.(*sandbox)
	ctx := context.Background()
	pr := s.process
	pr.Args = []string{"sh", "-c", "sleep 608 & exec sleep 609"}
	fds, err := newStdio(&engine.Process{})
	if err != nil {
		t.Fatal(err)
	}
	defer fds.close()
	pid, x, err := s.startAgent(ctx, &pr, fds.child, false)
	fds.closeChild()
	if err != nil {
		t.Fatal(err)
	}
	x.conn.Close() // gone, without a word
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if code, err := s.control().Wait(wctx, pid); err != nil || code != 128+int(syscall.SIGKILL) {
		t.Fatalf("the program of an exec whose client vanished: exit %d, %v; want killed", code, err)
	}
	ps := func() string {
		t.Helper()
		var out strings.Builder
		if _, err := sb.Exec(ctx, &engine.Process{Argv: []string{"ps", "-eo", "args"}, Stdout: &out, Timeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	if out := ps(); strings.Contains(out, "sleep 608") {
		t.Fatalf("its background process runs on:\n%s", out)
	}
	if x, err := sb.Exec(ctx, &engine.Process{Argv: []string{"sh", "-c", "sleep 610 & echo ok"}, Timeout: time.Minute}); err != nil || x.Code != 0 {
		t.Fatalf("exec: %+v, %v", x, err)
	}
	if out := ps(); !strings.Contains(out, "sleep 610") {
		t.Fatalf("a waited exec's background process was killed:\n%s", out)
	}
}

// An agent that died before the relay knew it is replaced as the spawn
// is written, and the exec's output still reaches its client.
func TestSandboxAgentReplacedAtSpawn(t *testing.T) {
	root, image := testRoot(t)
	sb := gvisorSandbox(t, root, image, "respawn")
	s := sb.(*sandbox)
	if !s.st.Agent {
		t.Fatalf("no agent bound; is %s installed (`make setup`)?", AgentPath(root))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &relay{s: s}
	defer r.stop()
	old, err := r.agent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The next spawn cannot be written, and nothing has marked the agent
	// dead yet.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	pr.Close()
	pw.Close()
	old.wmu.Lock()
	old.w = pw
	old.wmu.Unlock()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(s.bundle, agentSocket), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			go r.serve(ctx, conn)
		}
	}()
	var out, errb strings.Builder
	x, err := sb.Exec(ctx, &engine.Process{Argv: []string{"sh", "-c", "echo out; echo err >&2"}, Stdout: &out, Stderr: &errb, Timeout: 20 * time.Second})
	if err != nil || x.Code != 0 || out.String() != "out\n" || errb.String() != "err\n" {
		t.Fatalf("exec: %+v, %v, stdout %q, stderr %q; want 0, \"out\\n\", \"err\\n\"", x, err, out.String(), errb.String())
	}
	r.mu.Lock()
	now := r.a
	r.mu.Unlock()
	if now == old {
		t.Fatal("the exec went to the control socket, not through a new agent")
	}
}

// An agent that a program of the sandbox stopped takes no exec: the relay
// gives up on it within its deadline, kills it, and says so in time for
// the exec to start through the control socket; the exec after gets a new
// agent.
func TestSandboxAgentStopped(t *testing.T) {
	sb := agentSandbox(t, "stopped")
	run := func(script string) (engine.Exit, string, error) {
		t.Helper()
		var out, errb strings.Builder
		x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb, Timeout: time.Minute})
		return x, out.String(), err
	}
	parent := `tr '\0' ' ' </proc/$PPID/cmdline; echo; echo $PPID`
	x, out, err := run(parent)
	stopped, ok := strings.CutPrefix(out, agentPath+" \n")
	if err != nil || x.Code != 0 || !ok {
		t.Fatalf("exec: %+v, %v, %q; want it forked by the agent", x, err, out)
	}
	// The agent is stopped once the exec that stops it has ended and its
	// output was relayed (an agent stopped sooner is caught by the drain
	// of that output: TestSandboxAgentOutputDrained). The stopper ends
	// once every thread of the agent is in the stop: one still running
	// could read the next exec first (on a loaded host it has), and that
	// exec is then the agent's, never started again (ReadNotAnswered).
	x, out, err = run("echo $$; P=$PPID; (sleep 1; kill -STOP $P; while grep -q '^State:[[:space:]]*[^T[:space:]]' /proc/$P/task/*/status; do sleep 0.05; done) </dev/null >/dev/null 2>&1 &")
	pgid, aerr := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || x.Code != 0 || aerr != nil {
		t.Fatalf("stopping the agent: %+v, %v, %q", x, err, out)
	}
	c := sb.(*sandbox).control()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ps, err := c.Processes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(ps, func(p proctree.Proc) bool { return p.Pgid == pgid }) {
			break // the stopper is done
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent was not stopped in 30s")
		}
	}
	x, out, err = run("echo through; " + parent)
	if err != nil || x.Code != 0 || !strings.HasPrefix(out, "through\n") {
		t.Fatalf("exec while the agent is stopped: %+v, %v, %q; want it started through the control socket", x, err, out)
	}
	if strings.Contains(out, agentPath) {
		t.Fatalf("exec while the agent is stopped: its parent is an agent:\n%s", out)
	}
	x, out, err = run(parent)
	again, ok := strings.CutPrefix(out, agentPath+" \n")
	if err != nil || x.Code != 0 || !ok || again == stopped {
		t.Fatalf("the exec after: %+v, %v, %q; want it forked by a new agent (the stopped one was %s)", x, err, out, strings.TrimSpace(stopped))
	}
}

// An exec the agent read but never answered may be running: it is not
// started again through the control socket, and its status is reported
// lost. The agent here says it is ready, reads part of the spawn and
// hangs; the ones started after it fail at once. Run with an argument it
// is not the exec agent (the init starts `/.airlock-agent spawner` at
// boot, before any exec agent) and exits, as a missing spawner would.
func TestSandboxAgentReadNotAnswered(t *testing.T) {
	sb := fakeAgentSandbox(t, "unanswered", "[ $# -gt 0 ] && exit 2\n"+
		"[ -e /tmp/agent-hung ] && exit 1\n"+
		"touch /tmp/agent-hung\n"+
		readyPrintf+"\n"+
		"head -c 9 >/dev/null\n"+
		"exec sleep 600\n")
	serveAgent(t, sb)
	run := func(script string) (engine.Exit, error) {
		var errb strings.Builder
		x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"sh", "-c", script}, Stderr: &errb, Timeout: time.Minute})
		if errb.Len() > 0 {
			t.Logf("stderr of %q: %s", script, errb.String())
		}
		return x, err
	}
	x, err := run("touch /tmp/ran")
	if !errors.Is(err, errdefs.ErrDataLoss) {
		t.Fatalf("exec read by a hung agent: %+v, %v; want ErrDataLoss", x, err)
	}
	if !strings.Contains(err.Error(), "not started again") {
		t.Errorf("the error does not say the exec was not started again: %v", err)
	}
	if x, err := run("test -e /tmp/agent-hung && ! test -e /tmp/ran"); err != nil || x.Code != 0 {
		t.Fatalf("checking through the control socket: %+v, %v; want 0 (the hung agent ran, the exec never did)", x, err)
	}
}

// A detached exec the spawner may have started is never started again:
// the host falls back to `runsc exec` only when the agent is one from
// before the spawner (its ready frame, exit 0). A spawner that takes no
// request is asked again for spawnerWait, then the exec is refused: a
// program runsc exec started would not survive a pause. The fake agent
// here, as `spawn -- ARGV`, does what /tmp/mode says.
func TestSandboxSpawnNotStartedTwice(t *testing.T) {
	// No relay is served: the spawn client starts through the control
	// socket, and no exec agent runs the fake.
	sb := fakeAgentSandbox(t, "spawn-once", "[ \"$1\" = spawn ] || exit 2\n"+
		"shift 2\n"+
		"case $(cat /tmp/mode) in\n"+
		"older) "+readyPrintf+"; exit 0;;\n"+
		"unreachable) echo >> /tmp/asked; exit "+strconv.Itoa(agent.SpawnUnreachable)+";;\n"+
		"late) [ $(wc -l < /tmp/asked) -ge 3 ] || { echo >> /tmp/asked; exit "+strconv.Itoa(agent.SpawnUnreachable)+"; };;\n"+
		"esac\n"+
		"\"$@\"\n"+
		"case $(cat /tmp/mode) in\n"+
		"silent) exit 0;;\n"+
		"unanswered) echo 'airlock: the spawner read it but did not answer' >&2; exit "+strconv.Itoa(agent.SpawnUnanswered)+";;\n"+
		"esac\n"+
		"printf '"+agent.Spawned+"1\\n'\n"+
		"exit 0\n")
	runs := func(mode string) string {
		t.Helper()
		var out strings.Builder
		x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"sh", "-c", "cat /tmp/ran." + mode + " 2>/dev/null"}, Stdout: &out, Timeout: time.Minute})
		if err != nil || x.Code > 1 {
			t.Fatalf("reading the runs: %+v, %v", x, err)
		}
		return out.String()
	}
	for _, c := range []struct {
		mode string
		want error // nil: started once
	}{
		{"silent", errdefs.ErrDataLoss},                // exit 0 without the spawner's word
		{"unanswered", errdefs.ErrDataLoss},            // the spawner read it and never answered
		{"older", nil},                                 // an agent that knows no spawn: runsc exec
		{"late", nil},                                  // a spawner that starts listening late
		{"unreachable", errdefs.ErrFailedPrecondition}, // no spawner
	} {
		t.Run(c.mode, func(t *testing.T) {
			if x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"sh", "-c", "echo " + c.mode + " > /tmp/mode; rm -f /tmp/asked; touch /tmp/asked"}, Timeout: time.Minute}); err != nil || x.Code != 0 {
				t.Fatalf("setting the mode: %+v, %v", x, err)
			}
			_, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"sh", "-c", "echo x >> /tmp/ran." + c.mode}, Detach: true})
			switch {
			case c.want == nil && err != nil:
				t.Fatalf("detached exec: %v; want it started", err)
			case c.want == errdefs.ErrDataLoss && (!errors.Is(err, c.want) || !strings.Contains(err.Error(), "not started again")):
				t.Fatalf("detached exec: %v; want ErrDataLoss, not started again", err)
			case c.want == errdefs.ErrFailedPrecondition && (!errors.Is(err, c.want) || !strings.Contains(err.Error(), "would not survive a pause")):
				t.Fatalf("detached exec: %v; want it refused, saying why", err)
			}
			if c.want == errdefs.ErrFailedPrecondition {
				time.Sleep(time.Second)
				if got := runs(c.mode); got != "" {
					t.Fatalf("the refused program ran %d times", strings.Count(got, "x"))
				}
				return
			}
			for deadline := time.Now().Add(10 * time.Second); runs(c.mode) == ""; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the program never ran")
				}
			}
			if got := runs(c.mode); got != "x\n" {
				t.Fatalf("the program ran %d times; want once", strings.Count(got, "x"))
			}
		})
	}
}

// readyPrintf is a shell command that writes an agent's ready frame.
var readyPrintf = fmt.Sprintf("printf 'r\\000\\000\\000\\000\\000\\000\\000\\%03o%s'", len(agent.Version), agent.Version)

// fakeAgentSandbox is a gVisor sandbox whose agent is the shell script
// body, for the init's spawner, the relay's exec agent and the spawn
// client alike.
func fakeAgentSandbox(t *testing.T, id, body string) engine.Sandbox {
	t.Helper()
	root, image := testRoot(t)
	fake := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	sb := gvisorSandbox(t, root, image, id, WithAgent(fake))
	if !sb.(*sandbox).st.Agent {
		t.Fatal("the fake agent was not bound")
	}
	return sb
}
