package server

// Warm pools are the service's (service.StartPools); the server starts
// them with itself, refreshes them while it serves, and reports them.

import (
	"time"

	"github.com/airlock-sandbox/airlock/runner"
)

// poolCheckEvery is how often the server looks for changed templates.
const poolCheckEvery = time.Second

// writePools reports every pool's counters at each scrape.
func (s *Server) writePools(e *expo) {
	type row struct {
		name string
		st   runner.PoolStats
		repl int64
	}
	var rows []row
	for _, p := range s.svc.PoolStats() {
		rows = append(rows, row{p.Key, p.Stats, p.Replaced})
	}
	for _, f := range []struct {
		name, help, typ string
		v               func(r row) float64
	}{
		{"airlock_pool_size", "Sandboxes a template's warm pool keeps.", "gauge", func(r row) float64 { return float64(r.st.Size) }},
		{"airlock_pool_ready", "Pooled sandboxes ready to be claimed.", "gauge", func(r row) float64 { return float64(r.st.Ready) }},
		{"airlock_pool_claims_total", "Runs that took a pooled sandbox.", "counter", func(r row) float64 { return float64(r.st.Claims) }},
		{"airlock_pool_misses_total", "Runs of a pooled template that started cold (or failed, under --pool-exhausted fail).", "counter", func(r row) float64 { return float64(r.st.Misses) }},
		{"airlock_pool_refill_failures_total", "Pooled sandboxes that could not be made.", "counter", func(r row) float64 { return float64(r.st.RefillFailures) }},
		{"airlock_pool_replaced_total", "Pooled sandboxes replaced unused: past --pool-max-age, or their template changed.", "counter", func(r row) float64 { return float64(r.repl) }},
	} {
		e.family(f.name, f.help, f.typ)
		for _, r := range rows {
			e.sample(f.name, f.v(r), "template", r.name)
		}
	}
	e.family("airlock_pool_refill_seconds", "Time to make a pooled sandbox (sum and count).", "summary")
	for _, r := range rows {
		e.sample("airlock_pool_refill_seconds_sum", float64(r.st.RefillMS)/1000, "template", r.name)
		e.sample("airlock_pool_refill_seconds_count", float64(r.st.Refills), "template", r.name)
	}
}
