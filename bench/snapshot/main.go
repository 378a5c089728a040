// Command snapshot measures a cold start of a numpy-ready Python sandbox
// (oci engine, gVisor) two ways, interleaved: booted (runner.Create, the
// Python program started detached and waited for until it has imported
// numpy) and restored from a template's snapshot of that program
// (runner.Create with SandboxSpec.Snapshot). Both are timed to the same
// point, a numpy-ready Python process in a new sandbox, and again to the
// end of a first job (a host-side file in /tmp the program answers with
// a numpy value, no exec), and the p50 ratio is printed. The engine's own
// steps (its debug log) show where the milliseconds go. Then
// /run_code, from pools of run-code templates beside a cold sandbox per
// request (runcode.go).
//
// It runs on a root of its own over setup's store and runsc, with this
// tree's exec agent (whose spawner keeps the warm program across the
// checkpoint). `make bench-snapshot` runs it after setup.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/engine/oci"
	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/internal/timing"
	"github.com/airlock-sandbox/airlock/runner"
)

var (
	runCodeRounds  *int
	sustainFor     *time.Duration
	sustainClients int
)

func main() {
	n := flag.Int("n", 10, "rounds of each start, interleaved (0: measure /run_code only)")
	sustainFor = flag.Duration("sustain", time.Minute, "how long each side of the sustained /run_code rates runs (0: not measured)")
	runCodeRounds = flag.Int("run-code-n", 30, "rounds of each /run_code request, interleaved (0: measure the starts only)")
	flag.IntVar(&sustainClients, "sustain-clients", 4, "clients posting back to back in the sustained rates")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintf(os.Stderr, "bench-snapshot: %v\n", err)
		os.Exit(1)
	}
}

// warm imports numpy, says it is ready, and answers one job: /tmp/job
// appearing, it reseeds and writes a numpy value to /tmp/out.
const warm = `
import os, random, tempfile, time
import numpy
open(os.environ["AIRLOCK_READY_FILE"], "w").close()
while not os.path.exists("/tmp/job"):
    time.sleep(0.001)
random.seed(); numpy.random.seed(); tempfile._name_sequence = None
with open("/tmp/out.new", "w") as f:
    f.write(repr(numpy.random.random()))
os.rename("/tmp/out.new", "/tmp/out")
while True:
    time.sleep(3600)
`

// steps collects the engine's "sandbox created" step lists, by sandbox.
type steps struct {
	mu   sync.Mutex
	byID map[string]string
}

func (s *steps) Enabled(context.Context, slog.Level) bool { return true }
func (s *steps) WithAttrs([]slog.Attr) slog.Handler       { return s }
func (s *steps) WithGroup(string) slog.Handler            { return s }
func (s *steps) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "sandbox created" {
		return nil
	}
	var id, st string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "sandbox_id":
			id = a.Value.String()
		case "steps":
			st = a.Value.String()
		}
		return true
	})
	if st != "" {
		s.mu.Lock()
		s.byID[id] = st
		s.mu.Unlock()
	}
	return nil
}

func run(n int) error {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "airlock-bench-snapshot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	root, err := e2etest.AgentRoot(tmp, e2etest.SysRoot(), "./cmd/airlock-agent")
	if err != nil {
		return err
	}
	defer exec.Command("umount", "-l", filepath.Join(root, "oci", "runsc", "null-netns")).Run()
	st := &steps{byID: map[string]string{}}
	eng, err := oci.New(root, oci.WithLogger(slog.New(st)))
	if err != nil {
		return err
	}
	rn, err := runner.New(runner.WithRoot(root), runner.WithEngine(eng))
	if err != nil {
		return err
	}
	if n == 0 {
		return benchRunCode(root, tmp, *runCodeRounds)
	}
	spec := runner.SandboxSpec{TTL: 10 * time.Minute}
	argv := []string{"python3", "-c", warm}
	fmt.Fprintln(os.Stderr, "warming the snapshot…")
	snap, err := rn.Warm(ctx, spec, runner.WarmSpec{Argv: argv, Timeout: time.Minute, Progress: os.Stderr})
	if err != nil {
		return err
	}
	defer rn.RemoveSnapshot(ctx, snap)
	var snapBytes int64
	ents, _ := os.ReadDir(filepath.Join(root, "oci", "snapshots", snap))
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			snapBytes += fi.Size()
		}
	}

	// start makes one numpy-ready sandbox, booted or restored, and
	// returns the time to ready and to a first job's answer.
	start := func(restored bool) (ready, answered time.Duration, id string, err error) {
		s := spec
		if restored {
			s.Snapshot = snap
		}
		begin := time.Now()
		sb, err := rn.Create(ctx, s)
		if err != nil {
			return 0, 0, "", err
		}
		id = sb.ID()
		defer rn.Destroy(context.WithoutCancel(ctx), id)
		si, err := runner.ReadSandbox(root, id)
		if err != nil {
			return 0, 0, id, err
		}
		tmpDir := si.Areas.Tmp
		if !restored {
			res, err := sb.Exec(ctx, runner.ExecSpec{Argv: argv, Env: []string{runner.ReadyEnv + "=/tmp/" + runner.ReadyFile}, Detach: true})
			if err != nil || res.ExitCode != 0 {
				return 0, 0, id, fmt.Errorf("starting the program: exit %d, %v", res.ExitCode, err)
			}
		}
		if !restored {
			// A restored program is ready as it restores: its ready
			// file is in the warming sandbox's /tmp, not this one's.
			if err := await(filepath.Join(tmpDir, runner.ReadyFile)); err != nil {
				return 0, 0, id, err
			}
		}
		ready = time.Since(begin)
		if err := os.WriteFile(filepath.Join(tmpDir, "job"), []byte("go"), 0o644); err != nil {
			return 0, 0, id, err
		}
		if err := await(filepath.Join(tmpDir, "out")); err != nil {
			return 0, 0, id, err
		}
		return ready, time.Since(begin), id, nil
	}

	var bootReady, bootJob, snapReady, snapJob []time.Duration
	var bootIDs, snapIDs []string
	fmt.Fprintf(os.Stderr, "%d rounds of each, interleaved…\n", n)
	for i := 0; i < n; i++ {
		for _, restored := range []bool{i%2 == 0, i%2 != 0} {
			r, j, id, err := start(restored)
			if err != nil {
				return err
			}
			if restored {
				snapReady, snapJob, snapIDs = append(snapReady, r), append(snapJob, j), append(snapIDs, id)
			} else {
				bootReady, bootJob, bootIDs = append(bootReady, r), append(bootJob, j), append(bootIDs, id)
			}
		}
	}
	timing.Table(os.Stdout, "numpy-ready Python sandbox", []timing.Row{
		{Name: "booted: create + start + import numpy", Took: bootReady}, {Name: "restored from the snapshot", Took: snapReady},
		{Name: "booted, to a first job's answer", Took: bootJob}, {Name: "restored, to a first job's answer", Took: snapJob},
	})
	fmt.Printf("p50 ratio, restored / booted: %.2f to ready, %.2f to a first answer (target ≤ 0.35)\n",
		ratio(snapReady, bootReady), ratio(snapJob, bootJob))
	fmt.Printf("snapshot: %.1f MiB\n", float64(snapBytes)/(1<<20))
	fmt.Println("engine steps (median sandbox of each):")
	for _, c := range []struct {
		name string
		ids  []string
	}{{"booted", bootIDs}, {"restored", snapIDs}} {
		fmt.Printf("  %s: %s\n", c.name, st.median(c.ids))
	}
	if *runCodeRounds == 0 {
		return nil
	}
	return benchRunCode(root, tmp, *runCodeRounds)
}

// await polls for path, a file in a sandbox's /tmp area.
func await(path string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s never appeared", path)
		}
		time.Sleep(time.Millisecond)
	}
}

func ratio(a, b []time.Duration) float64 {
	return float64(timing.Percentile(a, 50)) / float64(timing.Percentile(b, 50))
}

// median returns the engine's steps of the sandbox whose steps' total is
// the median of ids'.
func (s *steps) median(ids []string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []string
	for _, id := range ids {
		if v, ok := s.byID[id]; ok {
			all = append(all, v)
		}
	}
	if len(all) == 0 {
		return "(none logged)"
	}
	sort.Slice(all, func(i, j int) bool { return total(all[i]) < total(all[j]) })
	return all[len(all)/2]
}

// total sums a step list's milliseconds ("a 1.0ms, b 2.5ms").
func total(steps string) float64 {
	var sum float64
	for _, part := range strings.Split(steps, ", ") {
		f := strings.Fields(part)
		if len(f) == 0 {
			continue
		}
		var ms float64
		fmt.Sscanf(strings.TrimSuffix(f[len(f)-1], "ms"), "%g", &ms)
		sum += ms
	}
	return sum
}
