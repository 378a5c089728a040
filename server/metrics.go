package server

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/lifecycle"
	"github.com/airlock-sandbox/airlock/runner"
)

// metrics are the series the operations documents ask to monitor, on a
// registry of the server's own (no process-wide globals).
type metrics struct {
	reg       *prometheus.Registry
	orphans   prometheus.Counter
	createDur prometheus.Histogram
	execDur   prometheus.Histogram
	runDur    prometheus.Histogram
	termFail  prometheus.Counter
	rejected  *prometheus.CounterVec
	runs      *prometheus.CounterVec
	handler   http.Handler
}

// liveStates are the states a listed sandbox can be in.
var liveStates = []lifecycle.State{lifecycle.Requested, lifecycle.Pooled, lifecycle.Created, lifecycle.Ready, lifecycle.Running, lifecycle.Failed, lifecycle.Orphaned}

var latencyBuckets = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

func newMetrics(root string) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		orphans: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_orphans_reaped_total", Help: "Runs and sandboxes reaped by the server's sweep: orphaned, or past their deadline.",
		}),
		createDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "airlock_sandbox_create_duration_seconds", Help: "Time to create a sandbox, ready for execs.", Buckets: latencyBuckets,
		}),
		execDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "airlock_exec_duration_seconds", Help: "Time of an exec in a live sandbox, request to Result.", Buckets: latencyBuckets,
		}),
		runDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "airlock_run_duration_seconds", Help: "Time of a one-shot run, request to Result.", Buckets: latencyBuckets,
		}),
		termFail: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_termination_failures_total", Help: "Sandbox destroys that failed.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_rejected_files_total", Help: "Refused file transfers and rejected artifacts, by reason word.",
		}, []string{"reason"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_runs_total", Help: "One-shot runs and execs by how they ended (the Result's reason).",
		}, []string{"reason"}),
	}
	for _, r := range []runner.Reason{runner.ReasonExited, runner.ReasonTimeout, runner.ReasonOOM, runner.ReasonOutputLimit,
		runner.ReasonPidsLimit, runner.ReasonKilled, runner.ReasonDestroyed, runner.ReasonError} {
		m.runs.WithLabelValues(string(r))
	}
	for _, r := range []artifacts.Reason{artifacts.ReasonSymlink, artifacts.ReasonHardlink, artifacts.ReasonNotRegular, artifacts.ReasonBadName,
		artifacts.ReasonTooLarge, artifacts.ReasonTooMany, artifacts.ReasonTypeNotAllowed, artifacts.ReasonTypeMismatch, artifacts.ReasonHiddenName,
		runner.ReasonInvalidPath, runner.ReasonNotFound, runner.ReasonNoSpace, runner.ReasonIsDirectory} {
		m.rejected.WithLabelValues(string(r))
	}
	// The server's own goroutines and memory, to watch it for leaks.
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(m.orphans, m.createDur, m.execDur, m.runDur, m.termFail, m.rejected, m.runs, &sandboxCollector{root: root})
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return m
}

func (m *metrics) serve(w http.ResponseWriter, r *http.Request) { m.handler.ServeHTTP(w, r) }

// result counts a run's or exec's ending and its rejected artifacts.
func (m *metrics) result(res runner.Result) {
	if res.Reason != "" {
		m.runs.WithLabelValues(string(res.Reason)).Inc()
	}
	for _, rj := range res.Rejected {
		m.rejected.WithLabelValues(string(rj.Reason)).Inc()
	}
}

var (
	activeDesc = prometheus.NewDesc("airlock_sandboxes_active", "Live sandboxes by lifecycle state.", []string{"state"}, nil)
	ageDesc    = prometheus.NewDesc("airlock_sandbox_age_seconds", "Age of the live sandboxes at scrape time.", nil, nil)
)

var ageBuckets = []float64{60, 300, 900, 1800, 3600, 7200, 21600, 86400}

// sandboxCollector reads the sandboxes from state at each scrape, so it
// counts those of the CLI and of earlier servers too.
type sandboxCollector struct{ root string }

func (c *sandboxCollector) Describe(ch chan<- *prometheus.Desc) { ch <- activeDesc; ch <- ageDesc }

func (c *sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	list, err := runner.ListSandboxes(c.root)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(activeDesc, err)
		return
	}
	counts := map[lifecycle.State]int{}
	buckets := map[float64]uint64{}
	var sum float64
	now := time.Now()
	for _, si := range list {
		counts[si.State]++
		age := now.Sub(si.CreatedAt).Seconds()
		sum += age
		for _, b := range ageBuckets {
			if age <= b {
				buckets[b]++
			}
		}
	}
	for _, st := range liveStates {
		ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
	ch <- prometheus.MustNewConstHistogram(ageDesc, uint64(len(list)), sum, buckets)
}
