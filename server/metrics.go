package server

import (
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/lifecycle"
	"github.com/airlock-sandbox/airlock/runner"
)

// metrics are the series the operations documents ask to monitor, kept
// by the server itself (no process-wide globals).
type metrics struct {
	sandboxes func() ([]runner.SandboxInfo, error)
	orphans   atomic.Uint64
	createDur *histogram
	execDur   *histogram
	runDur    *histogram
	termFail  atomic.Uint64
	rejected  *counterVec
	runs      *counterVec
}

// liveStates are the states a listed sandbox can be in, each written at
// every scrape (0 when none is in it).
var liveStates = []lifecycle.State{lifecycle.Requested, lifecycle.Pooled, lifecycle.Created, lifecycle.Ready, lifecycle.Running,
	lifecycle.Paused, lifecycle.Terminating, lifecycle.Failed, lifecycle.Orphaned}

var latencyBuckets = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

func newMetrics(sandboxes func() ([]runner.SandboxInfo, error)) *metrics {
	m := &metrics{
		sandboxes: sandboxes,
		createDur: newHistogram(latencyBuckets),
		execDur:   newHistogram(latencyBuckets),
		runDur:    newHistogram(latencyBuckets),
		runs: newCounterVec(string(runner.ReasonExited), string(runner.ReasonTimeout), string(runner.ReasonOOM), string(runner.ReasonOutputLimit),
			string(runner.ReasonPidsLimit), string(runner.ReasonKilled), string(runner.ReasonDestroyed), string(runner.ReasonError)),
	}
	var rejected []string
	for _, r := range []artifacts.Reason{artifacts.ReasonSymlink, artifacts.ReasonHardlink, artifacts.ReasonNotRegular, artifacts.ReasonBadName,
		artifacts.ReasonTooLarge, artifacts.ReasonTooMany, artifacts.ReasonTypeNotAllowed, artifacts.ReasonTypeMismatch, artifacts.ReasonHiddenName,
		runner.ReasonInvalidPath, runner.ReasonNotFound, runner.ReasonNoSpace, runner.ReasonIsDirectory} {
		rejected = append(rejected, string(r))
	}
	m.rejected = newCounterVec(rejected...)
	return m
}

// serve writes every series, then those more writes (read at the scrape).
func (m *metrics) serve(w http.ResponseWriter, more func(*expo)) {
	var e expo
	e.family("airlock_orphans_reaped_total", "Runs and sandboxes reaped by the server's sweep: orphaned, or past their deadline.", "counter")
	e.sample("airlock_orphans_reaped_total", float64(m.orphans.Load()))
	m.createDur.write(&e, "airlock_sandbox_create_duration_seconds", "Time to create a sandbox, ready for execs.")
	m.execDur.write(&e, "airlock_exec_duration_seconds", "Time of an exec in a live sandbox, request to Result.")
	m.runDur.write(&e, "airlock_run_duration_seconds", "Time of a one-shot run, request to Result.")
	e.family("airlock_termination_failures_total", "Sandbox destroys that failed.", "counter")
	e.sample("airlock_termination_failures_total", float64(m.termFail.Load()))
	m.rejected.write(&e, "airlock_rejected_files_total", "Refused file transfers and rejected artifacts, by reason word.", "reason")
	m.runs.write(&e, "airlock_runs_total", "One-shot runs and execs by how they ended (the Result's reason).", "reason")
	writeSandboxes(&e, m.sandboxes)
	more(&e)
	writeRuntime(&e)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write(e.b.Bytes())
}

// result counts a run's or exec's ending and its rejected artifacts.
func (m *metrics) result(res runner.Result) {
	if res.Reason != "" {
		m.runs.Inc(string(res.Reason))
	}
	for _, rj := range res.Rejected {
		m.rejected.Inc(string(rj.Reason))
	}
}

var ageBuckets = []float64{60, 300, 900, 1800, 3600, 7200, 21600, 86400}

// writeSandboxes reads the sandboxes from state at each scrape, so it
// counts those of the CLI and of earlier servers too.
func writeSandboxes(e *expo, sandboxes func() ([]runner.SandboxInfo, error)) {
	list, err := sandboxes()
	if err != nil {
		// A comment: the rest of the scrape stands.
		e.b.WriteString("# airlock_sandboxes_active: " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n")
		return
	}
	counts := map[lifecycle.State]int{}
	age := newHistogram(ageBuckets)
	now := time.Now()
	for _, si := range list {
		counts[si.State]++
		age.Observe(now.Sub(si.CreatedAt).Seconds())
	}
	e.family("airlock_sandboxes_active", "Live sandboxes by lifecycle state.", "gauge")
	for _, st := range liveStates {
		e.sample("airlock_sandboxes_active", float64(counts[st]), "state", string(st))
		delete(counts, st)
	}
	// A state not above still counts: a sandbox is never left out.
	for _, st := range slices.Sorted(maps.Keys(counts)) {
		e.sample("airlock_sandboxes_active", float64(counts[st]), "state", string(st))
	}
	age.write(e, "airlock_sandbox_age_seconds", "Age of the live sandboxes at scrape time.")
}
