//go:build e2e

package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/airlock-sandbox/airlock/internal/timing"
	"github.com/airlock-sandbox/airlock/runner"
)

// serverGauges reads the server's goroutines and resident memory from
// its /metrics.
func serverGauges(t *testing.T, a api) (goroutines, rss float64) {
	t.Helper()
	_, _, body := a.do(t, "GET", "/metrics", nil)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return fams["go_goroutines"].GetMetric()[0].GetGauge().GetValue(), fams["process_resident_memory_bytes"].GetMetric()[0].GetGauge().GetValue()
}

// TestServeLoad is the bounded load test: AIRLOCK_LOAD_RUNS one-shot runs
// (default 50; `make load-server` runs 1,000) at concurrency 8 on
// loopback TCP. It reports p50 and p99, and checks that nothing leaks and
// that the server's goroutines and memory come back to where they started.
func TestServeLoad(t *testing.T) {
	n := 50
	if v := os.Getenv("AIRLOCK_LOAD_RUNS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("AIRLOCK_LOAD_RUNS=%q: give a positive number", v)
		}
	}
	const conc = 8
	s := startServer(t, "--max-sandboxes", "16")
	a := s.apis()[1]
	body, _ := json.Marshal(map[string]any{"argv": []string{"python3", "-c", "print(6*7)"}, "engine": engineName, "isolation": isolationName, "timeout": "60s"})
	run := func() (time.Duration, error) {
		req, _ := http.NewRequest("POST", a.base+"/v1/runs", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+a.token)
		begin := time.Now()
		resp, err := a.client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var res runner.Result
		json.NewDecoder(resp.Body).Decode(&res)
		took := time.Since(begin)
		if resp.StatusCode != 200 || res.Reason != "exited" || string(res.Stdout.Head) != "42\n" {
			return took, fmt.Errorf("status %d: %s %d %q %s", resp.StatusCode, res.Reason, res.ExitCode, res.Stdout.Head, res.Error)
		}
		return took, nil
	}
	// Warm up, then take the baseline.
	for range conc {
		if _, err := run(); err != nil {
			t.Fatal(err)
		}
	}
	g0, rss0 := serverGauges(t, a)

	var mu sync.Mutex
	var took []time.Duration
	var failures []string
	jobs := make(chan int)
	var wg sync.WaitGroup
	begin := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				d, err := run()
				mu.Lock()
				took = append(took, d)
				if err != nil {
					failures = append(failures, err.Error())
				}
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	wall := time.Since(begin)
	if len(failures) > 0 {
		t.Fatalf("%d of %d runs failed; first: %s", len(failures), n, failures[0])
	}
	// Idle connections hold a goroutine or two each: close ours first.
	a.client.CloseIdleConnections()
	var g1, rss1 float64
	deadline := time.Now().Add(30 * time.Second)
	for {
		g1, rss1 = serverGauges(t, a)
		a.client.CloseIdleConnections()
		if g1 <= g0+2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%d runs at concurrency %d in %v (%.1f runs/s): p50 %.0fms, p99 %.0fms; server goroutines %v -> %v, RSS %.1fMiB -> %.1fMiB",
		n, conc, wall.Round(time.Millisecond), float64(n)/wall.Seconds(), timing.MS(timing.Percentile(took, 50)), timing.MS(timing.Percentile(took, 99)),
		g0, g1, rss0/(1<<20), rss1/(1<<20))
	if g1 > g0+2 {
		t.Errorf("the server's goroutines grew from %v to %v", g0, g1)
	}
	// Memory: the Go heap is returned lazily, so allow slack, not growth
	// in proportion to the number of runs.
	if rss1 > rss0*1.5+32<<20 {
		t.Errorf("the server's RSS grew from %.1fMiB to %.1fMiB", rss0/(1<<20), rss1/(1<<20))
	}
	if left := leftovers(); len(left) > 0 {
		t.Errorf("left behind after the load: %v", left)
	}
}
