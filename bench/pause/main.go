// Command pause measures pausing and resuming a long-lived sandbox (oci
// engine, gVisor) whose Python process holds a 100 MiB heap of random
// bytes (the worst case for any compression): the Go API's Pause and
// Resume (runner.Pause, runner.Resume: runsc checkpoint and restore plus
// airlock's records), and the same through `airlock sandbox pause|resume`.
// After each resume the process is checked to be the same one, its heap
// intact.
//
// It runs on a root of its own over setup's store and runsc, with this
// tree's exec agent (the spawner in it is what keeps the process across a
// restore). `make bench-pause` runs it after setup.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/engine/oci"
	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/internal/timing"
	"github.com/airlock-sandbox/airlock/runner"
)

func main() {
	n := flag.Int("n", 10, "pause and resume rounds per face")
	heap := flag.Int("heap-mib", 100, "the Python heap, in MiB")
	flag.Parse()
	if err := run(*n, *heap); err != nil {
		fmt.Fprintf(os.Stderr, "bench-pause: %v\n", err)
		os.Exit(1)
	}
}

// holder keeps heap MiB of random bytes and writes their hash and a
// count to /tmp/heap every 100 ms.
const holder = `
import hashlib, os, sys, time
data = os.urandom(int(sys.argv[1]) << 20)
h, n = hashlib.sha256(data).hexdigest(), 0
while True:
    n += 1
    if n % 10 == 1:
        h = hashlib.sha256(data).hexdigest()
    with open("/tmp/heap.new", "w") as f:
        f.write("%d %s %d" % (os.getpid(), h, n))
    os.rename("/tmp/heap.new", "/tmp/heap")
    time.sleep(0.1)
`

func run(n, heapMiB int) error {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "airlock-bench-pause-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, err := e2etest.Build(tmp, "./cmd/airlock")
	if err != nil {
		return err
	}
	root, err := e2etest.AgentRoot(tmp, e2etest.SysRoot(), "./cmd/airlock-agent")
	if err != nil {
		return err
	}
	defer exec.Command("umount", "-l", filepath.Join(root, "oci", "runsc", "null-netns")).Run()
	cli := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"--root", root}, args...)...).Output()
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("airlock %s: %v: %s", strings.Join(args, " "), err, ee.Stderr)
		}
		return strings.TrimSpace(string(out)), err
	}
	id, err := cli("sandbox", "create", "--engine", "oci", "--isolation", "gvisor", "--memory", "1GiB", "--ttl", "1h")
	if err != nil {
		return err
	}
	defer cli("sandbox", "rm", id)
	if _, err := cli("exec", "--detach", id, "--", "python3", "-c", holder, fmt.Sprint(heapMiB)); err != nil {
		return err
	}
	si, err := runner.ReadSandbox(root, id)
	if err != nil {
		return err
	}
	heapFile := filepath.Join(si.Areas.Tmp, "heap")
	state := func() (pid, hash string, count int, err error) {
		b, err := os.ReadFile(heapFile)
		if err == nil {
			_, err = fmt.Sscanf(string(b), "%s %s %d", &pid, &hash, &count)
		}
		return pid, hash, count, err
	}
	var pid0, hash0 string
	for deadline := time.Now().Add(time.Minute); pid0 == ""; time.Sleep(100 * time.Millisecond) {
		pid0, hash0, _, _ = state()
		if time.Now().After(deadline) {
			return fmt.Errorf("the heap holder never started")
		}
	}
	// moved waits for the count to pass c with the same process and heap.
	moved := func(c int) error {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			pid, hash, count, err := state()
			if err != nil || count <= c {
				continue
			}
			if pid != pid0 || hash != hash0 {
				return fmt.Errorf("after resume: pid %s heap %s, was pid %s heap %s", pid, hash, pid0, hash0)
			}
			return nil
		}
		return fmt.Errorf("the holder did not go on after resume")
	}
	eng, err := oci.New(root)
	if err != nil {
		return err
	}
	rn, err := runner.New(runner.WithRoot(root), runner.WithEngine(eng))
	if err != nil {
		return err
	}
	var apiPause, apiResume, cliPause, cliResume []time.Duration
	var ckptBytes int64
	running, paused := cgroupMemory(id), ""
	fmt.Fprintf(os.Stderr, "%d rounds of each face, a %d MiB heap…\n", n, heapMiB)
	for i := 0; i < n; i++ {
		_, _, c, _ := state()
		start := time.Now()
		if _, err := rn.Pause(ctx, id); err != nil {
			return err
		}
		apiPause = append(apiPause, time.Since(start))
		if i == 0 {
			paused = cgroupMemory(id)
			ents, _ := os.ReadDir(filepath.Join(root, "oci", "checkpoints", id))
			for _, e := range ents {
				if fi, err := e.Info(); err == nil {
					ckptBytes += fi.Size()
				}
			}
		}
		start = time.Now()
		if _, err := rn.Resume(ctx, id); err != nil {
			return err
		}
		apiResume = append(apiResume, time.Since(start))
		if err := moved(c); err != nil {
			return err
		}
		_, _, c, _ = state()
		start = time.Now()
		if _, err := cli("sandbox", "pause", id); err != nil {
			return err
		}
		cliPause = append(cliPause, time.Since(start))
		start = time.Now()
		if _, err := cli("sandbox", "resume", id); err != nil {
			return err
		}
		cliResume = append(cliResume, time.Since(start))
		if err := moved(c); err != nil {
			return err
		}
	}
	timing.Table(os.Stdout, "scenario", []timing.Row{
		{Name: "pause (Go API)", Took: apiPause}, {Name: "resume (Go API)", Took: apiResume},
		{Name: "airlock sandbox pause", Took: cliPause}, {Name: "airlock sandbox resume", Took: cliResume},
	})
	fmt.Printf("checkpoint: %.1f MiB for a %d MiB heap; targets: pause ≤ 150 ms, resume ≤ 250 ms\n", float64(ckptBytes)/(1<<20), heapMiB)
	fmt.Printf("the sandbox's memory cgroup: %s running, %s paused\n", running, paused)
	return nil
}

// cgroupMemory says what sandbox id's memory cgroup holds: its charge and
// its processes.
func cgroupMemory(id string) string {
	for _, d := range []string{"/sys/fs/cgroup/memory/airlock/" + id, "/sys/fs/cgroup/airlock/" + id} {
		usage, err := os.ReadFile(filepath.Join(d, "memory.usage_in_bytes"))
		if err != nil {
			usage, err = os.ReadFile(filepath.Join(d, "memory.current"))
		}
		if err != nil {
			continue
		}
		procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		var bytes int64
		fmt.Sscan(string(usage), &bytes)
		return fmt.Sprintf("%.1f MiB and %d processes", float64(bytes)/(1<<20), len(strings.Fields(string(procs))))
	}
	return "(no memory cgroup)"
}
