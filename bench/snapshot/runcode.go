package main

// /run_code from pools of ready interpreters beside today's cold sandbox
// per request: three `airlock serve` on the bench's root, one without
// --run-code-template (cold), one serving python from a run-code template
// with no module imported, one from a template that imports numpy. The
// four requests are interleaved, each once the pools are full (no refill
// runs while one is timed). The servers' debug lines give each request's
// steps.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/internal/forkserver"
	"github.com/airlock-sandbox/airlock/internal/proc"
	"github.com/airlock-sandbox/airlock/internal/timing"
)

const (
	printCode = "print(1)"
	numpyCode = "import numpy; print(numpy.arange(10).sum())"
	poolSize  = 2
)

// server is one airlock serve of the bench.
type server struct {
	cmd    *exec.Cmd
	hc     *http.Client
	mu     sync.Mutex
	stderr bytes.Buffer
}

func (s *server) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.Write(p)
}

func startServe(bin, root, sock string, args ...string) (*server, error) {
	s := &server{}
	s.cmd = exec.Command(bin, append([]string{"--root", root, "--debug", "serve", "--socket", sock}, args...)...)
	s.cmd.Stderr = s
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	s.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for i := 0; ; i++ {
		if resp, err := s.hc.Get("http://airlock/v1/healthz"); err == nil {
			resp.Body.Close()
			return s, nil
		}
		if i > 2400 {
			s.stop()
			return nil, fmt.Errorf("airlock serve %v never answered: %s", args, s.log())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (s *server) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

func (s *server) stop() { s.cmd.Process.Signal(syscall.SIGTERM); s.cmd.Wait() }

// runCode posts one /run_code request and checks its answer.
func (s *server) runCode(code, want string) (string, error) {
	b, _ := json.Marshal(map[string]any{"code": code, "language": "python"})
	resp, err := s.hc.Post("http://airlock/run_code", "application/json", bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Status    string                          `json:"status"`
		Executor  string                          `json:"executor_pod_name"`
		RunResult struct{ Stdout, Stderr string } `json:"run_result"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "Success" || r.RunResult.Stdout != want {
		return "", fmt.Errorf("/run_code %q: %d %s", code, resp.StatusCode, body)
	}
	return r.Executor, nil
}

// ready waits until the server's pool of template holds poolSize.
func (s *server) ready(template string) error {
	name := fmt.Sprintf("airlock_pool_ready{template=%q} ", "sandboxes/"+template)
	for i := 0; ; i++ {
		resp, err := s.hc.Get("http://airlock/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, name); ok {
					if f, _ := strconv.ParseFloat(v, 64); f >= poolSize {
						return nil
					}
				}
			}
		}
		if i > 2400 {
			return fmt.Errorf("the pool of %s never filled", template)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var stepRE = regexp.MustCompile(`msg=run_code sandbox_id=(\S+) .*create_ms=(\S+) upload_ms=(\S+) exec_ms=(\S+) fetch_ms=(\S+) destroy_ms=(\S+)`)

// steps returns the median of each step of the requests of ids, from the
// server's debug lines.
func (s *server) steps(ids []string) string {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	names := []string{"claim/create", "upload", "exec", "fetch", "destroy"}
	cols := make([][]float64, len(names))
	for _, m := range stepRE.FindAllStringSubmatch(s.log(), -1) {
		if !want[m[1]] {
			continue
		}
		for i := range names {
			f, _ := strconv.ParseFloat(m[2+i], 64)
			cols[i] = append(cols[i], f)
		}
	}
	var parts []string
	for i, c := range cols {
		if len(c) == 0 {
			return "(none logged)"
		}
		sort.Float64s(c)
		parts = append(parts, fmt.Sprintf("%s %.1fms", names[i], c[len(c)/2]))
	}
	return strings.Join(parts, ", ")
}

// benchRunCode measures /run_code print(1) and a numpy snippet from
// run-code pools and cold, n rounds interleaved.
func benchRunCode(root, tmp string, n int) error {
	bin, err := e2etest.Build(tmp, "./cmd/airlock")
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "making the run-code templates…")
	for _, t := range [][]string{{"bench-rc-py"}, {"bench-rc-np", "--import", "numpy"}} {
		args := append([]string{"--root", root, "template", "create", t[0], "--replace", "--engine", "oci", "--run-code", "python"}, t[1:]...)
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("template create %s: %v: %s", t[0], err, out)
		}
		defer exec.Command(bin, "--root", root, "template", "rm", t[0]).Run()
	}
	cold, err := startServe(bin, root, filepath.Join(tmp, "cold.sock"))
	if err != nil {
		return err
	}
	defer cold.stop()
	py, err := startServe(bin, root, filepath.Join(tmp, "py.sock"), "--run-code-template", "python=bench-rc-py", "--pool-sandboxes", fmt.Sprintf("bench-rc-py=%d", poolSize))
	if err != nil {
		return err
	}
	defer py.stop()
	np, err := startServe(bin, root, filepath.Join(tmp, "np.sock"), "--run-code-template", "python=bench-rc-np", "--pool-sandboxes", fmt.Sprintf("bench-rc-np=%d", poolSize))
	if err != nil {
		return err
	}
	defer np.stop()
	type variant struct {
		name       string
		srv        *server
		code, want string
		took       []time.Duration
		ids        []string
	}
	vs := []*variant{
		{name: "/run_code print(1), cold (today)", srv: cold, code: printCode, want: "1\n"},
		{name: "/run_code print(1), run-code pool", srv: py, code: printCode, want: "1\n"},
		{name: "/run_code numpy snippet, cold (today)", srv: cold, code: numpyCode, want: "45\n"},
		{name: "/run_code numpy snippet, numpy run-code pool", srv: np, code: numpyCode, want: "45\n"},
	}
	fmt.Fprintf(os.Stderr, "/run_code: %d rounds of each, interleaved…\n", n)
	for i := 0; i < n; i++ {
		for j := range vs {
			v := vs[(i+j)%len(vs)]
			if err := py.ready("bench-rc-py"); err != nil {
				return err
			}
			if err := np.ready("bench-rc-np"); err != nil {
				return err
			}
			begin := time.Now()
			id, err := v.srv.runCode(v.code, v.want)
			if err != nil {
				return err
			}
			v.took, v.ids = append(v.took, time.Since(begin)), append(v.ids, id)
		}
	}
	var rows []timing.Row
	for _, v := range vs {
		rows = append(rows, timing.Row{Name: v.name, Took: v.took})
	}
	fmt.Println()
	timing.Table(os.Stdout, "/run_code (pools full)", rows)
	fmt.Printf("targets: print(1) from a pool p50 ≤ 30 ms, p99 ≤ 60 ms; numpy snippet p50 ≤ 40 ms\n")
	fmt.Println("service steps (median of each step):")
	for _, v := range vs {
		fmt.Printf("  %s: %s\n", v.name, v.srv.steps(v.ids))
	}
	if err := execSplit(bin, root, n); err != nil {
		return err
	}
	if *sustainFor == 0 {
		return nil
	}
	// The pools of the rounds above go first: the rates are the cold
	// server's and a pool of sustainPool's alone.
	py.stop()
	np.stop()
	np4, err := startServe(bin, root, filepath.Join(tmp, "np4.sock"), "--run-code-template", "python=bench-rc-np", "--pool-sandboxes", fmt.Sprintf("bench-rc-np=%d", sustainPool))
	if err != nil {
		return err
	}
	defer np4.stop()
	return sustain(cold, np4, *sustainFor)
}

// sustainClients post numpy snippets back to back (the figure,
// unless -sustain-clients), against a pool of sustainPool, for the
// sustained rates.
const (
	sustainPool = 4
)

// sustain measures the rate of numpy snippets answered right with
// sustainClients clients for d against the cold server and against the
// pooled one, in halves taken in turn (cold, pool, cold, pool), so that
// both see the same machine.
func sustain(cold, pool *server, d time.Duration) error {
	fmt.Fprintf(os.Stderr, "sustained: %d clients, %v each, in halves taken in turn…\n", sustainClients, d)
	type side struct {
		name      string
		srv       *server
		ok        int
		wall, cpu time.Duration
	}
	sides := []*side{{name: "cold (today)", srv: cold}, {name: fmt.Sprintf("numpy run-code pool of %d", sustainPool), srv: pool}}
	for range 2 {
		for _, sd := range sides {
			cpu0, err := proc.HostCPU()
			if err != nil {
				return err
			}
			ok, wall, err := flood(sd.srv, d/2)
			if err != nil {
				return fmt.Errorf("sustained, %s: %w", sd.name, err)
			}
			cpu1, err := proc.HostCPU()
			if err != nil {
				return err
			}
			sd.ok, sd.wall, sd.cpu = sd.ok+ok, sd.wall+wall, sd.cpu+cpu1-cpu0
		}
	}
	fmt.Println()
	fmt.Printf("sustained /run_code numpy snippets, %d clients, %v each side\n", sustainClients, d)
	for _, sd := range sides {
		fmt.Printf("  %-28s %5d answered in %6.1f s: %5.2f/s, %4.0f ms of the host's CPU each (%.0f%% busy)\n", sd.name, sd.ok, sd.wall.Seconds(), float64(sd.ok)/sd.wall.Seconds(),
			float64(sd.cpu.Milliseconds())/float64(max(sd.ok, 1)), 100*sd.cpu.Seconds()/(sd.wall.Seconds()*float64(runtime.NumCPU())))
	}
	a, b := float64(sides[0].ok)/sides[0].wall.Seconds(), float64(sides[1].ok)/sides[1].wall.Seconds()
	fmt.Printf("pool / cold: %.2fx the rate (target ≥ 3x)\n", b/a)
	return nil
}

// flood has sustainClients clients post numpy snippets to srv back to
// back until d has passed; it returns how many were answered right and
// the wall time until the last answer. Any wrong answer is the error.
func flood(srv *server, d time.Duration) (int, time.Duration, error) {
	var (
		ok    atomic.Int64
		wrong sync.Once
		err   error
		wg    sync.WaitGroup
	)
	begin := time.Now()
	for range sustainClients {
		wg.Go(func() {
			for time.Since(begin) < d {
				if _, e := srv.runCode(numpyCode, "45\n"); e != nil {
					wrong.Do(func() { err = e })
					return
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return int(ok.Load()), time.Since(begin), err
}

// Two ways to give the fork server a job: the run-code exec
// (forkserver.ClientArgv), which the exec agent takes and hands over
// itself, and the same client's argv without "--", which the agent does
// not take: it starts the client process, as every job did before the
// agent handed them over.
var (
	byAgent  = []string{"/.airlock-agent", "run-code", "--", "/home/user/p.py"}
	byClient = []string{"/.airlock-agent", "run-code", "/home/user/p.py"}
)

// execSplit times, in one sandbox restored from the plain run-code
// template, the exec of `true` (the exec's floor), of a job handed to the
// fork server by the agent and by a client process, and of python3
// running the same file: each exec's own duration_ms, interleaved (the
// fork server serves jobs one after another for as long as its sandbox
// lives). Then each sandbox's first job, the pooled case (the spare child
// takes it), in fresh sandboxes, in turn: primed as a pool primes its
// sandboxes and handed over by the agent, and unprimed, the two ways.
func execSplit(bin, root string, n int) error {
	airlock := func(args ...string) ([]byte, error) {
		out, err := exec.Command(bin, append([]string{"--root", root}, args...)...).Output()
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("airlock %v: %v: %s", args, err, ee.Stderr)
		}
		return out, err
	}
	id, err := printSandbox(airlock)
	if err != nil {
		return err
	}
	defer airlock("sandbox", "rm", id)
	cases := []timing.Row{
		{Name: "exec: true"},
		{Name: "exec: print(1) through the fork server, handed over by the agent"},
		{Name: "exec: print(1) through the fork server, by a client process"},
		{Name: "exec: python3 p.py (print(1))"},
	}
	argvs := [][]string{{"true"}, byAgent, byClient, {"python3", "/home/user/p.py"}}
	for i := 0; i < n; i++ {
		for j := range cases {
			k := (i + j) % len(cases)
			took, err := timedExec(airlock, id, argvs[k])
			if err != nil {
				return err
			}
			cases[k].Took = append(cases[k].Took, took)
		}
	}
	fmt.Println()
	if err := timing.Table(os.Stdout, "one restored run-code sandbox (exec's duration_ms)", cases); err != nil {
		return err
	}
	first := []timing.Row{{Name: "first job, primed, handed over by the agent"}, {Name: "first job, handed over by the agent"}, {Name: "first job, by a client process"}}
	primed := []bool{true, false, false}
	argvs = [][]string{byAgent, byAgent, byClient}
	for i := 0; i < n; i++ {
		for j := range first {
			k := (i + j) % len(first)
			took, err := firstJob(airlock, primed[k], argvs[k])
			if err != nil {
				return err
			}
			first[k].Took = append(first[k].Took, took)
		}
	}
	fmt.Println()
	return timing.Table(os.Stdout, "print(1) as a restored run-code sandbox's first job (exec's duration_ms)", first)
}

// printSandbox makes a sandbox of the plain run-code template holding
// /home/user/p.py, print(1), written by an exec that is no job of the
// fork server's.
func printSandbox(airlock func(...string) ([]byte, error)) (string, error) {
	out, err := airlock("sandbox", "create", "--template", "bench-rc-py")
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(out))
	if _, err := airlock("exec", id, "--", "sh", "-c", "echo 'print(1)' >/home/user/p.py"); err != nil {
		airlock("sandbox", "rm", id)
		return "", err
	}
	return id, nil
}

// timedExec runs argv in sandbox id, which must exit 0, and returns the
// exec's own duration_ms.
func timedExec(airlock func(...string) ([]byte, error), id string, argv []string) (time.Duration, error) {
	out, err := airlock(append([]string{"exec", "--json", id, "--"}, argv...)...)
	if err != nil {
		return 0, err
	}
	var res struct {
		DurationMS int64 `json:"duration_ms"`
		ExitCode   int   `json:"exit_code"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.ExitCode != 0 {
		return 0, fmt.Errorf("exec %v: %s (%v)", argv, out, err)
	}
	return time.Duration(res.DurationMS) * time.Millisecond, nil
}

// firstJob runs argv as the first job of a new sandbox of the plain
// run-code template, primed first as a pool primes its sandboxes when
// prime is set, and returns the exec's duration_ms.
func firstJob(airlock func(...string) ([]byte, error), prime bool, argv []string) (time.Duration, error) {
	id, err := printSandbox(airlock)
	if err != nil {
		return 0, err
	}
	defer airlock("sandbox", "rm", id)
	if prime {
		if _, err := airlock(append([]string{"exec", id, "--"}, forkserver.PrimeArgv()...)...); err != nil {
			return 0, err
		}
	}
	return timedExec(airlock, id, argv)
}
