// Command server measures airlock serve beside the CLI, interleaved in one
// run so that the ratios hold on a noisy machine: a one-shot run through
// POST /v1/runs against `airlock run --json`, and an exec in a live
// sandbox through POST /v1/sandboxes/{id}/exec against `airlock exec
// --json`. The API is reached over its unix socket. `make bench-server`
// runs it after setup.
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
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/internal/timing"
	"github.com/airlock-sandbox/airlock/runner"
)

func main() {
	n := flag.Int("n", 30, "measurements per scenario")
	eng := flag.String("engine", "oci", "engine: oci or docker")
	iso := flag.String("isolation", "gvisor", "isolation: gvisor or seccomp")
	flag.Parse()
	if err := run(*n, *eng, *iso); err != nil {
		fmt.Fprintf(os.Stderr, "bench-server: %v\n", err)
		os.Exit(1)
	}
}

var program = []string{"python3", "-c", "print(6*7)"}

func run(n int, eng, iso string) error {
	root := e2etest.SysRoot()
	tmp, err := os.MkdirTemp("", "airlock-bench-server-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, err := e2etest.Build(tmp, "./cmd/airlock")
	if err != nil {
		return err
	}
	sock := filepath.Join(tmp, "airlock.sock")
	srv := exec.Command(bin, "--root", root, "serve", "--socket", sock)
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait() }()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for i := 0; ; i++ {
		if resp, err := hc.Get("http://airlock/v1/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if i > 300 {
			return fmt.Errorf("airlock serve did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	post := func(path string, v any) (runner.Result, error) {
		b, _ := json.Marshal(v)
		resp, err := hc.Post("http://airlock"+path, "application/json", bytes.NewReader(b))
		if err != nil {
			return runner.Result{}, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var res runner.Result
		if err := json.Unmarshal(body, &res); err != nil || resp.StatusCode != 200 {
			return res, fmt.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
		return res, nil
	}
	cli := func(args ...string) (runner.Result, error) {
		out, err := exec.Command(bin, append([]string{"--root", root}, args...)...).Output()
		var res runner.Result
		if jerr := json.Unmarshal(out, &res); jerr != nil {
			return res, fmt.Errorf("airlock %s: %v %v: %s", strings.Join(args, " "), err, jerr, out)
		}
		return res, nil
	}
	// One sandbox for both exec scenarios.
	b, _ := json.Marshal(map[string]any{"engine": eng, "isolation": iso, "ttl": "30m"})
	resp, err := hc.Post("http://airlock/v1/sandboxes", "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	var si runner.SandboxInfo
	json.NewDecoder(resp.Body).Decode(&si)
	resp.Body.Close()
	if si.ID == "" {
		return fmt.Errorf("creating the sandbox: status %d", resp.StatusCode)
	}
	defer func() {
		req, _ := http.NewRequest("DELETE", "http://airlock/v1/sandboxes/"+si.ID, nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
		}
	}()

	scenarios := []struct {
		name string
		do   func() (runner.Result, error)
		took []time.Duration
	}{
		{name: "run: airlock run --json", do: func() (runner.Result, error) {
			return cli(append([]string{"run", "--json", "--engine", eng, "--isolation", iso, "--"}, program...)...)
		}},
		{name: "run: POST /v1/runs", do: func() (runner.Result, error) {
			return post("/v1/runs", map[string]any{"argv": program, "engine": eng, "isolation": iso})
		}},
		{name: "exec: airlock exec --json", do: func() (runner.Result, error) {
			return cli(append([]string{"exec", "--json", si.ID, "--"}, program...)...)
		}},
		{name: "exec: POST /v1/sandboxes/{id}/exec", do: func() (runner.Result, error) {
			return post("/v1/sandboxes/"+si.ID+"/exec", map[string]any{"argv": program})
		}},
	}
	for i := -2; i < n; i++ { // two rounds of warm-up
		for j := range scenarios {
			sc := &scenarios[j]
			begin := time.Now()
			res, err := sc.do()
			took := time.Since(begin)
			if err != nil {
				return fmt.Errorf("%s: %w", sc.name, err)
			}
			if res.Reason != "exited" || string(res.Stdout.Head) != "42\n" {
				return fmt.Errorf("%s: %s %d %q %s", sc.name, res.Reason, res.ExitCode, res.Stdout.Head, res.Error)
			}
			if i >= 0 {
				sc.took = append(sc.took, took)
			}
		}
	}
	fmt.Printf("airlock serve beside the CLI: %s on %s/%s, %d measurements each, interleaved\n\n", strings.Join(program, " "), eng, iso, n)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tp50 ms\tp99 ms\tmean ms\t")
	for _, sc := range scenarios {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t\n", sc.name, timing.MS(timing.Percentile(sc.took, 50)), timing.MS(timing.Percentile(sc.took, 99)), timing.MS(timing.Mean(sc.took)))
	}
	tw.Flush()
	ratio := func(a, b int) float64 {
		return float64(timing.Percentile(scenarios[a].took, 50)) / float64(timing.Percentile(scenarios[b].took, 50))
	}
	fmt.Printf("\np50 API / CLI: run %.2f, exec %.2f\n", ratio(1, 0), ratio(3, 2))
	return nil
}
