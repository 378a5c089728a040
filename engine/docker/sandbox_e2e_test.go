//go:build e2e

package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/imagetest"
	"github.com/airlock-sandbox/airlock/isolation"
)

// Run: flock /tmp/airlock-e2e.lock go test -count=1 -tags e2e -run TestSandbox -v ./engine/docker/

var (
	imagesOnce           sync.Once
	busyboxID, defaultID digest.Digest
	imagesErr            error
)

// testImages loads the busybox test image into dockerd and finds the
// default image setup built.
func testImages(t *testing.T, e *Engine) (busybox, def digest.Digest) {
	t.Helper()
	imagesOnce.Do(func() {
		dir := t.TempDir()
		if imagesErr = imagetest.BusyboxLayout(dir); imagesErr != nil {
			return
		}
		idx, err := layout.ImageIndexFromPath(dir)
		if err != nil {
			imagesErr = err
			return
		}
		m, err := idx.IndexManifest()
		if err != nil {
			imagesErr = err
			return
		}
		img, err := idx.Image(m.Manifests[0].Digest)
		if err != nil {
			imagesErr = err
			return
		}
		cfg, err := img.ConfigName()
		if err != nil {
			imagesErr = err
			return
		}
		busyboxID = digest.Digest(cfg.String())
		tag, _ := name.NewTag("airlock-e2e/busybox:" + cfg.Hex[:12])
		if imagesErr = e.Load(context.Background(), img, busyboxID, tag); imagesErr != nil {
			return
		}
		root := os.Getenv("AIRLOCK_ROOT")
		if root == "" {
			root = "/var/lib/airlock"
		}
		b, err := os.ReadFile(filepath.Join(root, "images", "default.lock"))
		if err != nil {
			imagesErr = fmt.Errorf("no default image (run `make setup`): %w", err)
			return
		}
		var lock struct{ Ref string }
		if imagesErr = json.Unmarshal(b, &lock); imagesErr != nil {
			return
		}
		_, d, _ := strings.Cut(lock.Ref, "@")
		defaultID = digest.Digest(d)
	})
	if imagesErr != nil {
		t.Fatal(imagesErr)
	}
	return busyboxID, defaultID
}

func newTestEngine(t *testing.T) *Engine {
	t.Helper()
	e, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// testPolicy is fakeJob's policy (the default seccomp profile of the
// mode) with room for slow hosts.
func testPolicy(t *testing.T, m isolation.Mode) isolation.Policy {
	t.Helper()
	p := fakeJob(t, m).Policy
	p.Limits.Timeout = 2 * time.Minute
	return p
}

func newID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

// create makes a sandbox that the test destroys at its end.
func create(t *testing.T, e *Engine, img digest.Digest, m isolation.Mode) engine.Sandbox {
	t.Helper()
	ctx := context.Background()
	spec := &engine.SandboxSpec{ID: newID(), Image: img, Policy: testPolicy(t, m), Owner: "e2e",
		Deadline: time.Now().Add(time.Hour), Workdir: "/tmp", Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SANDBOX_VAR=1"}}
	if err := e.Check(ctx, spec); err != nil {
		t.Fatal(err)
	}
	sb, err := e.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return sb
}

type result struct {
	exit           engine.Exit
	stdout, stderr string
}

func run(t *testing.T, sb engine.Sandbox, p engine.Process) result {
	t.Helper()
	var out, errb bytes.Buffer
	p.Stdout, p.Stderr = &out, &errb
	exit, err := sb.Exec(context.Background(), &p)
	if err != nil {
		t.Fatalf("exec %q: %v", p.Argv, err)
	}
	return result{exit, out.String(), errb.String()}
}

func sh(script string) engine.Process { return engine.Process{Argv: []string{"sh", "-c", script}} }

func modes(t *testing.T, f func(t *testing.T, e *Engine, m isolation.Mode)) {
	e := newTestEngine(t)
	for _, m := range []isolation.Mode{isolation.GVisor, isolation.Seccomp} {
		t.Run(string(m), func(t *testing.T) { f(t, e, m) })
	}
}

func TestSandboxExec(t *testing.T) {
	modes(t, func(t *testing.T, e *Engine, m isolation.Mode) {
		bb, _ := testImages(t, e)
		sb := create(t, e, bb, m)

		t.Run("echo", func(t *testing.T) {
			for i := range 20 {
				r := run(t, sb, engine.Process{Argv: []string{"echo", fmt.Sprint("hello ", i)}})
				if r.stdout != fmt.Sprintf("hello %d\n", i) || r.stderr != "" || r.exit.Code != 0 {
					t.Fatalf("exec %d: %+v", i, r)
				}
			}
		})
		t.Run("state", func(t *testing.T) {
			run(t, sb, sh("echo kept > /tmp/state"))
			if r := run(t, sb, engine.Process{Argv: []string{"cat", "/tmp/state"}}); r.stdout != "kept\n" {
				t.Fatalf("/tmp lost between execs: %+v", r)
			}
		})
		t.Run("env-workdir", func(t *testing.T) {
			r := run(t, sb, engine.Process{Argv: []string{"sh", "-c", "echo $SANDBOX_VAR $MINE; pwd"}, Env: []string{"MINE=x"}, Workdir: "/bin"})
			if r.stdout != "1 x\n/bin\n" {
				t.Fatalf("got %q", r.stdout)
			}
			if r := run(t, sb, sh("echo ${MINE-unset}; pwd")); r.stdout != "unset\n/tmp\n" {
				t.Fatalf("one exec's env or workdir reached the next: %q", r.stdout)
			}
		})
		t.Run("stdin", func(t *testing.T) {
			p := engine.Process{Argv: []string{"wc", "-c"}, Stdin: strings.NewReader(strings.Repeat("a", 100000))}
			if r := run(t, sb, p); strings.TrimSpace(r.stdout) != "100000" {
				t.Fatalf("got %+v", r)
			}
			if r := run(t, sb, engine.Process{Argv: []string{"cat"}}); r.stdout != "" || r.exit.Code != 0 {
				t.Fatalf("closed stdin: %+v", r)
			}
		})
		t.Run("exit-codes", func(t *testing.T) {
			for script, want := range map[string]int{"exit 3": 3, "kill -9 $$": 137, "kill -15 $$": 143, "true": 0} {
				if r := run(t, sb, sh(script)); r.exit.Code != want || r.exit.TimedOut || r.exit.OOMKilled {
					t.Errorf("%s: %+v, want %d", script, r.exit, want)
				}
			}
			r := run(t, sb, engine.Process{Argv: []string{"no-such-program"}})
			if r.exit.Code != 127 || !strings.Contains(r.stderr, "no-such-program") {
				t.Errorf("missing program: %+v", r)
			}
		})
		t.Run("identity", func(t *testing.T) {
			r := run(t, sb, sh("id -u; id -g; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs)' /proc/self/status"))
			want := "65534\n65534\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n"
			if r.stdout != want {
				t.Fatalf("exec identity:\n%s\nwant:\n%s", r.stdout, want)
			}
		})
		t.Run("timeout", func(t *testing.T) {
			p := sh("sleep 100 & sleep 100")
			p.Timeout = time.Second
			start := time.Now()
			r := run(t, sb, p)
			if !r.exit.TimedOut || time.Since(start) > 15*time.Second {
				t.Fatalf("not timed out in time: %+v after %v", r.exit, time.Since(start))
			}
			if r := run(t, sb, sh("ps -o pid,comm | grep -w sleep || echo none")); r.stdout != "none\n" {
				t.Fatalf("processes survived the timeout:\n%s", r.stdout)
			}
			if m == isolation.GVisor {
				return // a child that leaves the session escapes under runsc: see killTree
			}
			p = sh("setsid sleep 102 & sleep 103")
			p.Timeout = time.Second
			if r := run(t, sb, p); !r.exit.TimedOut {
				t.Fatalf("setsid: %+v", r.exit)
			}
			if r := run(t, sb, sh("ps -o pid,comm | grep -w sleep || echo none")); r.stdout != "none\n" {
				t.Fatalf("a child that left the session survived the timeout:\n%s", r.stdout)
			}
		})
		t.Run("leftovers-end-with-the-program", func(t *testing.T) {
			start := time.Now()
			r := run(t, sb, sh("sleep 100 & echo started; exit 4"))
			if r.exit.Code != 4 || r.exit.TimedOut || r.stdout != "started\n" || time.Since(start) > 10*time.Second {
				t.Fatalf("program with a background child: %+v after %v", r, time.Since(start))
			}
			if r := run(t, sb, sh("ps -o pid,comm | grep -w sleep || echo none")); r.stdout != "none\n" {
				t.Fatalf("the background child outlived its program:\n%s", r.stdout)
			}
		})
		t.Run("no-zombies", func(t *testing.T) {
			run(t, sb, sh("for i in 1 2 3 4 5; do (true &) ; done"))
			if r := run(t, sb, sh("ps -o stat,comm | grep '^Z' || echo none")); r.stdout != "none\n" {
				t.Fatalf("orphans not reaped:\n%s", r.stdout)
			}
		})
		t.Run("detach", func(t *testing.T) {
			if r := run(t, sb, engine.Process{Argv: []string{"httpd", "-f", "-p", "127.0.0.1:8080", "-h", "/tmp"}, Detach: true}); r.exit.Code != 0 {
				t.Fatalf("detach: %+v", r)
			}
			var r result
			for range 50 {
				if r = run(t, sb, sh("wget -q -O - http://127.0.0.1:8080/state")); r.stdout == "kept\n" {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if r.stdout != "kept\n" {
				t.Fatalf("detached server not reached: %+v", r)
			}
			// A later exec's timeout leaves the detached server alone.
			p := sh("sleep 100")
			p.Timeout = 500 * time.Millisecond
			run(t, sb, p)
			if r := run(t, sb, sh("wget -q -O - http://127.0.0.1:8080/state")); r.stdout != "kept\n" {
				t.Fatalf("detached server died with another exec: %+v", r)
			}
		})
		t.Run("open", func(t *testing.T) {
			e2 := newTestEngine(t)
			sb2, err := e2.Open(context.Background(), sb.ID())
			if err != nil {
				t.Fatal(err)
			}
			if r := run(t, sb2, engine.Process{Argv: []string{"cat", "/tmp/state"}}); r.stdout != "kept\n" {
				t.Fatalf("reopened sandbox: %+v", r)
			}
			if r := run(t, sb2, sh("id -u")); r.stdout != "65534\n" {
				t.Fatalf("reopened sandbox runs as %q", r.stdout)
			}
			if _, err := e2.Open(context.Background(), newID()); !errdefs.IsNotFound(err) {
				t.Fatalf("open of an unknown id: %v", err)
			}
		})
	})
}

// TestSandboxOutlivesCreator creates a sandbox in a child process that then
// exits, and opens it from this one.
func TestSandboxOutlivesCreator(t *testing.T) {
	if os.Getenv("AIRLOCK_SANDBOX_CREATOR") != "" {
		return // in the child, only TestSandboxCreatorChild works
	}
	modes(t, func(t *testing.T, e *Engine, m isolation.Mode) {
		bb, _ := testImages(t, e)
		id := newID()
		cmd := exec.Command(os.Args[0], "-test.run=^TestSandboxCreatorChild$", "-test.v")
		cmd.Env = append(os.Environ(), "AIRLOCK_SANDBOX_CREATOR="+id, "AIRLOCK_SANDBOX_IMAGE="+bb.String(), "AIRLOCK_SANDBOX_MODE="+string(m))
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "created "+id) {
			t.Fatalf("creator: %v\n%s", err, out)
		}
		sb, err := newTestEngine(t).Open(context.Background(), id)
		if err != nil {
			e.Reap(context.Background(), id)
			t.Fatalf("open after the creator exited: %v", err)
		}
		t.Cleanup(func() { sb.Destroy(context.Background()) })
		if r := run(t, sb, engine.Process{Argv: []string{"cat", "/tmp/made"}}); r.stdout != "by the creator\n" {
			t.Fatalf("state from the creator: %+v", r)
		}
	})
}

// TestSandboxCreatorChild is TestSandboxOutlivesCreator's child: it creates
// the sandbox, writes into it and exits without destroying it.
func TestSandboxCreatorChild(t *testing.T) {
	id := os.Getenv("AIRLOCK_SANDBOX_CREATOR")
	if id == "" {
		return // run only as the child
	}
	e := newTestEngine(t)
	m := isolation.Mode(os.Getenv("AIRLOCK_SANDBOX_MODE"))
	spec := &engine.SandboxSpec{ID: id, Image: digest.Digest(os.Getenv("AIRLOCK_SANDBOX_IMAGE")), Policy: testPolicy(t, m),
		Owner: "e2e", Deadline: time.Now().Add(time.Hour), Env: []string{"PATH=/bin"}}
	sb, err := e.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	run(t, sb, sh("echo by the creator > /tmp/made"))
	fmt.Println("created " + id)
}

// TestSandboxExecOOM: under runc an exec the kernel OOM-kills says so, and
// the sandbox stays usable. (Under gVisor the sentry enforces the limit
// itself, and slowly; the host cgroup records no kill.)
func TestSandboxExecOOM(t *testing.T) {
	e := newTestEngine(t)
	bb, _ := testImages(t, e)
	p := testPolicy(t, isolation.Seccomp)
	p.Limits.Memory = 64 << 20
	spec := &engine.SandboxSpec{ID: newID(), Image: bb, Policy: p, Owner: "e2e", Deadline: time.Now().Add(time.Hour), Env: []string{"PATH=/bin"}}
	sb, err := e.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	r := run(t, sb, sh(`x=$(head -c 300000000 /dev/zero | tr "\0" a); echo ${#x}`))
	if r.exit.Code != 137 || !r.exit.OOMKilled {
		t.Fatalf("memory hog: %+v", r.exit)
	}
	if r := run(t, sb, engine.Process{Argv: []string{"echo", "usable"}}); r.stdout != "usable\n" || r.exit.OOMKilled {
		t.Fatalf("after the OOM kill: %+v", r)
	}
}

// TestSandboxTimeoutAtPidsLimit: an exec that fills the pids limit and
// times out leaves nothing running, even when no second exec can start to
// kill it: then the sandbox is killed whole.
func TestSandboxTimeoutAtPidsLimit(t *testing.T) {
	modes(t, func(t *testing.T, e *Engine, m isolation.Mode) {
		bb, _ := testImages(t, e)
		p := testPolicy(t, m)
		p.Limits.Pids = 32
		spec := &engine.SandboxSpec{ID: newID(), Image: bb, Policy: p, Owner: "e2e", Deadline: time.Now().Add(time.Hour), Env: []string{"PATH=/bin"}}
		sb, err := e.Create(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Destroy(context.Background()) })
		bomb := sh("(while :; do sleep 100 & done) 2>/dev/null & exec sleep 1000")
		bomb.Timeout = 2 * time.Second
		exit, err := sb.Exec(context.Background(), &bomb)
		t.Logf("%s: %+v, %v", m, exit, err)
		if err != nil {
			if _, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"true"}}); !errors.Is(err, engine.ErrSandboxLost) {
				t.Fatalf("the timeout could not be enforced, yet the sandbox lives: %v", err)
			}
			return
		}
		if !exit.TimedOut {
			t.Fatalf("not timed out: %+v", exit)
		}
		if r := run(t, sb, sh("ps -o comm | grep -c -w sleep || true")); r.stdout != "0\n" {
			t.Fatalf("sleeps survived: %q", r.stdout)
		}
	})
}

func TestSandboxPython(t *testing.T) {
	modes(t, func(t *testing.T, e *Engine, m isolation.Mode) {
		_, def := testImages(t, e)
		sb := create(t, e, def, m)
		run(t, sb, sh("echo 'X = 42' > /tmp/mod.py"))
		r := run(t, sb, engine.Process{Argv: []string{"python3", "-c", "import sys; sys.path.insert(0, '/tmp'); import mod; print(mod.X)"}})
		if r.stdout != "42\n" {
			t.Fatalf("import: %+v", r)
		}
		srv := engine.Process{Argv: []string{"python3", "-m", "http.server", "--bind", "127.0.0.1", "-d", "/tmp", "8081"}, Detach: true}
		run(t, sb, srv)
		get := engine.Process{Argv: []string{"python3", "-c", `
import time, urllib.request
for _ in range(100):
    try:
        print(urllib.request.urlopen("http://127.0.0.1:8081/mod.py").read().decode(), end="")
        break
    except OSError:
        time.sleep(0.1)
`}}
		if r := run(t, sb, get); r.stdout != "X = 42\n" {
			t.Fatalf("server: %+v", r)
		}
	})
}

func TestSandboxIsolation(t *testing.T) {
	modes(t, func(t *testing.T, e *Engine, m isolation.Mode) {
		_, def := testImages(t, e)
		a, b := create(t, e, def, m), create(t, e, def, m)
		run(t, a, sh("echo a > /tmp/a; echo a > /dev/shm/a"))
		hold := engine.Process{Argv: []string{"python3", "-c", `
import socket, time
s = socket.socket(socket.AF_UNIX); s.bind("\0airlock-e2e"); s.listen()
time.sleep(600)
`}, Detach: true}
		run(t, a, hold)
		// The socket is there in a...
		probe := engine.Process{Argv: []string{"python3", "-c", `
import socket, time
for _ in range(50):
    try:
        socket.socket(socket.AF_UNIX).connect("\0airlock-e2e"); print("connected"); break
    except OSError as e:
        err = e; time.sleep(0.1)
else:
    print(type(err).__name__)
`}}
		if r := run(t, a, probe); r.stdout != "connected\n" {
			t.Fatalf("own abstract socket: %+v", r)
		}
		// ...and not in b.
		if r := run(t, b, probe); r.stdout != "ConnectionRefusedError\n" {
			t.Fatalf("abstract socket crossed sandboxes: %+v", r)
		}
		if r := run(t, b, sh("cat /tmp/a /dev/shm/a 2>&1; ps -eo args 2>/dev/null | grep -c airlock-e2e || ls /proc | grep -c '^[0-9]'")); strings.Contains(r.stdout, "a\n") {
			t.Fatalf("files crossed sandboxes: %q", r.stdout)
		}
		r := run(t, b, engine.Process{Argv: []string{"python3", "-c", "import os; print(sorted(open(f'/proc/{p}/cmdline','rb').read() for p in os.listdir('/proc') if p.isdigit()))"}})
		if strings.Contains(r.stdout, "airlock-e2e") {
			t.Fatalf("b sees a's processes: %s", r.stdout)
		}
	})
}

func containerByID(id string) container.ListOptions {
	return container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelID+"="+id))}
}

func sandboxContainers(t *testing.T, e *Engine, id string) []container.Summary {
	t.Helper()
	list, err := e.cli.ContainerList(context.Background(), containerByID(id))
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// checkFreed fails unless nothing of sandbox id is left on the host.
func checkFreed(t *testing.T, e *Engine, id string) {
	t.Helper()
	if left := sandboxContainers(t, e, id); len(left) > 0 {
		t.Errorf("containers left: %v", left)
	}
	if slices.Contains(cgroup.IDs(), id) {
		t.Errorf("cgroup of %s left", id)
	}
}

func TestSandboxLost(t *testing.T) {
	modes(t, func(t *testing.T, e *Engine, m isolation.Mode) {
		bb, _ := testImages(t, e)
		ctx := context.Background()
		t.Run("docker-kill", func(t *testing.T) {
			sb := create(t, e, bb, m)
			run(t, sb, sh("true"))
			cid := sandboxContainers(t, e, sb.ID())[0].ID
			if err := e.cli.ContainerKill(ctx, cid, "KILL"); err != nil {
				t.Fatal(err)
			}
			if _, err := sb.Exec(ctx, &engine.Process{Argv: []string{"true"}}); !errors.Is(err, engine.ErrSandboxLost) {
				t.Fatalf("exec after docker kill: %v", err)
			}
			if _, err := newTestEngine(t).Open(ctx, sb.ID()); !errors.Is(err, engine.ErrSandboxLost) {
				t.Fatalf("open after docker kill: %v", err)
			}
		})
		t.Run("runtime-kill", func(t *testing.T) {
			sb := create(t, e, bb, m)
			cid := sandboxContainers(t, e, sb.ID())[0].ID
			c, err := e.cli.ContainerInspect(ctx, cid)
			if err != nil {
				t.Fatal(err)
			}
			// Under gVisor the container's pid is the sandbox process.
			done := make(chan error, 1)
			go func() {
				_, err := sb.Exec(ctx, &engine.Process{Argv: []string{"sleep", "30"}})
				done <- err
			}()
			time.Sleep(500 * time.Millisecond)
			if err := syscall.Kill(c.State.Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, engine.ErrSandboxLost) {
					t.Fatalf("exec running while the sandbox was killed: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("an exec running while the sandbox was killed did not return within 15s")
			}
			if _, err := sb.Exec(ctx, &engine.Process{Argv: []string{"true"}}); !errors.Is(err, engine.ErrSandboxLost) {
				t.Fatalf("exec after kill: %v", err)
			}
		})
		t.Run("removed", func(t *testing.T) {
			sb := create(t, e, bb, m)
			cid := sandboxContainers(t, e, sb.ID())[0].ID
			if err := e.cli.ContainerRemove(ctx, cid, container.RemoveOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := sb.Exec(ctx, &engine.Process{Argv: []string{"true"}}); !errors.Is(err, engine.ErrSandboxLost) {
				t.Fatalf("exec after docker rm: %v", err)
			}
		})
	})
}

func TestSandboxDestroy(t *testing.T) {
	modes(t, func(t *testing.T, e *Engine, m isolation.Mode) {
		bb, _ := testImages(t, e)
		ctx := context.Background()
		sb := create(t, e, bb, m)
		run(t, sb, engine.Process{Argv: []string{"sleep", "100"}, Detach: true})
		f, err := e.facts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		logDir := f.sandboxLogDir(sandboxContainers(t, e, sb.ID())[0].ID)
		if _, err := os.Stat(logDir); m == isolation.GVisor && err != nil {
			t.Fatalf("no sandbox log at %s: %v", logDir, err)
		}
		other := newTestEngine(t)
		sb2, err := other.Open(ctx, sb.ID())
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i%2 == 0 {
					errs[i] = sb.Destroy(ctx)
				} else {
					errs[i] = sb2.Destroy(ctx)
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("concurrent destroys: %v", err)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Fatalf("second destroy: %v", err)
		}
		checkFreed(t, e, sb.ID())
		for deadline := time.Now().Add(5 * time.Second); e.procs.held()+other.procs.held() != 0; {
			if time.Now().After(deadline) {
				t.Fatal("a destroyed sandbox's process is still watched")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := os.Stat(logDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("sandbox log %s left: %v", logDir, err)
		}
		if _, err := sb.Exec(ctx, &engine.Process{Argv: []string{"true"}}); !errdefs.IsNotFound(err) {
			t.Fatalf("exec after destroy: %v", err)
		}
		if _, err := other.Open(ctx, sb.ID()); !errdefs.IsNotFound(err) {
			t.Fatalf("open after destroy: %v", err)
		}
	})
}

func TestSandboxReap(t *testing.T) {
	modes(t, func(t *testing.T, e *Engine, m isolation.Mode) {
		bb, _ := testImages(t, e)
		ctx := context.Background()
		sb := create(t, e, bb, m)
		run(t, sb, engine.Process{Argv: []string{"sleep", "100"}, Detach: true})
		left, err := e.Leftovers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(left, sb.ID()) {
			t.Fatalf("leftovers %v lack the live sandbox %s", left, sb.ID())
		}
		if err := e.Reap(ctx, sb.ID()); err != nil {
			t.Fatal(err)
		}
		checkFreed(t, e, sb.ID())
		if _, err := sb.Exec(ctx, &engine.Process{Argv: []string{"true"}}); !errors.Is(err, engine.ErrSandboxLost) {
			t.Fatalf("exec after reap: %v", err)
		}
	})
}

// An exec the runtime does not start is the runtime's failure, reported
// unavailable, never the program's exit 126 with dockerd's error for its
// output; a program that exits 126 still does. The runtime is made to
// fail by hiding its state of the container for one exec: runc and runsc
// then cannot find the container, while dockerd still runs it.
func TestSandboxExecNotStarted(t *testing.T) {
	modes(t, func(t *testing.T, e *Engine, m isolation.Mode) {
		bb, _ := testImages(t, e)
		sb := create(t, e, bb, m)
		if r := run(t, sb, sh("echo ran; exit 126")); r.exit.Code != 126 || r.stdout != "ran\n" {
			t.Fatalf("a program that exits 126: %+v, %q; want 126, %q", r.exit, r.stdout, "ran\n")
		}
		cid := sb.(*sandbox).cid
		var states []string
		for _, pat := range []string{runscStates + "/" + cid + "_sandbox:*.state", runscStates + "/" + cid + "/state.json"} {
			m, _ := filepath.Glob(pat)
			states = append(states, m...)
		}
		if len(states) == 0 {
			t.Fatalf("no runtime state of container %s under %s: the test proves nothing", cid, runscStates)
		}
		restore := func() {
			for _, st := range states {
				os.Rename(st+".hidden", st)
			}
		}
		t.Cleanup(restore)
		for _, st := range states {
			if err := os.Rename(st, st+".hidden"); err != nil {
				t.Fatal(err)
			}
		}
		var out, errb bytes.Buffer
		x, err := sb.Exec(context.Background(), &engine.Process{Argv: []string{"echo", "ran"}, Stdout: &out, Stderr: &errb, Timeout: time.Minute})
		restore()
		if !errdefs.IsUnavailable(err) || out.Len() > 0 || errb.Len() > 0 {
			t.Fatalf("an exec the runtime could not start: %+v, %v, stdout %q, stderr %q; want an unavailable error and no output", x, err, out.String(), errb.String())
		}
		t.Logf("the runtime's failure: %v", err)
		if r := run(t, sb, sh("echo again")); r.exit.Code != 0 || r.stdout != "again\n" {
			t.Fatalf("the exec after: %+v, %q", r.exit, r.stdout)
		}
	})
}

// The gVisor sandbox logs every exec's argv: execs with a large one grow
// its log past the bound, and the engine cuts it after each, so it never
// holds much more than the bound. The end runsc logs after a cut is still
// read as the program's.
func TestSandboxLogBounded(t *testing.T) {
	e := newTestEngine(t)
	e.maxSandboxLog = 4 << 20
	bb, _ := testImages(t, e)
	ctx := context.Background()
	sb := create(t, e, bb, isolation.GVisor)
	cid := sandboxContainers(t, e, sb.ID())[0].ID
	f, err := e.facts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := f.sandboxLogDir(cid)
	// 1.5 MiB in arguments below Linux's 128 KiB each.
	argv := []string{"true"}
	for range 12 {
		argv = append(argv, strings.Repeat("a", 127<<10))
	}
	size := func() (n int64) {
		t.Helper()
		logs, _ := filepath.Glob(filepath.Join(dir, "*.boot.txt"))
		if len(logs) == 0 {
			t.Fatalf("no sandbox log in %s", dir)
		}
		for _, l := range logs {
			fi, err := os.Stat(l)
			if err != nil {
				t.Fatal(err)
			}
			n += fi.Size()
		}
		return n
	}
	// One exec's line is its argv, quoted, and a little more.
	most := e.maxSandboxLog + int64(len(strings.Join(argv, `", "`))) + 64<<10
	for i := range 8 {
		if r := run(t, sb, engine.Process{Argv: argv}); r.exit.Code != 0 {
			t.Fatalf("exec %d: exit %d, stderr %q", i, r.exit.Code, r.stderr)
		}
		if n := size(); n > most {
			t.Fatalf("after exec %d the sandbox log holds %d bytes; want at most %d", i, n, most)
		}
	}
	if r := run(t, sb, sh("exit 3")); r.exit.Code != 3 {
		t.Fatalf("exit 3 after a cut: exit %d, stderr %q", r.exit.Code, r.stderr)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.boot.txt"))
	if b, _ := os.ReadFile(logs[0]); !bytes.HasPrefix(b, []byte("airlock cut this log at ")) {
		t.Fatalf("the sandbox log was never cut: it starts %q", b[:min(len(b), 200)])
	}
	if exited, logged := engine.GVisorExited(dir); exited || !logged {
		t.Fatalf("live sandbox, cut log: exited %v logged %v; want false true", exited, logged)
	}
	// docker kill ends the program through runsc: the sandbox logs its end
	// after the cut's line.
	if err := e.cli.ContainerKill(ctx, cid, "KILL"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	waitCh, errCh := e.cli.ContainerWait(wctx, cid, container.WaitConditionNotRunning)
	select {
	case <-waitCh:
	case err := <-errCh:
		t.Fatal(err)
	}
	if exited, logged := engine.GVisorExited(dir); !exited || !logged {
		t.Fatalf("ended sandbox, cut log: exited %v logged %v; want true true", exited, logged)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	checkFreed(t, e, sb.ID())
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox log %s left: %v", dir, err)
	}
}
