// Command pool measures warm pools: a pooled one-shot `/bin/true` through
// POST /v1/runs beside a cold one through the same API, `airlock run
// --engine oci` and `docker run --runtime=<runsc>`, interleaved in one
// run; then the sustained rate of fresh pooled sandboxes with refill, and
// a 200-job batch with --warm 4 beside `xargs -P4 docker run`. `make
// bench-pool` runs it after setup.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/internal/timing"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

var (
	n        = flag.Int("n", 30, "measurements per latency scenario")
	sustain  = flag.Duration("sustain", 60*time.Second, "length of the sustained-rate scenario")
	jobs     = flag.Int("jobs", 200, "jobs in the batch scenario")
	poolSize = flag.Int("pool", 4, "the server's pool size")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-pool: %v\n", err)
		os.Exit(1)
	}
}

const template = "airlock-bench-pool"

func run() error {
	root := e2etest.SysRoot()
	tmp, err := os.MkdirTemp("", "airlock-bench-pool-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, err := e2etest.Build(tmp, "./cmd/airlock")
	if err != nil {
		return err
	}
	airlock := func(args ...string) ([]byte, error) {
		cmd := exec.Command(bin, append([]string{"--root", root}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("airlock %s: %v: %s", strings.Join(args, " "), err, stderr.String())
		}
		return out, nil
	}
	ref, err := e2etest.ImportBusybox(bin, root, tmp, "airlock-bench/busybox")
	if err != nil {
		return err
	}
	if _, err := airlock("template", "create", template, "--replace", "--engine", "oci", "--image", ref.String()); err != nil {
		return err
	}
	defer airlock("template", "rm", template)

	sock := filepath.Join(tmp, "airlock.sock")
	srv := exec.Command(bin, "--root", root, "serve", "--socket", sock, "--pool", fmt.Sprintf("%s=%d", template, *poolSize))
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait() }()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	post := func(v any) (runner.Result, error) {
		b, _ := json.Marshal(v)
		resp, err := hc.Post("http://airlock/v1/runs", "application/json", bytes.NewReader(b))
		if err != nil {
			return runner.Result{}, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var res runner.Result
		if err := json.Unmarshal(body, &res); err != nil || resp.StatusCode != 200 {
			return res, fmt.Errorf("POST /v1/runs: %d %s", resp.StatusCode, body)
		}
		return res, nil
	}
	ready := func(want int) error {
		for i := 0; ; i++ {
			b, err := metric(hc, fmt.Sprintf("airlock_pool_ready{template=%q}", template))
			if err == nil && b >= float64(want) {
				return nil
			}
			if i > 1200 {
				return fmt.Errorf("the pool never held %d sandboxes (%v)", want, err)
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
	if err := ready(*poolSize); err != nil {
		return err
	}

	pooled := map[string]any{"template": template, "argv": []string{"/bin/true"}}
	cold := map[string]any{"image": ref.String(), "engine": "oci", "argv": []string{"/bin/true"}}
	scenarios := []*scenario{
		{name: "pooled: POST /v1/runs, template", do: func() error { return want(post(pooled))(true) }},
		{name: "cold: POST /v1/runs, image", do: func() error { return want(post(cold))(false) }},
		{name: "airlock run --engine oci", do: func() error {
			_, err := airlock("run", "--engine", "oci", "--image", ref.String(), "--", "/bin/true")
			return err
		}},
		{name: "docker run --rm --runtime=" + isolation.DockerRuntimes[isolation.GVisor], do: func() error {
			return exec.Command("docker", "run", "--rm", "--runtime="+isolation.DockerRuntimes[isolation.GVisor], "--network", "none", ref.ID.String(), "/bin/true").Run()
		}},
	}
	fmt.Fprintf(os.Stderr, "%d runs of each of %d scenarios, interleaved…\n", *n, len(scenarios))
	for i := -2; i < *n; i++ { // two rounds of warm-up
		for k := range scenarios {
			s := scenarios[(i+2+k)%len(scenarios)]
			if s == scenarios[0] {
				// A claim measures a claim: the pool is refilled first, so
				// the figure is not a cold start by another name.
				if err := ready(*poolSize); err != nil {
					return err
				}
			}
			begin := time.Now()
			if err := s.do(); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			if i >= 0 {
				s.took = append(s.took, time.Since(begin))
			}
		}
	}
	fmt.Printf("one-shot /bin/true on busybox, gVisor, %d runs each, interleaved\n\n", *n)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tp50 ms\tp99 ms\tmean ms\tp50 / docker run\t")
	dr := timing.Percentile(scenarios[3].took, 50)
	for _, s := range scenarios {
		p50 := timing.Percentile(s.took, 50)
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.3f\t\n", s.name, timing.MS(p50), timing.MS(timing.Percentile(s.took, 99)), timing.MS(timing.Mean(s.took)), float64(p50)/float64(dr))
	}
	tw.Flush()

	// Sustained: four clients claim as fast as they can for the period;
	// a run that finds the pool empty starts cold (and is counted apart).
	if err := ready(*poolSize); err != nil {
		return err
	}
	var done, hits atomic.Int64
	var firstErr atomic.Value
	stop := time.Now().Add(*sustain)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				res, err := post(pooled)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				done.Add(1)
				if res.Pool != "" {
					hits.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return fmt.Errorf("sustained: %w", err)
	}
	secs := sustain.Seconds()
	fmt.Printf("\nsustained, 4 clients for %v, pool of %d: %.1f fresh sandboxes/s (%d runs, %d pooled, %d cold after an empty pool)\n",
		*sustain, *poolSize, float64(done.Load())/secs, done.Load(), hits.Load(), done.Load()-hits.Load())

	// The batch of `make bench`, with a warm pool of its own.
	var jl, ids strings.Builder
	for i := 0; i < *jobs; i++ {
		fmt.Fprintf(&jl, `{"id":"j%d","argv":["echo","%d"],"expected_stdout":"%d\n"}`+"\n", i, i, i)
		fmt.Fprintf(&ids, "%d\n", i)
	}
	jobsPath := filepath.Join(tmp, "jobs.jsonl")
	if err := os.WriteFile(jobsPath, []byte(jl.String()), 0o644); err != nil {
		return err
	}
	begin := time.Now()
	if _, err := airlock("batch", jobsPath, "--out", filepath.Join(tmp, "results.jsonl"), "--parallel", "4", "--warm", "4", "--engine", "oci", "--image", ref.String()); err != nil {
		return err
	}
	ta := time.Since(begin)
	xargs := exec.Command("xargs", "-P4", "-I{}", "docker", "run", "--rm", "--runtime="+isolation.DockerRuntimes[isolation.GVisor], "--network", "none", ref.ID.String(), "echo", "{}")
	xargs.Stdin = strings.NewReader(ids.String())
	begin = time.Now()
	if out, err := xargs.CombinedOutput(); err != nil {
		return fmt.Errorf("xargs docker run: %v\n%s", err, out)
	}
	tp := time.Since(begin)
	ra, rp := float64(*jobs)/ta.Seconds(), float64(*jobs)/tp.Seconds()
	fmt.Printf("\nbatch of %d tiny jobs, 4 at a time: airlock batch --warm 4 %.1f jobs/s, xargs -P4 docker run %.1f jobs/s: %.2f× throughput\n", *jobs, ra, rp, ra/rp)
	return nil
}

type scenario struct {
	name string
	do   func() error
	took []time.Duration
}

// want checks a run's Result, and whether a pooled sandbox ran it.
func want(res runner.Result, err error) func(pooled bool) error {
	return func(pooled bool) error {
		switch {
		case err != nil:
			return err
		case res.Reason != runner.ReasonExited || res.ExitCode != 0:
			return fmt.Errorf("%s exit %d: %s %q", res.Reason, res.ExitCode, res.Error, res.Stderr.Head)
		case pooled != (res.Pool != ""):
			return fmt.Errorf("pool %q; want pooled=%v", res.Pool, pooled)
		}
		return nil
	}
}

// metric reads one sample from the server's /metrics.
func metric(hc *http.Client, name string) (float64, error) {
	resp, err := hc.Get("http://airlock/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			_, err := fmt.Sscan(v, &f)
			return f, err
		}
	}
	return 0, fmt.Errorf("%s is not in /metrics", name)
}
