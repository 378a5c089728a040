// Command all is `make bench`: airlock beside `docker run` on the scenarios
// an evaluation harness cares about, interleaved in one run, with a table of
// figures and ratios.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/internal/timing"
)

var (
	n    = flag.Int("n", 20, "runs per scenario for the start-up figures")
	jobs = flag.Int("jobs", 200, "jobs in the batch scenario")
	only = flag.String("only", "", "run only these scenarios, comma-separated: "+strings.Join(scenarioNames(), ","))
)

// scenarios are the rows of the table, in order.
var scenarios = []struct {
	name string
	run  func(*env) (row, error)
}{
	{"coldstart", coldStart}, {"coldstart-runc", coldStartRunc}, {"firstbyte", firstByte},
	{"burst", burst}, {"flood", flood}, {"copyout", copyOut}, {"batch", batch},
}

func scenarioNames() []string {
	var names []string
	for _, s := range scenarios {
		names = append(names, s.name)
	}
	return names
}

func main() {
	flag.Parse()
	if *only != "" {
		for _, name := range strings.Split(*only, ",") {
			if !slices.Contains(scenarioNames(), name) {
				fmt.Fprintf(os.Stderr, "bench: -only %q: use %s\n", name, strings.Join(scenarioNames(), ","))
				os.Exit(2)
			}
		}
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

type env struct {
	bin, root, tmp string
	busybox        images.Ref
	python         images.Ref
}

// row is one line of the table.
type row struct {
	scenario, airlock, peer string
	a, p                    []time.Duration
	unit                    string // "ms" or "jobs/s"
	count                   int    // jobs, for throughput rows
}

func run() error {
	e := &env{root: e2etest.SysRoot()}
	var err error
	if e.tmp, err = os.MkdirTemp("", "airlock-bench-"); err != nil {
		return err
	}
	defer os.RemoveAll(e.tmp)
	if e.bin, err = e2etest.Build(e.tmp, "./cmd/airlock"); err != nil {
		return err
	}
	if e.busybox, err = e2etest.ImportBusybox(e.bin, e.root, e.tmp, "airlock-bench/busybox"); err != nil {
		return err
	}
	out, err := exec.Command(e.bin, "--root", e.root, "image", "default").Output()
	if err != nil {
		return fmt.Errorf("no default image (run make setup): %w", err)
	}
	if e.python, err = images.ParseRef(strings.TrimSpace(string(out))); err != nil {
		return err
	}

	var rows []row
	for _, sc := range scenarios {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), sc.name) {
			continue
		}
		r, err := sc.run(e)
		if err != nil {
			return err
		}
		rows = append(rows, r)
		fmt.Fprintf(os.Stderr, "  done: %s\n", r.scenario)
	}
	report(rows)
	return nil
}

// airlockRun is `airlock run` on the oci engine with extra flags.
func (e *env) airlockRun(flags ...string) []string {
	return append([]string{e.bin, "--root", e.root, "run", "--engine", "oci"}, flags...)
}

func dockerRun(runtime string, flags ...string) []string {
	return append([]string{"docker", "run", "--rm", "--runtime=" + runtime, "--network", "none"}, flags...)
}

func timeCmd(argv []string, stdout io.Writer) (time.Duration, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = stdout
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 125 || ee.ExitCode() == 69 || ee.ExitCode() == 70 {
			return 0, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, stderr.String())
		}
	}
	return time.Since(start), nil
}

// interleave runs a and b alternately, count times each, swapping which
// goes first every round.
func interleave(count int, a, b []string) ([]time.Duration, []time.Duration, error) {
	argvs := [2][]string{a, b}
	var took [2][]time.Duration
	for i := 0; i < count; i++ {
		for _, k := range [][2]int{{0, 1}, {1, 0}}[i%2] {
			d, err := timeCmd(argvs[k], io.Discard)
			if err != nil {
				return nil, nil, err
			}
			took[k] = append(took[k], d)
		}
	}
	return took[0], took[1], nil
}

func coldStart(e *env) (row, error) {
	a := e.airlockRun("--out-dir", "none", "--image", e.busybox.String(), "--", "/bin/true")
	p := dockerRun("airlock-runsc", e.busybox.ID.String(), "/bin/true")
	ta, tp, err := interleave(*n, a, p)
	return row{scenario: "noop cold start (gVisor)", airlock: "airlock run --engine oci", peer: "docker run --runtime=runsc", a: ta, p: tp, unit: "ms"}, err
}

func coldStartRunc(e *env) (row, error) {
	a := e.airlockRun("--isolation", "seccomp", "--out-dir", "none", "--image", e.busybox.String(), "--", "/bin/true")
	p := dockerRun("runc", e.busybox.ID.String(), "/bin/true")
	ta, tp, err := interleave(*n, a, p)
	return row{scenario: "noop cold start (runc + seccomp)", airlock: "airlock run --isolation seccomp", peer: "docker run --runtime=runc", a: ta, p: tp, unit: "ms"}, err
}

// firstByte times from exec to the first byte of `python3 -c print(1)`.
func firstByte(e *env) (row, error) {
	measure := func(argv []string) (time.Duration, error) {
		cmd := exec.Command(argv[0], argv[1:]...)
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return 0, err
		}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		_, err = bufio.NewReader(pipe).ReadByte()
		d := time.Since(start)
		io.Copy(io.Discard, pipe)
		if werr := cmd.Wait(); err == nil {
			err = werr
		}
		return d, err
	}
	a := e.airlockRun("--out-dir", "none", "--", "python3", "-c", "print(1)")
	p := dockerRun("airlock-runsc", e.python.ID.String(), "python3", "-c", "print(1)")
	var ta, tp []time.Duration
	for i := 0; i < *n/2; i++ {
		da, err := measure(a)
		if err != nil {
			return row{}, fmt.Errorf("first byte, airlock: %w", err)
		}
		dp, err := measure(p)
		if err != nil {
			return row{}, fmt.Errorf("first byte, docker: %w", err)
		}
		ta, tp = append(ta, da), append(tp, dp)
	}
	return row{scenario: "first output byte, python3 -c print(1)", airlock: "airlock run --engine oci", peer: "docker run --runtime=runsc", a: ta, p: tp, unit: "ms"}, nil
}

// burst times 8 starts launched at once.
func burst(e *env) (row, error) {
	once := func(argv []string) (time.Duration, error) {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		start := time.Now()
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := timeCmd(argv, io.Discard); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		return time.Since(start), <-errs
	}
	a := e.airlockRun("--out-dir", "none", "--image", e.busybox.String(), "--", "/bin/true")
	p := dockerRun("airlock-runsc", e.busybox.ID.String(), "/bin/true")
	var ta, tp []time.Duration
	for i := 0; i < 5; i++ {
		da, err := once(a)
		if err != nil {
			return row{}, err
		}
		dp, err := once(p)
		if err != nil {
			return row{}, err
		}
		ta, tp = append(ta, da), append(tp, dp)
	}
	return row{scenario: "burst of 8 concurrent starts (wall)", airlock: "airlock run --engine oci ×8", peer: "docker run --runtime=runsc ×8", a: ta, p: tp, unit: "ms"}, nil
}

// flood: a program writes 1 GB to stdout. airlock kills it at its 1 MiB
// cap; docker has no cap and carries the whole gigabyte.
func flood(e *env) (row, error) {
	script := "head -c 1000000000 /dev/zero"
	a := e.airlockRun("--out-dir", "none", "--output-limit", "1MiB", "--image", e.busybox.String(), "--", "sh", "-c", script)
	p := dockerRun("airlock-runsc", e.busybox.ID.String(), "sh", "-c", script)
	ta, tp, err := interleave(3, a, p)
	return row{scenario: "1 GB stdout flood, time to end", airlock: "airlock, 1 MiB cap (kill)", peer: "docker run (no cap)", a: ta, p: tp, unit: "ms"}, err
}

// copyOut: 100 MB written to the output directory and carried out. airlock
// scans, hashes and delivers; docker's bind mount just leaves it there.
// Writing the 100 MB (head | tr, through gVisor's gofer) is CPU-bound, so
// the peer gets airlock's default CPU and memory limits: the row measures
// the carrying out, not one CPU against all of them.
func copyOut(e *env) (row, error) {
	script := "head -c 100000000 /dev/zero | tr '\\0' a > /out/data.txt"
	var ta, tp []time.Duration
	for i := 0; i < 3; i++ {
		dest := filepath.Join(e.tmp, fmt.Sprintf("art-%d", i))
		d, err := timeCmd(e.airlockRun("--out-limit", "200MiB", "--file-size", "200MiB", "--artifacts", dest, "--image", e.busybox.String(), "--", "sh", "-c", script), io.Discard)
		if err != nil {
			return row{}, err
		}
		ta = append(ta, d)
		host := filepath.Join(e.tmp, fmt.Sprintf("bind-%d", i))
		os.MkdirAll(host, 0o777)
		d, err = timeCmd(dockerRun("airlock-runsc", "--cpus", "1", "--memory", "512m", "-v", host+":/out", e.busybox.ID.String(), "sh", "-c", script), io.Discard)
		if err != nil {
			return row{}, err
		}
		tp = append(tp, d)
		os.RemoveAll(dest)
		os.RemoveAll(host)
	}
	return row{scenario: "write 100 MB to /out and carry it out", airlock: "airlock --artifacts (scanned)", peer: "docker run -v --cpus 1 (unscanned)", a: ta, p: tp, unit: "ms"}, nil
}

// batch: tiny jobs, 4 at a time.
func batch(e *env) (row, error) {
	var jl strings.Builder
	var ids strings.Builder
	for i := 0; i < *jobs; i++ {
		fmt.Fprintf(&jl, `{"id":"j%d","argv":["echo","%d"],"expected_stdout":"%d\n"}`+"\n", i, i, i)
		fmt.Fprintf(&ids, "%d\n", i)
	}
	jobsPath := filepath.Join(e.tmp, "jobs.jsonl")
	if err := os.WriteFile(jobsPath, []byte(jl.String()), 0o644); err != nil {
		return row{}, err
	}
	ta, err := timeCmd([]string{e.bin, "--root", e.root, "batch", jobsPath, "--out", filepath.Join(e.tmp, "results.jsonl"),
		"--parallel", "4", "--engine", "oci", "--out-dir", "none", "--image", e.busybox.String()}, io.Discard)
	if err != nil {
		return row{}, err
	}
	cmd := exec.CommandContext(context.Background(), "xargs", append([]string{"-P4", "-I{}"}, dockerRun("airlock-runsc", e.busybox.ID.String(), "echo", "{}")...)...)
	cmd.Stdin = strings.NewReader(ids.String())
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return row{}, fmt.Errorf("xargs docker run: %v\n%s", err, out)
	}
	tp := time.Since(start)
	return row{scenario: fmt.Sprintf("batch of %d tiny jobs, 4 at a time", *jobs), airlock: "airlock batch --parallel 4", peer: "xargs -P4 docker run", a: []time.Duration{ta}, p: []time.Duration{tp}, unit: "jobs/s", count: *jobs}, nil
}

func report(rows []row) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tairlock\tp50\tp99\tpeer\tp50\tp99\tratio")
	for _, r := range rows {
		if r.unit == "jobs/s" {
			ra := float64(r.count) / r.a[0].Seconds()
			rp := float64(r.count) / r.p[0].Seconds()
			fmt.Fprintf(tw, "%s\t%s\t%.1f jobs/s\t\t%s\t%.1f jobs/s\t\t%.2f× throughput\n", r.scenario, r.airlock, ra, r.peer, rp, ra/rp)
			continue
		}
		a50, p50 := timing.Percentile(r.a, 50), timing.Percentile(r.p, 50)
		fmt.Fprintf(tw, "%s\t%s\t%.0f ms\t%.0f ms\t%s\t%.0f ms\t%.0f ms\t%.2f× time\n", r.scenario, r.airlock, timing.MS(a50), timing.MS(timing.Percentile(r.a, 99)),
			r.peer, timing.MS(p50), timing.MS(timing.Percentile(r.p, 99)), float64(a50)/float64(p50))
	}
	tw.Flush()
	fmt.Println("\nratio: airlock's p50 time over the peer's (below 1 is faster), or airlock's throughput over the peer's (above 1 is faster).")
}
